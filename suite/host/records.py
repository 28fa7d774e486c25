"""A plugin's record checked as it is registered: its name, its options' declaration, and where its code lives.

Every fault is a :class:`PluginError` naming the plugin and the record, found when the plugins load, before any
cell runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import is_dataclass
from typing import Any, TypeVar

from ampsuite.contract.errors import PluginError
from ampsuite.contract.lazy import Lazy
from ampsuite.contract.plugin import Executor, NoOptions, Probe, Technique, Workload
from ampsuite.spec.options import OptionError, check_declaration

__all__ = ["check_record"]

_R = TypeVar("_R", Workload, Technique, Probe, Executor)


def check_record(plugin: str, kind: str, record: _R) -> _R:
    """The record with its :func:`ampsuite.lazy` callables bound to ``plugin``; PluginError if it is invalid."""
    if not record.name or not isinstance(record.name, str) or any(c.isspace() or c in "/[]," for c in record.name):
        raise PluginError(
            plugin, f"{kind} name {record.name!r} must be a non-empty string without spaces, '/', '[', ']' or ','"
        )
    options = getattr(record, "options", None)
    if options is not None and not (isinstance(options, type) and is_dataclass(options)):
        raise PluginError(plugin, f"{kind} {record.name!r}: options must be a dataclass type, got {options!r}")
    for f in dataclasses.fields(options or NoOptions):  # a suite may leave out any option, so each needs a default
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise PluginError(plugin, f"{kind} {record.name!r}: option {f.name!r} has no default")
    try:
        check_declaration(options or NoOptions)
    except OptionError as exc:
        raise PluginError(plugin, f"{kind} {record.name!r}: option {exc}") from exc
    except NameError as exc:  # an annotation naming what the module imports only for type checkers
        raise PluginError(plugin, f"{kind} {record.name!r}: options' types cannot be resolved: {exc}") from exc
    for attr in ("build", "apply", "run"):
        fn: Callable[..., Any] | None = getattr(record, attr, None)
        if attr in type(record).__dataclass_fields__ and not callable(fn):
            raise PluginError(plugin, f"{kind} {record.name!r}: {attr} must be callable, got {fn!r}")
    bound: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(f.default, frozenset) and not (
            isinstance(value, set | frozenset) and all(isinstance(v, str) for v in value)
        ):  # a bare string would pass for the set of its letters
            raise PluginError(plugin, f"{kind} {record.name!r}: {f.name} must be a set of names, got {value!r}")
        if isinstance(value, Lazy):
            missing = value.missing()
            if missing is not None:
                raise PluginError(plugin, f"{kind} {record.name!r}: {f.name} = {value!r}: {missing}")
            bound[f.name] = Lazy(value.target, plugin)
    return dataclasses.replace(record, **bound) if bound else record
