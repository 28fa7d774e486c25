"""Option fields the built-in workloads share, declared once with their rules (torch-free; registers nothing).

A factory returns the ``dataclasses.field`` of one option at a workload's own default, so that
ResNet, BERT and ViT list the optimizer's options, the image classifiers their ``image_size`` and
``classes``, and the two encoders (BERT, ViT) their ``layers``, ``hidden`` and ``heads`` with one
help text and one rule each, in their own order. :func:`must_divide` is the cross-field rule of
the attention and patch sizes.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ampsuite.plugins.workloads.optimizers import OPTIMIZER_HELP, OptimizerName

__all__ = [
    "classes",
    "dropout",
    "encoder_layers",
    "heads",
    "hidden",
    "image_size",
    "learning_rate",
    "must_divide",
    "optimizer",
    "weight_decay",
]


def optimizer(default: OptimizerName) -> Any:
    """The ``optimizer`` option (its names are :data:`~ampsuite.plugins.workloads.optimizers.OptimizerName`)."""
    return field(default=default, metadata={"help": OPTIMIZER_HELP})


def learning_rate(default: float) -> Any:
    return field(default=default, metadata={"help": "learning rate", "gt": 0})


def weight_decay(default: float) -> Any:
    return field(default=default, metadata={"help": "weight decay", "ge": 0})


def dropout(note: str) -> Any:
    """The ``dropout`` option, off by default so that cells differing only in precision compute one function."""
    return field(default=0.0, metadata={"help": f"dropout probability ({note})", "ge": 0, "lt": 1})


def image_size(default: int) -> Any:
    return field(default=default, metadata={"help": "input height and width in pixels", "ge": 1})


def classes(default: int) -> Any:
    return field(default=default, metadata={"help": "output classes", "ge": 1})


def encoder_layers(default: int) -> Any:
    return field(default=default, metadata={"help": "encoder layers", "ge": 1})


def hidden(default: int) -> Any:
    return field(default=default, metadata={"help": "hidden size", "ge": 1})


def heads(default: int) -> Any:
    """The ``heads`` option of an encoder; its ``__post_init__`` checks ``must_divide("heads", ..., "hidden", ...)``."""
    return field(default=default, metadata={"help": "attention heads (must divide hidden)", "ge": 1})


def must_divide(part: str, part_value: int, whole: str, whole_value: int) -> None:
    """Raise the one-line ``ValueError`` of ``part`` not dividing ``whole`` (for ``__post_init__``)."""
    if whole_value % part_value:
        raise ValueError(f"{part} ({part_value!r}) must divide {whole} ({whole_value!r})")
