"""The torch-dependent part of :mod:`ampsuite_extras.checkpointing` (imported when a cell builds or applies it)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from ampsuite import SkipCell, TrainStep
from torch import nn
from torch.utils.checkpoint import checkpoint

from ampsuite_extras.checkpointing import (
    NAME,
    NOTES_KEY,
    CheckpointOptions,
)


class Checkpointed(nn.Module):
    """Runs ``block`` under activation checkpointing whenever gradients are being recorded."""

    def __init__(self, block: nn.Module, *, preserve_rng_state: bool = True) -> None:
        super().__init__()
        self.block = block
        self.preserve_rng_state = preserve_rng_state

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # evaluation: nothing is saved, so nothing to recompute
            return self.block(*args, **kwargs)
        return checkpoint(self.block, *args, use_reentrant=False, preserve_rng_state=self.preserve_rng_state, **kwargs)


def find_blocks(model: nn.Module, attribute: str) -> nn.ModuleList | nn.Sequential:
    """The container at ``model.<attribute>``.

    :raises SkipCell: when the model has no such attribute, or it is not a
        non-empty ``nn.ModuleList`` / ``nn.Sequential``.
    """
    try:
        blocks = functools.reduce(getattr, attribute.split("."), model)
    except AttributeError:
        raise SkipCell(
            f"{NAME}: the model ({type(model).__name__}) has no blocks at model.{attribute}; "
            "set the technique's 'attribute' option to where its blocks are"
        ) from None
    if not isinstance(blocks, nn.ModuleList | nn.Sequential):
        raise SkipCell(f"{NAME}: model.{attribute} is a {type(blocks).__name__}, not an nn.ModuleList or nn.Sequential")
    if len(blocks) == 0:
        raise SkipCell(f"{NAME}: model.{attribute} is empty")
    return blocks


def apply(step: TrainStep, options: CheckpointOptions) -> TrainStep:
    """Wrap every ``options.every``-th block in :class:`Checkpointed`; record which in ``step.notes``."""
    if step.model is None:
        raise SkipCell(f"{NAME}: this workload's step has no model")
    blocks = find_blocks(step.model, options.attribute)
    wrapped = []
    for index in range(0, len(blocks), options.every):
        if not isinstance(blocks[index], Checkpointed):
            blocks[index] = Checkpointed(blocks[index], preserve_rng_state=options.preserve_rng_state)
        wrapped.append(f"{options.attribute}.{index}")
    step.notes[NOTES_KEY] = {
        "attribute": options.attribute,
        "blocks": len(blocks),
        "checkpointed": wrapped,
        "preserve_rng_state": options.preserve_rng_state,
    }
    return step
