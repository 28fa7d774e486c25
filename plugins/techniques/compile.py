"""torch.compile: the model's forward (and, through AOTAutograd, its backward) compiled.

Compilation is lazy: it happens in the first call of the step, which the
worker times on its own (``first_step_seconds``), so compile time never lands
in step time. Inductor keeps an on-disk cache between processes; a warm cache
makes that first step shorter but does not change the timed steps.

Shapes are compiled static (``dynamic=False``): every workload feeds
fixed-size batches, and a recompile would show up as a slow timed step.

``reduce-overhead`` and ``max-autotune`` also capture CUDA graphs (cudagraph
trees); the ``cuda-graphs`` technique refuses to stack on them and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from suite import SkipCell, Technique, TrainStep, hookimpl

__all__ = ["MODES", "CompileOptions", "apply"]

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class CompileOptions:
    mode: str = field(default="default", metadata={"help": f"inductor mode: {', '.join(MODES)}"})
    fullgraph: bool = field(default=False, metadata={"help": "fail instead of splitting the graph at a graph break"})
    backend: str = field(default="inductor", metadata={"help": "torch.compile backend ('aot_eager' to test plumbing)"})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")
        if not self.backend:
            raise ValueError("backend must name a torch.compile backend, got ''")
        if self.backend != "inductor" and self.mode != "default":
            raise ValueError(f"mode {self.mode!r} applies to the inductor backend only, got backend {self.backend!r}")


def apply(step: TrainStep, options: CompileOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("torch-compile needs a workload with a model (this step has its own phases)")
    if options.backend == "inductor":
        compiled = torch.compile(step.model, mode=options.mode, fullgraph=options.fullgraph, dynamic=False)
    else:
        compiled = torch.compile(step.model, backend=options.backend, fullgraph=options.fullgraph, dynamic=False)
    step.model = cast(nn.Module, compiled)  # an OptimizedModule: same parameters, compiled forward
    step.notes["torch_compile"] = {
        "mode": options.mode,
        "backend": options.backend,
        "fullgraph": options.fullgraph,
        "dynamic": False,
    }
    return step


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
