"""ampsuite: a declarative benchmark suite for mixed-precision training.

The public API for plugin authors is exactly what ``__all__`` lists.
"""

from __future__ import annotations

import pluggy

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import CaptureFailed, ExitCode, PluginError, SkipCell, SuiteFileError
from ampsuite.contract.lazy import lazy
from ampsuite.contract.plugin import (
    BuildContext,
    CellTask,
    CheckContext,
    Executor,
    ExecutorContext,
    NoOptions,
    Probe,
    ProbeContext,
    ReportSection,
    Technique,
    Workload,
)
from ampsuite.contract.step import Batch, StepFn, TrainStep, Wrapper
from ampsuite.contract.wire import Status

__version__ = "0.1.0"

PLUGIN_API = 1
"""The plugin API major version. A plugin module may set ``AMPSUITE_PLUGIN_API``
to the version it was written for; a different major version is a load error."""

hookimpl = pluggy.HookimplMarker("ampsuite")
"""Decorator that marks a plugin's hook implementations."""

__all__ = [
    "PLUGIN_API",
    "Batch",
    "BuildContext",
    "CaptureFailed",
    "Cell",
    "CellTask",
    "CheckContext",
    "Executor",
    "ExecutorContext",
    "ExitCode",
    "NoOptions",
    "PluginError",
    "Probe",
    "ProbeContext",
    "ReportSection",
    "SkipCell",
    "Status",
    "StepFn",
    "SuiteFileError",
    "Technique",
    "TrainStep",
    "Workload",
    "Wrapper",
    "__version__",
    "hookimpl",
    "lazy",
]
