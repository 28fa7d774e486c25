"""The torch-dependent part of :mod:`plugins.techniques.compile` (imported when a cell builds or applies it)."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from plugins.techniques.compile import CompileOptions
from suite import SkipCell, TrainStep


def apply(step: TrainStep, options: CompileOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("torch-compile needs a workload with a model (this step has its own phases)")
    if options.backend == "inductor" and options.inductor_settings():
        from torch._inductor import list_mode_options  # not imported by `import torch`

        inductor = {**list_mode_options(options.mode), **options.inductor_settings()}
        compiled = torch.compile(step.model, options=inductor, fullgraph=options.fullgraph, dynamic=False)
    elif options.backend == "inductor":
        compiled = torch.compile(step.model, mode=options.mode, fullgraph=options.fullgraph, dynamic=False)
    else:
        compiled = torch.compile(step.model, backend=options.backend, fullgraph=options.fullgraph, dynamic=False)
    step.model = cast(nn.Module, compiled)  # an OptimizedModule: same parameters, compiled forward
    step.notes["torch_compile"] = {
        "mode": options.mode,
        "backend": options.backend,
        "fullgraph": options.fullgraph,
        "dynamic": False,
        "coordinate_descent": options.coordinate_descent,
        "pointwise_autotune": options.pointwise_autotune,
        "tile_reductions": options.tile_reductions,
    }
    return step
