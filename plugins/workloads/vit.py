"""torchvision's VisionTransformer (ViT-B/16 by default) on synthetic images, trained with AdamW.

The model is torchvision's class, unchanged: its LayerNorms are ``nn.LayerNorm``
and its attention is ``nn.MultiheadAttention``, which reaches
``F.scaled_dot_product_attention`` in training. Inputs come from the same kind
of host dataset as the ResNet's synthetic source, so loading techniques apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Workload, hookimpl, lazy
from ampsuite.plugins.workloads.optimizers import OPTIMIZER_HELP, OptimizerName, check_optimizer, validate_optimizer


@dataclass(frozen=True)
class ViTOptions:
    image_size: int = field(default=224, metadata={"help": "input height and width in pixels"})
    patch_size: int = field(default=16, metadata={"help": "patch size (must divide image_size)"})
    layers: int = field(default=12, metadata={"help": "encoder layers"})
    heads: int = field(default=12, metadata={"help": "attention heads (must divide hidden)"})
    hidden: int = field(default=768, metadata={"help": "hidden size"})
    mlp: int = field(default=3072, metadata={"help": "MLP inner size"})
    classes: int = field(default=1000, metadata={"help": "output classes"})
    dropout: float = field(default=0.0, metadata={"help": "dropout probability (torchvision's default, 0)"})
    optimizer: OptimizerName = field(default="adamw", metadata={"help": OPTIMIZER_HELP})
    lr: float = field(default=1e-4, metadata={"help": "learning rate"})
    weight_decay: float = field(default=0.05, metadata={"help": "weight decay"})

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "layers", "heads", "hidden", "mlp", "classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.image_size % self.patch_size:
            raise ValueError(f"patch_size ({self.patch_size!r}) must divide image_size ({self.image_size!r})")
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads!r}) must divide hidden ({self.hidden!r})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        validate_optimizer(self.optimizer)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")


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
