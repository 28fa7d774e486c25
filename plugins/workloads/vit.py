"""torchvision's VisionTransformer (ViT-B/16 by default) on synthetic images, trained with AdamW.

The model is torchvision's class, unchanged: its LayerNorms are ``nn.LayerNorm``
and its attention is ``nn.MultiheadAttention``, which reaches
``F.scaled_dot_product_attention`` in training. Inputs come from the same kind
of host dataset as the ResNet's synthetic source, so loading techniques apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Workload, hookimpl, lazy
from ampsuite.plugins.workloads import fields
from ampsuite.plugins.workloads.optimizers import OptimizerName, check_optimizer


@dataclass(frozen=True)
class ViTOptions:
    image_size: int = fields.image_size(224)
    patch_size: int = field(default=16, metadata={"help": "patch size (must divide image_size)", "ge": 1})
    layers: int = fields.encoder_layers(12)
    heads: int = fields.heads(12)
    hidden: int = fields.hidden(768)
    mlp: int = field(default=3072, metadata={"help": "MLP inner size", "ge": 1})
    classes: int = fields.classes(1000)
    dropout: float = fields.dropout("torchvision's default, 0")
    optimizer: OptimizerName = fields.optimizer("adamw")
    lr: float = fields.learning_rate(1e-4)
    weight_decay: float = fields.weight_decay(0.05)

    def __post_init__(self) -> None:
        fields.must_divide("patch_size", self.patch_size, "image_size", self.image_size)
        fields.must_divide("heads", self.heads, "hidden", self.hidden)


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="vit",
            summary="torchvision VisionTransformer (ViT-B/16 by default) on synthetic images; AdamW",
            build=lazy("ampsuite.plugins.workloads._vit:build"),
            options=ViTOptions,
            unit="images",
            traits=frozenset({"model", "data-path", "blocks"}),
            check=check_optimizer,
        )
    ]
