"""INT8 inference through torchao's quantization (an optional extra: ``pip install 'ampsuite[int8]'``).

``int8`` quantizes the model's linear layers in place with torchao's
``quantize_``: ``mode = "dynamic"`` (default) uses int8 weights and int8
activations quantized per token at run time (``Int8DynamicActivationInt8WeightConfig``,
``int8_dynamic_activation_int8_weight`` in older torchao); ``"weight-only"``
int8 weights with activations in the model's dtype (``Int8WeightOnlyConfig``).
It needs ``inference`` in the combination (quantized weights are not trained
here) and applies before it. torchao's int8 kernels are fastest under
``torch-compile``, which composes; convolutions are not quantized (ResNet
gains little). Both modes run on CPU as well.

Where torchao is missing the cell is skipped at expansion with the install
hint; where the installed torchao cannot quantize with this torch the cell is
skipped from the worker with torchao's error.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Literal

from ampsuite import CheckContext, Technique, hookimpl, lazy

__all__ = ["INSTALL_HINT", "Int8Options", "check"]

INSTALL_HINT = "int8 needs torchao: pip install 'ampsuite[int8]' (a torchao release built for the installed torch)"


@dataclass(frozen=True)
class Int8Options:
    mode: Literal["dynamic", "weight-only"] = field(
        default="dynamic", metadata={"help": "dynamic (int8 weights and activations) or weight-only"}
    )


def check(ctx: CheckContext) -> str | None:
    if importlib.util.find_spec("torchao") is None:
        return INSTALL_HINT
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="int8",
            summary="INT8 inference: torchao quantize_ of the linear layers (dynamic or weight-only; ampsuite[int8])",
            apply=lazy("ampsuite.plugins.techniques._int8:apply"),
            options=Int8Options,
            order=55,
            requires=frozenset({"inference"}),
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
