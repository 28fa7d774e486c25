"""persistent-batch-norm: training batch norm + ReLU as one persistent Triton kernel a pass.

Timed one shape at a time on an NVIDIA H200 (torch 2.11.0+cu130, batch 256, fp16, channels-last; 2026-12-02,
``python3 reports/h200/bn_kernels.py`` at ampsuite commit 0bbfc1d), inductor runs each of ResNet-50's batch norm
+ ReLU pairs in five kernels at 1.3-2.2x the traffic bound, where a residual add does not follow it. This technique
traces the model with ``torch.fx`` and runs each ``BatchNorm2d -> ReLU`` whose activation is at least ``min_mb``
through :mod:`ampsuite_resnet_kernels._persistent_bn_kernels`: one launch a pass of a grid the GPU holds at once,
the statistics, a barrier in global memory, then the apply, read back from L2 where it fits. Both kernels sit
behind ``torch.library.triton_op``.

Where it helps: ResNet-50's stem (64 x 112x112 at batch 256, 411 MB), and nowhere else. Forward + backward as CUDA
graph replays against inductor's kernels, on an H200 the same day (``python3 reports/h200/bn_persistent.py``,
that commit): all 33 pairs 5.967 ms against 6.214, of which the stem 1.022 against 1.335 and the other 32 together
4.945 against 4.879. Hence ``min_mb``: by default only activations of 256 MB and more take the kernels, which in
ResNet-50 at batch 256 is the stem's. In the step (``ampsuite run tests/gpu/resnet50-bn.toml -k tuned``,
2026-12-02) the stem through the kernels took 0.156 ms off the compiled fp16 recipe (7,772.6 against 7,735.9
img/s); with ``min_mb = 0``, 42 graph breaks, the cell gave no result within 450 s.

On other H200s it measured level or slower. Beside half-weights + compile (combo_kernels) + fused SGD +
channels-last + stem-pad + maxpool-offsets it gained 0.41% and 0.49% (2026-12-03, ``ampsuite run
tests/gpu/resnet50-stack.toml``, now this package's suites/resnet50-stack.toml); in the screens of ``ampsuite tune
tests/gpu/tune-resnet50.toml --resume`` the same day it ran 7,618.8 against 7,634.8 img/s on the autocast recipe,
7,632.8 against 7,678.8 on the half-weights one and 7,275.4 against 7,312.9 on the bf16 one, and its cells' cold
compiles (first steps of 275.5 and 300.8 s) were that tune's slowest.

The kernels run outside torch.compile's graphs on purpose (``_persistent_batch_norm._outside_graphs`` says why):
inside them the stem's cell gave no step within 422 s. The running statistics and ``num_batches_tracked`` update
as ``nn.BatchNorm2d``'s do.

It needs CUDA (Triton) and channels-last activations, and says so in ``requires``: without channels-last every call
would fall back to PyTorch's batch norm, and the matrix prunes such a combination before anything runs. So ``ampsuite
tune`` keeps it in a path's pool, untried, until the path holds channels-last (a skip at apply time would take it
out of the pool at the path's first round). A model ``torch.fx`` cannot trace, or with no ``BatchNorm2d -> ReLU``,
is a skip with the reason. It conflicts with cudnn-batch-norm and fp32-islands, which replace the same modules'
forward. Order 42, with cudnn-batch-norm: a model rewrite after AMP (30) and before torch-compile (80).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import Technique, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1

__all__ = ["PersistentBatchNormOptions"]


@dataclass(frozen=True)
class PersistentBatchNormOptions:
    min_mb: float = field(
        default=256.0,
        metadata={
            "help": "the smallest activation (MB, 1e6 bytes) whose batch norm + ReLU runs the persistent kernels; "
            "smaller ones stay PyTorch's (inductor's under torch-compile); 0 takes every one",
            "ge": 0,
        },
    )

    num_warps: Literal[4, 8] = field(
        default=4,
        metadata={
            "help": "warps a program of the kernels: 8 keeps the 128 x 64 tile from spilling registers "
            "on sm_90 but ran 9-25% slower on every ResNet-50 shape on an H200",
            # 8 lost on every shape measured, so ampsuite tune tries it only where a suite declares it.
            "tune": (),
        },
    )


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="persistent-batch-norm",
            summary="batch norm + ReLU as one persistent Triton kernel a pass (statistics, grid barrier, apply)",
            apply=lazy("ampsuite_resnet_kernels._persistent_batch_norm:apply"),
            options=PersistentBatchNormOptions,
            order=42,
            requires=frozenset({"cuda", "channels-last"}),
            conflicts=frozenset({"cudnn-batch-norm", "fp32-islands"}),
            requires_traits=frozenset({"model"}),
        )
    ]
