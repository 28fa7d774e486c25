"""Activation checkpointing: a block's activations recomputed in backward instead of kept from forward.

A training step keeps every intermediate activation of the forward pass until
backward uses it; at LLM sizes those activations, not the weights, fill the
GPU. Checkpointing a block keeps only its inputs and runs its forward again
during backward: peak memory falls by about the activations inside the
checkpointed blocks, and the step pays one more forward of each.

Which blocks: the workload's repeated blocks (``TrainStep.blocks``, the
transformer layers of ``llm``, ``bert`` and ``vit``), every one, or blocks
0, n, 2n, ... with ``every = n``. A workload that names no blocks is skipped
with the reason, when the matrix is expanded (the workload's ``blocks`` trait).

``mode``:

* ``full``: the whole block is recomputed (torchtitan's ``full``).
* ``selective``: torchtitan's per-op policy (``selective``, option ``op``)
  through ``torch.utils.checkpoint.create_selective_checkpoint_contexts``:
  the outputs of the expensive ops are kept and everything else (norms,
  activations, RoPE, casts) recomputed. Kept: attention
  (``scaled_dot_product_attention``'s kernels), FP8 products
  (``_scaled_mm``), the amax reductions of FP8's scales, FSDP2's
  reduce-scatter, and every other matrix product (``mm``, counted
  separately in forward and recomputation, so the recomputation keeps to the
  same choice). Half the matmuls recomputed is torchtitan's trade: most of
  the memory of keeping all of them, little of the time of recomputing all.

How: each chosen block is replaced in its container by a
:class:`~ampsuite.plugins.techniques._checkpointing.Checkpointed` module that
calls ``torch.utils.checkpoint.checkpoint`` with ``use_reentrant=False`` (the
variant that composes with ``torch.compile``, autocast, FSDP2 and inputs
without gradients); parameter names gain ``.block`` (``layers.0.block.attention.wq.weight``),
the parameters stay the same objects, so the optimizer is untouched. Order 75:
after the techniques that change modules inside blocks (``fp8`` 35, FP32
islands 40, ``int8`` 55), before ``torch-compile`` (80) and ``fsdp2`` (85),
which then compile and shard the checkpointed blocks, as torchtitan applies
them. The record's ``notes.activation_checkpointing`` lists what was wrapped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import Technique, hookimpl, lazy

__all__ = ["NAME", "CheckpointOptions"]

NAME = "activation-checkpointing"


@dataclass(frozen=True)
class CheckpointOptions:
    mode: Literal["full", "selective"] = field(
        default="full",
        metadata={"help": "full: recompute whole blocks; selective: keep matmul and attention outputs (torchtitan op)"},
    )
    every: int = field(default=1, metadata={"help": "checkpoint blocks 0, N, 2N, ... (1: every block)", "ge": 1})
    preserve_rng_state: bool = field(
        default=True, metadata={"help": "replay dropout exactly in the recomputation (saves the RNG state per block)"}
    )


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name=NAME,
            summary="recompute the workload's blocks in backward (torch.utils.checkpoint; full or selective per op)",
            apply=lazy("ampsuite.plugins.techniques._checkpointing:apply"),
            options=CheckpointOptions,
            order=75,
            requires_traits=frozenset({"blocks"}),
        )
    ]
