"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.compile` (imported on first use)."""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, cast

import torch
from torch import nn

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques.compile import CompileOptions

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


@functools.cache
def _setting_names() -> tuple[str, ...]:
    """The names torch.compile's ``options`` accepts: ``torch._inductor.config``'s settings, aliases left out."""
    from torch._inductor import config  # not imported by `import torch`

    return tuple(config.get_config_copy())


def _closest(name: str, names: tuple[str, ...]) -> str | None:
    """The setting ``name`` most likely meant, matching whole names or their last parts (``tile_reductionz``
    is ``triton.tile_reductions``)."""
    tail = name.rpartition(".")[2]

    def score(candidate: str) -> float:
        whole = difflib.SequenceMatcher(None, name, candidate).ratio()
        return max(whole, difflib.SequenceMatcher(None, tail, candidate.rpartition(".")[2]).ratio())

    best = max(names, key=score, default=None)
    return best if best is not None and score(best) >= 0.75 else None


def setting_type(name: str) -> Any:
    """The type of inductor setting ``name`` as torch declares it (``bool``, ``int | None``, a ``Literal``...).

    :raises ValueError: ``name`` is no setting of this torch's inductor (with the closest one), or one whose
        type is ``None`` alone (declared without a type: torch.compile accepts nothing else there).
    """
    from torch._inductor import config

    names = _setting_names()
    if name not in names:
        close = _closest(name, names)
        hint = f"; did you mean {close!r}?" if close else ""
        raise ValueError(f"not a torch._inductor.config setting of torch {torch.__version__}{hint}")
    get_type = getattr(config, "get_type", None)  # older torches: the type of the current value
    tp = get_type(name) if get_type is not None else type(config.get_config_copy()[name])
    if tp is type(None):
        raise ValueError("torch._inductor.config declares it without a type (default None), which TOML cannot write")
    return tp


def _compiled(module: nn.Module, options: CompileOptions) -> nn.Module:
    """``module`` under torch.compile as the options say: an OptimizedModule, same parameters, compiled forward."""
    if options.inductor:  # the inductor backend (CompileOptions refuses the table with another)
        from torch._inductor import list_mode_options  # not imported by `import torch`

        # torch.compile refuses a mode with options: the mode travels as its own options, the table on top.
        settings = {**list_mode_options(options.mode), **options.inductor}
        compiled = torch.compile(module, options=settings, fullgraph=options.fullgraph, dynamic=False)
    elif options.backend == "inductor":
        compiled = torch.compile(module, mode=options.mode, fullgraph=options.fullgraph, dynamic=False)
    else:
        compiled = torch.compile(module, backend=options.backend, fullgraph=options.fullgraph, dynamic=False)
    return cast(nn.Module, compiled)


def apply(step: TrainStep, options: CompileOptions) -> TrainStep:
    if step.model is None:
        raise SkipCell("torch-compile needs a workload with a model (this step has its own phases)")
    aot_cache_off = step.autocast_dtype is not None and not autocast_keyed_cache()
    if aot_cache_off:
        # Inductor's own cache stays on: its key is the graph after AOTAutograd, casts included.
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    if options.scope == "block":
        try:
            blocks = step.model_blocks()
        except LookupError as exc:
            raise SkipCell(f"torch-compile scope 'block': {exc}") from None
        for index, block in enumerate(blocks):
            blocks[index] = _compiled(block, options)
    else:
        step.model = _compiled(step.model, options)
    step.notes["torch_compile"] = {
        "mode": options.mode,
        "backend": options.backend,
        "fullgraph": options.fullgraph,
        "dynamic": False,
        "inductor": dict(options.inductor),
        "scope": options.scope,
    }
    if options.scope == "block":
        step.notes["torch_compile"]["blocks"] = len(blocks)
    if aot_cache_off:
        step.notes["torch_compile"]["aot_autograd_cache"] = AUTOCAST_CACHE_NOTE
    return step
