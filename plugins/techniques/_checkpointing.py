"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.checkpointing` (imported on first use)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques.checkpointing import NAME, CheckpointOptions

__all__ = ["SAVED_OPS", "Checkpointed", "apply", "selective_context"]


def _ops(*names: str) -> frozenset[Any]:
    """The overloads this torch has of ``namespace.op.overload`` names (a build may lack some kernels)."""
    found = set()
    for name in names:
        namespace, op, overload = name.split(".")
        packet = getattr(getattr(torch.ops, namespace), op, None)
        if packet is not None and hasattr(packet, overload):
            found.add(getattr(packet, overload))
    return frozenset(found)


MM = torch.ops.aten.mm.default
SAVED_OPS = _ops(
    "aten.mm.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_mm.default",
    "aten.max.default",
    "_c10d_functional.reduce_scatter_tensor.default",
)
"""Ops whose outputs the selective policy keeps (every other ``mm`` of them; torchtitan's ``op`` list)."""


def _policy() -> Callable[..., CheckpointPolicy]:
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func == MM:
            phase = "recompute" if ctx.is_recompute else "forward"
            counts[phase] += 1
            if counts[phase] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def selective_context() -> Any:
    """A fresh pair of selective-checkpoint contexts (the matmul count starts anew for each block call)."""
    return create_selective_checkpoint_contexts(_policy())


class Checkpointed(nn.Module):
    """Runs ``block`` under activation checkpointing whenever gradients are recorded."""

    def __init__(self, block: nn.Module, *, selective: bool, preserve_rng_state: bool) -> None:
        super().__init__()
        self.block = block
        self.selective = selective
        self.preserve_rng_state = preserve_rng_state

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # evaluation keeps nothing, so there is nothing to recompute
            return self.block(*args, **kwargs)
        extra: dict[str, Any] = {"context_fn": selective_context} if self.selective else {}
        return checkpoint(
            self.block, *args, use_reentrant=False, preserve_rng_state=self.preserve_rng_state, **extra, **kwargs
        )


def blocks_of(step: TrainStep, technique: str) -> Any:
    """The step's block container, or the cell skipped with the reason (for every per-block technique)."""
    try:
        return step.model_blocks()
    except LookupError as exc:
        raise SkipCell(f"{technique}: {exc}") from None


def apply(step: TrainStep, options: CheckpointOptions) -> TrainStep:
    blocks = blocks_of(step, NAME)
    selective = options.mode == "selective"
    wrap = functools.partial(Checkpointed, selective=selective, preserve_rng_state=options.preserve_rng_state)
    chosen = list(range(0, len(blocks), options.every))
    for index in chosen:
        if not isinstance(blocks[index], Checkpointed):
            blocks[index] = wrap(blocks[index])
    step.notes["activation_checkpointing"] = {
        "mode": options.mode,
        "blocks": len(blocks),
        "checkpointed": [f"{step.blocks}.{i}" for i in chosen],
        "preserve_rng_state": options.preserve_rng_state,
    }
    if selective:
        step.notes["activation_checkpointing"]["saved_ops"] = sorted(str(op) for op in SAVED_OPS)
    return step
