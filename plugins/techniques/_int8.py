"""The part of :mod:`ampsuite.plugins.techniques.int8` that imports torchao (imported on first use)."""

from __future__ import annotations

from typing import Any

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques.int8 import INSTALL_HINT, Int8Options


def _config(mode: str) -> Any:
    """torchao's config for ``mode``: the config classes of torchao >= 0.9, else the older factory functions."""
    import torchao.quantization as q

    names = {
        "dynamic": ("Int8DynamicActivationInt8WeightConfig", "int8_dynamic_activation_int8_weight"),
        "weight-only": ("Int8WeightOnlyConfig", "int8_weight_only"),
    }[mode]
    for name in names:
        factory = getattr(q, name, None)
        if factory is not None:
            return factory()
    raise SkipCell(f"int8: this torchao has none of {', '.join(names)}")


def apply(step: TrainStep, options: Int8Options) -> TrainStep:
    if step.model is None:
        raise SkipCell("int8 needs a workload with a model")
    try:
        import torchao
        from torchao.quantization import quantize_
    except ImportError as exc:
        raise SkipCell(f"{INSTALL_HINT}: {exc}") from exc
    try:
        quantize_(step.model, _config(options.mode))
    except SkipCell:
        raise
    except Exception as exc:  # a torchao that does not match this torch, an unsupported device
        why = f"{type(exc).__name__}: {exc}"
        raise SkipCell(f"int8: torchao {torchao.__version__} could not quantize here: {why}") from exc
    step.notes["int8"] = {"mode": options.mode, "torchao": str(torchao.__version__), "quantized": "nn.Linear"}
    return step
