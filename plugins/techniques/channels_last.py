"""channels-last: NHWC memory layout for convolutional models.

Tensor Core convolutions in cuDNN work in NHWC; with NCHW tensors every
convolution pays for layout transposes around the kernel. The model's 4-D
parameters and every 4-D input are converted to ``torch.channels_last``; the
values do not change, only the strides.

Inputs are converted inside ``data()``. A Batch already in channels-last is
passed through untouched, and converted batches are written back into the
Batch object, so a workload's fixed pool of device batches is converted once,
not on every step; batches that are new every step (a DataLoader) are
converted each time, as a user's loop would.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from suite import CheckContext, NoOptions, Technique, TrainStep, hookimpl


def _impl() -> ModuleType:
    # The torch-dependent part lives in plugins.techniques._channels_last: registering this plugin (ampsuite list,
    # --help, suite-file checks) must not import torch.
    return importlib.import_module("plugins.techniques._channels_last")


def check(ctx: CheckContext) -> str | None:
    return _impl().check(ctx)


def apply(step: TrainStep, options: NoOptions) -> TrainStep:
    return _impl().apply(step, options)


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="channels-last",
            summary="NHWC (channels-last) layout for the model's 4-D weights and inputs",
            apply=apply,
            order=20,
            check=check,
        )
    ]


def __getattr__(name: str) -> Any:
    """Everything else of the plugin (models, datasets) from its implementation module."""
    if name.startswith(("__", "AMPSUITE_", "ampsuite_")):  # the manager's and pluggy's probes stay here
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_impl(), name)
