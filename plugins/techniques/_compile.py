"""The torch-dependent part of :mod:`plugins.techniques.compile` (imported when a cell builds or applies it)."""

from __future__ import annotations

import inspect
from typing import cast

import torch
from torch import nn

from plugins.techniques.compile import INDUCTOR_FLAGS, CompileOptions
from suite import SkipCell, TrainStep

AUTOCAST_CACHE_NOTE = (
    "off: this torch's AOTAutograd cache key holds whether autocast is on, not its dtype "
    "(pytorch/pytorch#181564), so a graph compiled for another AMP dtype could be served"
)


def autocast_keyed_cache() -> bool:
    """Whether this torch's AOTAutograd cache tells autocast dtypes apart (pytorch/pytorch#181564).

    Before that fix the cache key held only whether autocast was on, so a graph compiled under
    float16 autocast was served to a bfloat16 cell (and the reverse) from the same cache folder.
    """
    try:
        from torch._functorch._aot_autograd import autograd_cache
    except ImportError:  # a torch without that cache: nothing to collide
        return True
    details = getattr(autograd_cache, "AOTAutogradCacheDetails", None)
    if details is None:
        return True
    try:
        source = inspect.getsource(details)
    except (OSError, TypeError):  # no source to read: assume the old key
        return False
    return "get_autocast_dtype" in source


def _has_setting(config: object, name: str) -> bool:
    """Whether inductor's config module knows ``name`` (dotted for its sub-configs, ``triton.enable_pdl``)."""
    head, _, rest = name.partition(".")
    if not hasattr(config, head):
        return False
    return not rest or _has_setting(getattr(config, head), rest)


def apply(step: TrainStep, options: CompileOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("torch-compile needs a workload with a model (this step has its own phases)")
    aot_cache_off = step.autocast_dtype is not None and not autocast_keyed_cache()
    if aot_cache_off:
        # Inductor's own cache stays on: its key is the graph after AOTAutograd, casts included.
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    if options.backend == "inductor" and options.inductor_settings():
        from torch._inductor import config as inductor_config  # not imported by `import torch`
        from torch._inductor import list_mode_options

        unknown = [name for name in options.inductor_settings() if not _has_setting(inductor_config, name)]
        if unknown:
            raise SkipCell(f"torch-compile: torch {torch.__version__}'s inductor has no setting {', '.join(unknown)}")

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
        **{flag: getattr(options, flag) for flag in INDUCTOR_FLAGS},
    }
    if aot_cache_off:
        step.notes["torch_compile"]["aot_autograd_cache"] = AUTOCAST_CACHE_NOTE
    return step
