"""The optimizers a workload's ``optimizer`` option names (torch-free half): SGD (momentum 0.9), AdamW, LAMB.

LAMB (layer-wise adaptive moments, You et al. 2019) is the optimizer NVIDIA's
large-batch BERT recipes pair with O2-style half weights. ampsuite does not
write its own: it uses timm's kept implementation, ``timm.optim.Lamb``, an
optional dependency (``pip install 'ampsuite[lamb]'``). A cell asking for LAMB
where timm is missing is skipped at expansion with that hint
(:func:`check_optimizer`, a workload ``check``, which looks timm up without
importing it), so a dry run says so.

This module holds what the registration modules (cnn, transformer, vit) need
and imports no torch (:mod:`ampsuite.plugins.workloads.fields` declares the
option); :mod:`ampsuite.plugins.workloads._optim` builds the optimizers.
It registers nothing.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

__all__ = ["LAMB_HINT", "OPTIMIZER_HELP", "OptimizerName", "check_optimizer", "lamb_available"]

OptimizerName = Literal["sgd", "adamw", "lamb"]
"""The ``optimizer`` option's type: the core refuses any other name, naming the key."""
OPTIMIZER_HELP = "sgd (momentum 0.9), adamw, or lamb (timm.optim.Lamb; pip install 'ampsuite[lamb]')"
LAMB_HINT = "optimizer 'lamb' needs timm (timm.optim.Lamb): pip install 'ampsuite[lamb]'"


def lamb_available() -> bool:
    """Whether timm (LAMB's home) is installed, looked up without importing it."""
    return importlib.util.find_spec("timm") is not None


def check_optimizer(options: Any, device_type: str) -> str | None:
    """A workload ``check``: the skip reason of a LAMB cell where timm is not installed."""
    if getattr(options, "optimizer", None) == "lamb" and not lamb_available():
        return LAMB_HINT
    return None
