"""The ResNet family (torchvision) on synthetic or on-disk images.

At the default base width (64) the model is torchvision's own ResNet; a reduced
width (for CPU suites) assembles the same blocks with every stage narrowed in
proportion, because torchvision's ``ResNet`` hard-codes 64 input planes.
BatchNorm layers stay ``nn.BatchNorm2d`` and the loss an ``nn.CrossEntropyLoss``
module, so techniques can find and replace them.

Two data sources:

* ``synthetic`` (default): a pool of ``POOL_BATCHES`` batches made once and
  kept on the device, so the step measures the model alone.
* ``disk``: a memory-mapped uint8 NHWC array written by :func:`prepare`
  (``ampsuite make-data``), read per sample through a plain DataLoader in the
  main process, the untuned pipeline that loading techniques act on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from torch.utils.data import Dataset
from torchvision.models import resnet as tv

from plugins.workloads._data import (
    POOL_BATCHES,
    DiskImages,
    cycling,
    device_pool,
    image_collate,
    loader_data,
    prepare_disk_images,
    synthetic_images,
)
from suite import Batch, BuildContext, TrainStep, Workload, hookimpl

BlockType = type[tv.BasicBlock] | type[tv.Bottleneck]

DEPTHS: dict[int, tuple[BlockType, tuple[int, int, int, int]]] = {
    18: (tv.BasicBlock, (2, 2, 2, 2)),
    34: (tv.BasicBlock, (3, 4, 6, 3)),
    50: (tv.Bottleneck, (3, 4, 6, 3)),
    101: (tv.Bottleneck, (3, 4, 23, 3)),
    152: (tv.Bottleneck, (3, 8, 36, 3)),
}


@dataclass(frozen=True)
class ResNetOptions:
    depth: int = field(default=50, metadata={"help": "ResNet depth: 18, 34, 50, 101 or 152"})
    width: int = field(default=64, metadata={"help": "base width (channels of the stem); 64 is torchvision's ResNet"})
    image_size: int = field(default=224, metadata={"help": "input height and width in pixels"})
    classes: int = field(default=1000, metadata={"help": "output classes"})
    optimizer: Literal["sgd", "adamw"] = field(default="sgd", metadata={"help": "sgd (momentum 0.9) or adamw"})
    lr: float = field(default=0.01, metadata={"help": "learning rate"})
    weight_decay: float = field(default=1e-4, metadata={"help": "weight decay"})
    source: Literal["synthetic", "disk"] = field(
        default="synthetic",
        metadata={"help": "synthetic: a pool of batches kept on the device; disk: a memory-mapped file via DataLoader"},
    )
    disk_images: int = field(default=2048, metadata={"help": "images in the on-disk data set (source='disk')"})

    def __post_init__(self) -> None:
        if self.depth not in DEPTHS:
            raise ValueError(f"depth must be one of {sorted(DEPTHS)}, got {self.depth!r}")
        for name in ("width", "image_size", "classes", "disk_images"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.optimizer not in ("sgd", "adamw"):
            raise ValueError(f"optimizer must be 'sgd' or 'adamw', got {self.optimizer!r}")
        if self.source not in ("synthetic", "disk"):
            raise ValueError(f"source must be 'synthetic' or 'disk', got {self.source!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")


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
    """torchvision's ResNet at width 64, :class:`NarrowResNet` otherwise (uses the global generator)."""
    block, layers = DEPTHS[options.depth]
    if options.width == 64:
        return tv.ResNet(block, list(layers), num_classes=options.classes)
    return NarrowResNet(block, layers, options.width, options.classes)


def prepare(options: ResNetOptions, data_dir: str) -> str:
    """Write the on-disk data set that ``source='disk'`` reads (idempotent); returns its folder.

    With ``source='synthetic'`` nothing is read from disk, so nothing is
    written and the result is an empty string.
    """
    if options.source != "disk":
        return ""
    return str(prepare_disk_images(data_dir, "images", options.disk_images, options.image_size, options.classes))


def _optimizer(options: ResNetOptions, model: nn.Module) -> torch.optim.Optimizer:
    if options.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=options.lr, momentum=0.9, weight_decay=options.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=options.weight_decay, fused=False)


def build(options: ResNetOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    model = make_model(options).to(ctx.device)
    data: Callable[[], Batch]
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor]]
    if options.source == "disk":
        whole = (options.disk_images // ctx.batch_size) * ctx.batch_size
        if whole == 0:
            raise ValueError(f"disk_images ({options.disk_images}) must be >= the batch size ({ctx.batch_size})")
        dataset = DiskImages(prepare(options, ctx.data_dir), length=whole)
        data = loader_data(dataset, ctx.batch_size, image_collate, ctx.device)
    else:
        dataset = synthetic_images(POOL_BATCHES * ctx.batch_size, options.image_size, options.classes, ctx.seed)
        data = cycling(device_pool(dataset, ctx.batch_size, image_collate, ctx.device, POOL_BATCHES))
    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size,
        data=data,
        model=model,
        optimizer=_optimizer(options, model),
        loss_fn=nn.CrossEntropyLoss(),
        dataset=dataset,
        collate=image_collate,
    )


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="resnet",
            summary="torchvision ResNet (depth 18-152, ResNet-50 by default) on synthetic or on-disk images",
            build=build,
            options=ResNetOptions,
            unit="images",
            traits=frozenset({"model", "conv", "data-path"}),
            prepare=prepare,
        )
    ]
