"""The ResNet family (torchvision) on synthetic or on-disk images.

At the default base width (64) the model is torchvision's own ResNet; a reduced
width (for CPU suites) assembles the same blocks with every stage narrowed in
proportion, because torchvision's ``ResNet`` hard-codes 64 input planes.
BatchNorm layers stay ``nn.BatchNorm2d`` and the loss an ``nn.CrossEntropyLoss``
module, so techniques can find and replace them.

Three data sources:

* ``synthetic`` (default): a pool of ``POOL_BATCHES`` batches made once and
  kept on the device, so the step measures the model alone.
* ``disk``: a memory-mapped uint8 NHWC array written by :func:`prepare`
  (``ampsuite make-data``), read per sample through a plain DataLoader in the
  main process, the untuned pipeline that loading techniques act on.
* ``digits``: real images, scikit-learn's handwritten digits (``_digits.py``),
  with a held-out split that quality suites evaluate (docs/quality.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import Workload, hookimpl, lazy
from ampsuite.plugins.workloads import fields
from ampsuite.plugins.workloads.optimizers import OptimizerName, check_optimizer

DEPTHS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("BasicBlock", (2, 2, 2, 2)),
    34: ("BasicBlock", (3, 4, 6, 3)),
    50: ("Bottleneck", (3, 4, 6, 3)),
    101: ("Bottleneck", (3, 4, 23, 3)),
    152: ("Bottleneck", (3, 8, 36, 3)),
}
"""Block (a torchvision.models.resnet class, named so that this module needs no torchvision) and stage depths."""


@dataclass(frozen=True)
class ResNetOptions:
    depth: int = field(default=50, metadata={"help": "ResNet depth", "choices": tuple(DEPTHS)})
    width: int = field(
        default=64, metadata={"help": "base width (channels of the stem); 64 is torchvision's ResNet", "ge": 1}
    )
    image_size: int = fields.image_size(224)
    classes: int = fields.classes(1000)
    optimizer: OptimizerName = fields.optimizer("sgd")
    lr: float = fields.learning_rate(0.01)
    weight_decay: float = fields.weight_decay(1e-4)
    source: Literal["synthetic", "disk", "digits"] = field(
        default="synthetic",
        metadata={
            "help": "synthetic: a pool of batches kept on the device; disk: a memory-mapped file via DataLoader; "
            "digits: scikit-learn's handwritten digits, shuffled by the seed, with a held-out split (needs "
            "classes >= 10; docs/quality.md)"
        },
    )
    disk_images: int = field(default=2048, metadata={"help": "images in the on-disk data set (source='disk')", "ge": 1})
    stem: Literal["imagenet", "small"] = field(
        default="imagenet",
        metadata={
            "help": "imagenet: 7x7 stride-2 convolution and max-pool; small: one 3x3 stride-1 convolution, no "
            "pool (the CIFAR ResNet's, for images of a few dozen pixels)"
        },
    )

    def __post_init__(self) -> None:
        if self.source == "digits" and self.classes < 10:
            raise ValueError(f"source = 'digits' has 10 classes: classes must be >= 10, got {self.classes}")


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="resnet",
            summary="torchvision ResNet (depth 18-152, ResNet-50 by default) on synthetic or on-disk images",
            build=lazy("ampsuite.plugins.workloads._cnn:build"),
            options=ResNetOptions,
            unit="images",
            traits=frozenset({"model", "conv", "data-path"}),
            check=check_optimizer,
            prepare=lazy("ampsuite.plugins.workloads._cnn:prepare"),
        )
    ]
