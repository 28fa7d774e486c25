"""The torch-dependent part of :mod:`plugins.techniques.fp8` (imported when a cell applies it)."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from plugins.techniques.fp8 import ALIGN, INSTALL_HINT, MIN_CAPABILITY, Fp8Options
from suite import SkipCell, TrainStep


def linear_plan(model: nn.Module, keep_last: bool = True) -> tuple[list[str], list[str]]:
    """The ``nn.Linear`` layers that become FP8 (by name) and those kept in high precision (``"name: why"``)."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    # nn.MultiheadAttention reads its out_proj's weight in F.multi_head_attention_forward and never
    # calls the module: swapping it would change nothing but the count.
    mha = {
        f"{name}.out_proj" if name else "out_proj"
        for name, m in model.named_modules()
        if isinstance(m, nn.MultiheadAttention)
    }
    converted: list[str] = []
    kept: list[str] = []
    for i, (name, m) in enumerate(linears):
        bad = [f"{d} {getattr(m, d)}" for d in ("in_features", "out_features") if getattr(m, d) % ALIGN]
        if name in mha:
            kept.append(f"{name}: nn.MultiheadAttention's output projection (used by weight, not called)")
        elif bad:
            kept.append(f"{name}: {', '.join(bad)} not a multiple of {ALIGN}")
        elif keep_last and i == len(linears) - 1:
            kept.append(f"{name}: the last layer (keep_last)")
        else:
            converted.append(name)
    return converted, kept


def apply(step: TrainStep, options: Fp8Options) -> TrainStep:
    if step.model is None:
        raise SkipCell("fp8 needs a workload with a model (this step has its own phases)")
    if step.device.type != "cuda":
        raise SkipCell(f"fp8 needs a CUDA GPU; this cell is on {step.device.type}")
    capability = torch.cuda.get_device_capability(step.device)
    if capability < MIN_CAPABILITY:
        raise SkipCell(
            f"fp8 needs FP8 Tensor Cores (compute capability >= 8.9); "
            f"{torch.cuda.get_device_name(step.device)} has {capability[0]}.{capability[1]}"
        )
    try:
        torchao = importlib.import_module("torchao")
        float8 = importlib.import_module("torchao.float8")
    except ImportError as exc:
        raise SkipCell(f"fp8 needs torchao ({INSTALL_HINT}): {exc}") from exc
    converted, kept = linear_plan(step.model, options.keep_last)
    if not converted:
        raise SkipCell(f"fp8: no nn.Linear layer of this model can run in FP8 (kept: {'; '.join(kept) or 'none'})")
    chosen = set(converted)
    float8.convert_to_float8_training(
        step.model,
        module_filter_fn=lambda module, fqn: fqn in chosen,
        config=float8.Float8LinearConfig.from_recipe_name(options.recipe),
    )
    step.notes["fp8"] = {
        "recipe": options.recipe,
        "converted_linears": len(converted),
        "kept_high_precision": kept,
        "torchao": str(getattr(torchao, "__version__", "unknown")),
        "bf16_reference": "the same workload, options, batch and combination without fp8",
    }
    return step
