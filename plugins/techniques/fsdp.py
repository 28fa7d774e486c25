"""FSDP2: parameters, gradients and optimizer state sharded over the ranks, with FSDP's mixed-precision policy.

``fsdp2`` applies ``torch.distributed.fsdp.fully_shard`` to each of the
workload's repeated blocks (``TrainStep.blocks``) and then to the whole model
(the root: embeddings, final norm, head), as torchtitan does, with a
``MixedPrecisionPolicy(param_dtype, reduce_dtype, output_dtype)``: FSDP
all-gathers each block's parameters in ``param_dtype`` just before the block
runs, reduce-scatters its gradients in ``reduce_dtype``, and keeps float32
shards for the optimizer. ``param_dtype = "bfloat16"`` is how torchtitan
trains in bf16 (without autocast: the whole forward then runs in bf16);
with ``amp-bf16`` as well, autocast keeps its float32 ops (softmax, norms,
the loss) in float32. ``reshard_after_forward`` frees the gathered
parameters after each block's forward and gathers them again for backward
(ZeRO-3); the last block keeps them, since backward starts there. The
workload's optimizer is rebuilt, same class and hyperparameters, over the
sharded parameters.

Where it runs: in a data-parallel cell (``gpus = N``) the mesh is the cell's
N ranks and the model is not wrapped in DistributedDataParallel (FSDP2 does
the gradient reduction); every rank trains on the same seeded batches, so
the loss equals the one-process cell's. In a one-process cell it starts a
one-rank process group (NCCL on a GPU, gloo on a CPU) and shards over it,
which measures FSDP2's own cost (hooks, casts, the copies of all-gather and
reduce-scatter) on one device.

Composition: order 85, after ``fp8`` (35), ``activation-checkpointing``
(75) and ``torch-compile`` (80), the order torchtitan applies them: the
blocks it shards are the checkpointed and compiled ones. ``torch-compile``
must then compile per block (``scope = "block"``): a whole-model compile
would trace FSDP2's hooks. ``fp8`` with ``fsdp_all_gather`` all-gathers the
converted weights in float8. Conflicts with ``cuda-graphs`` (collectives
under capture), ``half-weights`` (FSDP keeps its own float32 masters) and
``grad-accumulation`` (which would reduce-scatter every micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import CheckContext, Technique, hookimpl, lazy

__all__ = ["FsdpOptions", "check"]

Dtype = Literal["float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class FsdpOptions:
    param_dtype: Dtype = field(default="bfloat16", metadata={"help": "dtype parameters are all-gathered and used in"})
    reduce_dtype: Dtype = field(default="float32", metadata={"help": "dtype gradients are reduce-scattered in"})
    output_dtype: Literal["none", "float32", "bfloat16", "float16"] = field(
        default="none", metadata={"help": "dtype each sharded module's outputs are cast to (none: as computed)"}
    )
    reshard_after_forward: bool = field(
        default=True, metadata={"help": "free gathered parameters after each block's forward (ZeRO-3)"}
    )


def check(ctx: CheckContext) -> str | None:
    compile_options = ctx.technique_options.get("torch-compile")
    if compile_options is not None and getattr(compile_options, "scope", "model") != "block":
        return 'with torch-compile, compile per block (scope = "block"): a whole-model compile traces FSDP2\'s hooks'
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="fsdp2",
            summary="FSDP2 fully_shard per block and at the root with a MixedPrecisionPolicy (one-rank mesh alone)",
            apply=lazy("ampsuite.plugins.techniques._fsdp:apply"),
            options=FsdpOptions,
            order=85,
            conflicts=frozenset({"cuda-graphs", "half-weights", "grad-accumulation"}),
            check=check,
            requires_traits=frozenset({"blocks"}),
        )
    ]
