"""Validation of JSON values against the wire format's types (``TypedDict``, frozen records, lists, ``StrEnum``).

Generic over the types of :mod:`ampsuite.contract.wire`, which re-exports :func:`check`,
:func:`json_problem`, :class:`WireError` and the bounds: written here rather than taken
from a schema library because the types themselves are the schema (no second copy to
keep in step), and the rules ampsuite needs beyond types (finite numbers, 64-bit
integers, bounded depth) are a few lines.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, NotRequired, Union

__all__ = [
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_RECORD_BYTES",
    "OPTIONAL",
    "WIRE",
    "WireError",
    "check",
    "json_problem",
    "json_size",
    "size_problem",
]

MAX_INT = 2**63
"""Integers beyond 64 bits are no figure ampsuite writes; a file holding one is refused."""
MAX_DEPTH = 64
"""Deeper JSON than this is no document ampsuite writes."""
MAX_RECORD_BYTES = 4 * 2**20
"""The most one cell's record may hold as JSON (4 MiB): a record of 100,000 timed steps writes about 2 MiB, and a
results file (64 MiB at most) must still hold many. What a plugin puts in notes, diagnostics, metrics or an
exception's message counts against it where it enters: in the worker's result."""


WIRE = "wire"
"""A record field's metadata key: the type its JSON may hold where that admits more than the field's own type
(free text that files of earlier versions wrote, entries a reader drops when damaged)."""
OPTIONAL = "optional"
"""A record field's metadata key: true for a field without a default whose key files of earlier versions lack."""


class WireError(ValueError):
    """A value does not have the shape of the wire format; ``where`` is its JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where or 'value'}: {problem}")
        self.where = where
        self.problem = problem


def json_problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """The first place where ``value`` is not strict JSON data (finite numbers, string keys, bounded), or None."""
    if depth > MAX_DEPTH:
        return f"{where or 'value'}: nested deeper than {MAX_DEPTH} levels"
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int):
        return None if -MAX_INT < value < MAX_INT else f"{where or 'value'}: integer out of range"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'value'}: non-finite number {value!r}"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = json_problem(item, f"{where}[{i}]", depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where or 'value'}: key {key!r} is not a string"
            problem = json_problem(item, f"{where}.{key}" if where else key, depth + 1)
            if problem:
                return problem
        return None
    return f"{where or 'value'}: a {type(value).__name__} is not JSON data"


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (strict JSON data, as :func:`json_problem` accepts)."""
    return len(json.dumps(value, separators=(",", ":")))


def size_problem(value: Any, limit: int = MAX_RECORD_BYTES) -> str | None:
    """None when ``value``'s JSON fits in ``limit`` bytes; else what is too large, naming the part that holds
    most of it (``notes.trace: 100,000,002 bytes``), so that the plugin that wrote it can be found."""
    size = json_size(value)
    if size <= limit:
        return None
    where, part, part_size = "", value, size
    while isinstance(part, dict | list) and part:
        items = list(part.items()) if isinstance(part, dict) else list(enumerate(part))
        sizes = [(json_size(v), k, v) for k, v in items]
        biggest, key, child = max(sizes, key=lambda t: t[0])
        if biggest * 2 < part_size:  # no single part holds most of it: name this one
            break
        where = (f"{where}.{key}" if where else key) if isinstance(key, str) else f"{where}[{key}]"
        part, part_size = child, biggest
    held = f"; {where} holds {part_size:,}" if where else ""
    return f"{size:,} bytes of JSON, more than a record may hold ({limit:,}){held}"


def _name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type):
        return {"str": "a string", "int": "an integer", "float": "a number", "bool": "true/false"}.get(
            tp.__name__, f"an object ({tp.__name__})" if _is_object(tp) else tp.__name__
        )
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        return "a list"
    if origin in (dict, Mapping):
        return "an object"
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    return str(tp)


def _check(value: Any, tp: Any, where: str) -> None:
    if tp is Any:
        problem = json_problem(value, where)
        if problem:
            raise WireError(where, problem.split(": ", 1)[-1])
        return
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        errors = []
        for arm in typing.get_args(tp):
            try:
                _check(value, arm, where)
                return
            except WireError as exc:
                errors.append(exc)
        deepest = max(errors, key=lambda e: len(e.where))
        if deepest.where != where:
            raise deepest
        raise WireError(where, "expected " + " or ".join(_name(a) for a in typing.get_args(tp)))
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise WireError(where, f"expected {_name(tp)}, got {value!r}"[:200])
        return
    if origin in (list, tuple):  # a record's ``tuple[X, ...]`` is a JSON list
        if not isinstance(value, list):
            raise WireError(where, f"expected a list, got {_kind(value)}")
        item = typing.get_args(tp)[0]
        for i, v in enumerate(value):
            _check(v, item, f"{where}[{i}]")
        return
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise WireError(where, f"expected an object, got {_kind(value)}")
        _, item = typing.get_args(tp)
        for k, v in value.items():
            _check(v, item, f"{where}.{k}")
        return
    if _is_object(tp):
        _check_object(value, tp, where)
        return
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        if not isinstance(value, str) or value not in {m.value for m in tp}:
            raise WireError(where, f"expected one of {', '.join(m.value for m in tp)}, got {value!r}"[:200])
        return
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and isinstance(value, float) and not math.isfinite(value):
            raise WireError(where, "non-finite number")
        if ok and isinstance(value, int) and not -MAX_INT < value < MAX_INT:
            raise WireError(where, "integer out of range")
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not -MAX_INT < value < MAX_INT:
            raise WireError(where, "integer out of range")
    elif tp is type(None):
        ok = value is None
    else:
        ok = isinstance(value, tp)
    if not ok:
        raise WireError(where, f"expected {_name(tp)}, got {_kind(value)}")


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"


def _is_object(tp: Any) -> bool:
    return typing.is_typeddict(tp) or (isinstance(tp, type) and dataclasses.is_dataclass(tp))


@typing.no_type_check
def _hints(tp: Any) -> dict[str, Any]:
    hints = _HINTS.get(tp)
    if hints is None:
        hints = {k: _strip(v) for k, v in typing.get_type_hints(tp).items()}
        if dataclasses.is_dataclass(tp):
            hints = {f.name: f.metadata.get(WIRE, hints[f.name]) for f in dataclasses.fields(tp)}
        _HINTS[tp] = hints
    return hints


def _strip(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is NotRequired else tp


_HINTS: dict[Any, dict[str, Any]] = {}


@typing.no_type_check
def _required(tp: Any) -> frozenset[str]:
    keys = _REQUIRED.get(tp)
    if keys is None:
        if dataclasses.is_dataclass(tp):
            # A record's JSON must hold the fields without a default, but for those files of earlier versions lack.
            missing = dataclasses.MISSING
            keys = frozenset(
                f.name
                for f in dataclasses.fields(tp)
                if f.default is missing and f.default_factory is missing and not f.metadata.get(OPTIONAL)
            )
        else:
            # With ``from __future__ import annotations`` Python 3.11 cannot see ``NotRequired`` when it builds
            # ``__required_keys__`` (the annotations are strings then), so read the markers from the hints.
            raw = typing.get_type_hints(tp, include_extras=True)
            keys = frozenset(k for k, v in raw.items() if typing.get_origin(v) is not NotRequired)
            keys &= tp.__required_keys__
        _REQUIRED[tp] = keys
    return keys


_REQUIRED: dict[Any, frozenset[str]] = {}


def _check_object(value: Any, tp: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise WireError(where, f"expected an object, got {_kind(value)}")
    hints = _hints(tp)
    for key in sorted(_required(tp)):
        if key not in value:
            raise WireError(where, f"missing {key!r}")
    for key, item in value.items():
        sub = f"{where}.{key}" if where else str(key)
        if key in hints:
            _check(item, hints[key], sub)
        else:
            # Keys the format does not name (a probe's own metric, a newer writer's field) are
            # accepted as long as they are JSON data.
            _check(item, Any, sub)


def check(value: Any, tp: Any, where: str = "") -> None:
    """Raise :class:`WireError` (naming the JSON path) unless ``value`` has the shape of ``tp``.

    ``tp`` is any type of this module (``Record``, ``Document``, ``Outcome``, ...);
    numbers must be finite and within 64 bits, nesting within ``MAX_DEPTH``.
    """
    problem = json_problem(value, where)
    if problem and "nested deeper" in problem:
        raise WireError(where, problem.split(": ", 1)[-1])
    _check(value, tp, where)
