"""torch.compile: the model's forward (and, through AOTAutograd, its backward) compiled.

Compilation is lazy: it happens in the first call of the step, which the
worker times on its own (``first_step_seconds``), so compile time never lands
in step time. Inductor keeps an on-disk cache between processes; a warm cache
makes that first step shorter but does not change the timed steps.

Shapes are compiled static (``dynamic=False``): every workload feeds
fixed-size batches, and a recompile would show up as a slow timed step.

``reduce-overhead`` and ``max-autotune`` also capture CUDA graphs (cudagraph
trees); the ``cuda-graphs`` technique refuses to stack on them and says so.

``coordinate_descent`` is inductor's ``coordinate_descent_tuning`` on top of the
mode: the part of max-autotune that tunes inductor's own (Triton) kernels, without
the template search over matmul and convolution kernels that made max-autotune
compile ResNet-50 for over 7 minutes on an H200.

``pointwise_autotune`` is inductor's ``max_autotune_pointwise``: each generated
pointwise and reduction kernel is benchmarked over a few block configurations
at compile time, again without the template search. In a plain loop of the tuned
ResNet-50 recipe on an H200 (bf16 + channels-last + compile, batch 256; session
10) it took the step from 37.53 to 36.76 ms (+2.1%) for 4 s more compilation:
batch norm's reductions are half of that step's GPU time.

``tile_reductions`` is inductor's ``triton.tile_reductions`` with the
``triton.prefer_nd_tiling`` its documentation asks for beside it: a reduction's
kernel may tile over more than one dimension. Channels-last batch norm reduces
each channel over batch x height x width with the channels contiguous (a column
reduction); in the plain loop above it took the step from 38.05 to 37.01 ms
(+2.8%, session 11), for a first step of 128 s instead of 60.

``combo_kernels`` is inductor's horizontal fusion: independent kernels of one
graph (under autocast, each weight's cast to the AMP dtype in the forward is
one) become one launch. ``pdl`` is inductor's ``triton.enable_pdl``:
programmatic dependent launch on Hopper and later, so that a generated kernel
starts while the one before it drains. Both aim at the gaps between the ~900
kernels of a compiled ResNet-50 step, which a CUDA graph does not close (0.43 ms
of a 32.7 ms step on an H200, session 15's kernels probe). On an H200
(session 18, ResNet-50 with half-weights, channels-last, fused SGD, stem-pad and
maxpool-offsets, reduce-overhead) combo_kernels took the step from 33.09-33.11
to 32.97-33.01 ms with 707 kernels instead of 821 and the same GPU busy time;
pdl made the batch norm kernels themselves 0.8-0.9 ms slower (33.35 ms).

``aggressive_fusion`` (inductor fuses nodes that share no reads; +0.7% in session
10's plain loop of the bf16 recipe, before tile_reductions) and
``mix_order_split_autotune`` (inductor's ``triton.mix_order_reduction_autotune_split_size``:
the split of each reduction over both a tensor's rows and its columns, which is
how inductor fuses batch norm's backward, benchmarked at compile time instead of
a fixed heuristic) aim at the batch norm kernels, ~48% of the compiled step. On
an H200 (session 19, the o2 + combo_kernels cell above at 33.12-33.16 ms) neither
paid: 33.34 and 33.28 ms; coordinate descent there 33.04-33.10. A torch whose
inductor lacks a setting skips the cell and names it.

torch.compile takes either a mode or an options dict, so with any of these
the mode is passed as its options (``torch._inductor.list_mode_options``) plus them.

Under autocast, on a torch whose AOTAutograd cache keys only whether autocast is
on and not its dtype (torch 2.11 and earlier; fixed by pytorch/pytorch#181564),
that cache is switched off for the cell: otherwise a bf16 cell is served the
fp16 graph an earlier fp16 cell left in the same cache folder, or the reverse,
and measures the other precision under its own name. On an H200 (session 12) a
plain loop asked for bf16 ran fp16 convolution kernels at 33.64 ms a step
against 35.7 for real bf16; session 7's kernels probe of its "bf16" compiled
ResNet-50 cell lists fp16 kernels too. Inductor's own cache stays on (its key is
the graph after AOTAutograd, casts included), so a warm cache still saves most of
the compile. The cell's notes say when the cache was off.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from suite import Technique, TrainStep, hookimpl

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
INDUCTOR_FLAGS: dict[str, tuple[str, ...]] = {
    "coordinate_descent": ("coordinate_descent_tuning",),
    "pointwise_autotune": ("max_autotune_pointwise",),
    "tile_reductions": ("triton.tile_reductions", "triton.prefer_nd_tiling"),
    "combo_kernels": ("combo_kernels",),
    "pdl": ("triton.enable_pdl",),
    "aggressive_fusion": ("aggressive_fusion",),
    "mix_order_split_autotune": ("triton.mix_order_reduction_autotune_split_size",),
}
"""Each boolean option and the inductor settings (``torch._inductor.config`` names) it turns on."""


@dataclass(frozen=True)
class CompileOptions:
    mode: str = field(default="default", metadata={"help": f"inductor mode: {', '.join(MODES)}"})
    fullgraph: bool = field(default=False, metadata={"help": "fail instead of splitting the graph at a graph break"})
    backend: str = field(default="inductor", metadata={"help": "torch.compile backend ('aot_eager' to test plumbing)"})
    coordinate_descent: bool = field(
        default=False,
        metadata={
            "help": "inductor tunes each generated kernel's block sizes by coordinate descent (longer compile; "
            "the max-autotune modes include it)"
        },
    )

    pointwise_autotune: bool = field(
        default=False,
        metadata={
            "help": "inductor benchmarks several block configurations for each generated pointwise and reduction "
            "kernel (max_autotune_pointwise; the max-autotune modes include it)"
        },
    )

    tile_reductions: bool = field(
        default=False,
        metadata={
            "help": "inductor may tile a reduction's kernel over several dimensions (triton.tile_reductions with "
            "triton.prefer_nd_tiling; helps channels-last batch norm, compiles longer)"
        },
    )

    combo_kernels: bool = field(
        default=False,
        metadata={"help": "inductor fuses independent kernels of a graph horizontally into one (combo_kernels)"},
    )

    pdl: bool = field(
        default=False,
        metadata={
            "help": "generated kernels launch with programmatic dependent launch (triton.enable_pdl; Hopper "
            "and later), overlapping each kernel's start with the previous one's end"
        },
    )

    aggressive_fusion: bool = field(
        default=False,
        metadata={"help": "inductor fuses nodes even where they share no reads (aggressive_fusion)"},
    )

    mix_order_split_autotune: bool = field(
        default=False,
        metadata={
            "help": "inductor benchmarks the split size of each mix-order reduction, one reducing a tensor's rows "
            "and columns in one kernel as batch norm's backward does (triton.mix_order_reduction_autotune_split_size)"
        },
    )

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")
        if not self.backend:
            raise ValueError("backend must name a torch.compile backend, got ''")
        if self.backend != "inductor" and self.mode != "default":
            raise ValueError(f"mode {self.mode!r} applies to the inductor backend only, got backend {self.backend!r}")
        for name in INDUCTOR_FLAGS:
            if self.backend != "inductor" and getattr(self, name):
                raise ValueError(f"{name} applies to the inductor backend only, got backend {self.backend!r}")

    def inductor_settings(self) -> dict[str, bool]:
        """The inductor settings these options add to the mode's."""
        on = [flag for flag in INDUCTOR_FLAGS if getattr(self, flag)]
        return {setting: True for flag in on for setting in INDUCTOR_FLAGS[flag]}


def _impl() -> ModuleType:
    # The torch-dependent part lives in plugins.techniques._compile: registering this plugin (ampsuite list,
    # --help, suite-file checks) must not import torch.
    return importlib.import_module("plugins.techniques._compile")


def apply(step: TrainStep, options: CompileOptions) -> TrainStep:
    return _impl().apply(step, options)


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="torch-compile",
            summary="torch.compile the model (compile time is reported as first-step time, never step time)",
            apply=apply,
            options=CompileOptions,
            order=80,
        )
    ]


def __getattr__(name: str) -> Any:
    """Everything else of the plugin (models, datasets) from its implementation module."""
    if name.startswith(("__", "AMPSUITE_", "ampsuite_")):  # the manager's and pluggy's probes stay here
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_impl(), name)
