"""persistent-batch-norm: training batch norm + ReLU as one persistent Triton kernel a pass.

Session 20 (docs/tune.md) timed ResNet-50's batch norms one shape at a time on an H200: inductor runs each batch
norm + ReLU in five kernels at 1.3-2.2x the traffic bound, where a residual add does not follow it. This technique
traces the model with ``torch.fx`` and runs each ``BatchNorm2d -> ReLU`` whose activation is at least ``min_mb``
through :mod:`plugins.techniques._persistent_bn_kernels`: one launch a pass of a grid the GPU holds at once, the
statistics, a barrier in global memory, then the apply, read back from L2 where it fits. Both kernels sit behind
``torch.library.triton_op``, so torch.compile launches them as they are and compiles the rest.

Measured on an H200 (session 21, torch 2.11, batch 256, fp16, channels-last; ``reports/h200/bn_persistent.py``),
forward + backward as CUDA graph replays against inductor's kernels, the kernels' second version (their sums merged
by every program): ResNet-50's stem (64 x 112x112, 411 MB) 1.075 against 1.347 ms; 512 x 14x14 and 512 x 7x7
level; the other shapes 4-15% slower (64 x 56x56 0.302 against 0.280). Hence ``min_mb``: by default only
activations of 256 MB and more take the kernels, which in ResNet-50 at batch 256 is the stem's. The third version,
this one (sums by atomic adds), took 0.156 ms off ResNet-50's tuned step in session 22 (7,772.6 against 7,735.9
img/s on one H200, docs/tune.md "Session 22", the kernels launched between the compiled graphs); with
``min_mb = 0``, 42 graph breaks, the cell gave no result within 450 s. The kernels run outside torch.compile's
graphs on purpose (``_persistent_batch_norm._outside_graphs`` says why): inside them (session 23) the stem's cell
gave no step within 422 s. Session 23 timed this version shape by shape: all 33 pairs 5.967 ms forward + backward
against inductor's 6.214, of which the stem 1.022 against 1.335 and the other 32 4.945 against 4.879, so
``min_mb``'s default stands. The running statistics and ``num_batches_tracked`` update as ``nn.BatchNorm2d``'s do.

It needs CUDA (Triton) and channels-last activations, and says so in ``requires``: without channels-last every call
would fall back to PyTorch's batch norm, and the matrix prunes such a combination before anything runs. So ``ampsuite
tune`` keeps it in a path's pool, untried, until the path holds channels-last (a skip at apply time instead took it
out of the pool at the path's first round: session 24's replay of the next ResNet-50 resume,
reports/h200/session24/replay.py). A model ``torch.fx`` cannot trace, or with no ``BatchNorm2d -> ReLU``, is a skip
with the reason. It conflicts with cudnn-batch-norm and fp32-islands, which replace the same modules' forward.
Order 42, with cudnn-batch-norm: a model rewrite after AMP (30) and before torch-compile (80).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType

from suite import CheckContext, Technique, TrainStep, hookimpl

AMPSUITE_PLUGIN_API = 1

__all__ = ["PersistentBatchNormOptions", "apply", "check"]


@dataclass(frozen=True)
class PersistentBatchNormOptions:
    min_mb: float = field(
        default=256.0,
        metadata={
            "help": "the smallest activation (MB, 1e6 bytes) whose batch norm + ReLU runs the persistent kernels; "
            "smaller ones stay PyTorch's (inductor's under torch-compile); 0 takes every one"
        },
    )

    num_warps: int = field(
        default=4,
        metadata={
            "help": "warps a program of the kernels (4 or 8): 8 keeps the 128 x 64 tile from spilling registers "
            "on sm_90 but ran 9-25% slower on every ResNet-50 shape on an H200 (session 23)"
        },
    )

    def __post_init__(self) -> None:
        if self.min_mb < 0:
            raise ValueError(f"min_mb must be 0 or more, got {self.min_mb}")
        if self.num_warps not in (4, 8):
            raise ValueError(f"num_warps must be 4 or 8, got {self.num_warps}")


def _impl() -> ModuleType:
    # The torch-dependent part lives in plugins.techniques._persistent_batch_norm: registering this plugin
    # (ampsuite list, --help, suite-file checks) must not import torch.
    return importlib.import_module("plugins.techniques._persistent_batch_norm")


def check(ctx: CheckContext) -> str | None:
    if "model" not in ctx.workload.traits:
        return f"needs a workload with a model (trait 'model'); {ctx.workload.name!r} has none"
    return None


def apply(step: TrainStep, options: PersistentBatchNormOptions) -> TrainStep:
    return _impl().apply(step, options)


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="persistent-batch-norm",
            summary="batch norm + ReLU as one persistent Triton kernel a pass (statistics, grid barrier, apply)",
            apply=apply,
            options=PersistentBatchNormOptions,
            order=42,
            requires=frozenset({"cuda", "channels-last"}),
            conflicts=frozenset({"cudnn-batch-norm", "fp32-islands"}),
            check=check,
        )
    ]
