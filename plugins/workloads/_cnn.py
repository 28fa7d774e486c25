"""The torch-dependent part of :mod:`ampsuite.plugins.workloads.cnn` (imported on first use)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import Dataset
from torchvision.models import resnet as tv

from ampsuite import Batch, BuildContext, TrainStep
from ampsuite.plugins.workloads._data import (
    POOL_BATCHES,
    DiskImages,
    Shuffled,
    cycling,
    device_pool,
    held_out,
    image_collate,
    loader_data,
    prepare_disk_images,
    real_data,
    synthetic_images,
)
from ampsuite.plugins.workloads._digits import digits_notes, digits_split, prepare_digits
from ampsuite.plugins.workloads._optim import trained_step
from ampsuite.plugins.workloads.cnn import DEPTHS, ResNetOptions

BlockType = type[tv.BasicBlock] | type[tv.Bottleneck]
BLOCKS: dict[str, BlockType] = {"BasicBlock": tv.BasicBlock, "Bottleneck": tv.Bottleneck}


class NarrowResNet(nn.Module):
    """torchvision's ResNet layout with a base width other than 64.

    The same stem, the same ``BasicBlock``/``Bottleneck`` modules, stage widths
    ``width * (1, 2, 4, 8)`` and torchvision's initialisation; at ``width=64``
    its parameters have exactly torchvision's shapes.
    """

    def __init__(self, block: BlockType, layers: tuple[int, int, int, int], width: int, classes: int) -> None:
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0], 1)
        self.layer2 = self._make_layer(block, width * 2, layers[1], 2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], 2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block: BlockType, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_model(options: ResNetOptions) -> nn.Module:
    """torchvision's ResNet at width 64, :class:`NarrowResNet` otherwise (uses the global generator); with
    ``stem = "small"`` the stem is one 3x3 stride-1 convolution without the max-pool."""
    name, layers = DEPTHS[options.depth]
    block = BLOCKS[name]
    model: nn.Module
    if options.width == 64:
        model = tv.ResNet(block, list(layers), num_classes=options.classes)
    else:
        model = NarrowResNet(block, layers, options.width, options.classes)
    if options.stem == "small":
        model.conv1 = nn.Conv2d(3, options.width, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = nn.Identity()
    return model


def prepare(options: ResNetOptions, data_dir: str) -> str:
    """Write the on-disk data set that ``source='disk'`` or ``'digits'`` reads (idempotent); returns its folder.

    With ``source='synthetic'`` nothing is read from disk, so nothing is
    written and the result is an empty string.
    """
    if options.source == "digits":
        return str(prepare_digits(data_dir, options.image_size))
    if options.source != "disk":
        return ""
    return str(prepare_disk_images(data_dir, "images", options.disk_images, options.image_size, options.classes))


def build(options: ResNetOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    model = make_model(options).to(ctx.device)
    data: Callable[[], Batch]
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor]]
    if options.source == "digits":
        folder = prepare_digits(ctx.data_dir, options.image_size)
        dataset = Shuffled(digits_split(folder, "train"), ctx.seed)
        data = real_data(dataset, ctx.batch_size, image_collate, ctx.device)
        step = trained_step(
            ctx,
            options,
            model,
            data=data,
            loss_fn=nn.CrossEntropyLoss(),
            dataset=dataset,
            collate=image_collate,
            eval_data=held_out(digits_split(folder, "eval"), ctx.batch_size, image_collate, ctx.device),
            classifies=True,
        )
        step.notes["data"] = digits_notes(folder)
        return step
    if options.source == "disk":
        whole = (options.disk_images // ctx.batch_size) * ctx.batch_size
        if whole == 0:
            raise ValueError(f"disk_images ({options.disk_images}) must be >= the batch size ({ctx.batch_size})")
        dataset = DiskImages(prepare(options, ctx.data_dir), length=whole)
        data = loader_data(dataset, ctx.batch_size, image_collate, ctx.device)
    else:
        dataset = synthetic_images(POOL_BATCHES * ctx.batch_size, options.image_size, options.classes, ctx.seed)
        data = cycling(device_pool(dataset, ctx.batch_size, image_collate, ctx.device, POOL_BATCHES))
    loss_fn = nn.CrossEntropyLoss()
    return trained_step(ctx, options, model, data=data, loss_fn=loss_fn, dataset=dataset, collate=image_collate)
