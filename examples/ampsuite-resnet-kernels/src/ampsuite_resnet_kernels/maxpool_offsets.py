"""maxpool-offsets: a max pool that keeps each window's winner as an int8 offset, for torch.compile.

ResNet-50's stem max pool (3x3, stride 2, on 256x64x112x112 at batch 256) had
the most expensive single kernel of the compiled fp16 recipe on one NVIDIA H200
(torch 2.11.0+cu130, 2026-12-01, the kernels probe of ``ampsuite run ... -p
ampsuite.plugins.probes.kernels``):
``triton_poi_fused_add_max_pool2d_with_indices_max_pool2d_with_indices_backward``,
1.31 ms of a 33.5 ms step. AOTAutograd's partitioner does not save the
pool's indices (int64, as large as the input's quarter) but recomputes them in
the backward, so that kernel finds, for each input pixel, the maximum of every
window covering it again: some 36 loads a pixel for a kernel that moves about
1 GB, 0.2 ms at the HBM's bandwidth.

This technique replaces every plain ``nn.MaxPool2d`` by
:class:`~ampsuite_resnet_kernels._maxpool_offsets.OffsetMaxPool2d`: the forward
takes the maximum over the window's ``k*k`` strided views by compares
(pointwise ops inductor fuses into one kernel) and keeps the winner's offset
inside its window as int8, which the partitioner saves rather than recomputes
(an eighth of int64 indices); the backward gathers: each input pixel reads the
gradient and offset of the few windows that can cover it. Values and gradients
are those of ``F.max_pool2d`` for every finite input, ties included (the
first maximum in the window wins, as in ATen); a window's ``-inf``-only or
NaN cases follow ATen's rules except that a window of ``-inf`` only sends its
gradient to its first position, padding included, where ATen picks the first
real pixel.

Measured on that H200 the same day (``python3 reports/h200/session14/probe.py
pool`` and ``stemctx``, at ampsuite commit 0bbfc1d): the pool with its ReLU,
compiled alone, 2.27 -> 1.29 ms forward + backward; ResNet-50's stem with the
pool's two consumers 6.87 -> 6.29 ms a step. In the whole compiled fp16 model
the gather written as tensor ops did not pay: 7,585 img/s against the recipe's
7,651 (on another H200 earlier that day; ``ampsuite run
tests/gpu/resnet50-pool.toml -p ampsuite.plugins.probes.kernels``), as inductor folded
it into the batch norm backward's kernels
(element-wise time -1.23 ms a step, batch norm +1.06 ms). Hence the option
``backward``: ``"kernel"`` (the default) runs the gather as one Triton kernel
behind a ``torch.library.triton_op``, which inductor launches as it is and
does not fuse; ``"inline"`` keeps the tensor ops. A CPU cell has no Triton to
run and gathers inline, and its notes say so. Tune measures both like any
technique of its space.

With the kernel (one H200, torch 2.11.0+cu130, 2026-12-01; ``ampsuite run
tests/gpu/resnet50-stem.toml -p ampsuite.plugins.probes.kernels``, the cells now in
suites/resnet50-stack.toml): the backward alone 0.499 ms at the stem pool's
shape against ATen's 2.009; the recipe 7,625-7,638 -> 7,741 img/s (33.07 ms a
step, element-wise -1.41 ms, batch norm +0.40 ms), and with ``stem-pad`` too
7,820. Across machines it is level: the recipe with it ran 7,622.7 img/s on
2026-12-02 (``ampsuite tune tests/gpu/tune-resnet50.toml --resume``), the
recipe without it 7,651.2 on another H200 the day before.

It needs ``torch-compile`` in the same combination: eager, its compares are
``2*k*k`` kernels where ATen runs one. Pools with dilation, ``ceil_mode``,
``return_indices`` or a window over 127 pixels are left alone; a model with no
plain max pool is a skip with the reason. Order 22: a model rewrite, before AMP
(30) and torch-compile (80).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import Technique, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1

__all__ = ["Backward", "MaxPoolOffsetsOptions"]

Backward = Literal["kernel", "inline"]
"""How the backward gathers: one Triton kernel, or tensor ops."""


@dataclass(frozen=True)
class MaxPoolOffsetsOptions:
    backward: Backward = field(
        default="kernel",
        metadata={
            "help": "the gather: 'kernel', one Triton kernel inductor does not fuse (CUDA; CPU cells gather inline), "
            "or 'inline', tensor ops inductor fuses into its neighbours"
        },
    )


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="maxpool-offsets",
            summary="max pooling by compares that saves int8 window offsets for a gather backward (for torch.compile)",
            apply=lazy("ampsuite_resnet_kernels._maxpool_offsets:apply"),
            options=MaxPoolOffsetsOptions,
            order=22,
            requires=frozenset({"torch-compile"}),
            requires_traits=frozenset({"model"}),
        )
    ]
