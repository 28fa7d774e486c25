"""JSON of the contract's frozen records: a dataclass to JSON data and back, by its fields' types.

The record is the one definition of its JSON: :func:`ampsuite.contract.validate.check` checks a value against the
same fields (a ``tuple[X, ...]`` is a JSON list, a ``StrEnum`` its value), and :func:`from_json` builds the record
from a value that passed. Written here rather than taken from cattrs or dacite because the records need only
these few conversions, and a record that reads files of earlier versions converts them in its own ``from_json``
before calling :func:`from_json`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, Self, TypeVar, Union

__all__ = ["JsonRecord", "from_json", "to_json"]

R = TypeVar("R")


class JsonRecord:
    """A frozen dataclass's ``to_json``/``from_json`` by its fields; a record that reads files of earlier versions
    overrides ``from_json`` to convert them first."""

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return from_json(cls, data)


def to_json(record: Any) -> dict[str, Any]:
    """``record``'s fields as JSON data: tuples as lists, mappings as objects, nested records by their ``to_json``."""
    return {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_json", None)
        return own() if own is not None else to_json(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value  # a StrEnum is its value


def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
    """The record of type ``cls`` that ``data`` holds; keys it lacks take the fields' defaults.

    ``data`` must have passed :func:`~ampsuite.contract.validate.check` against ``cls``: the types are converted,
    not checked, here.
    """
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return cls(**{f.name: _typed(data[f.name], hints[f.name]) for f in fields if f.name in data})


def _typed(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        return _typed(value, arms[0]) if len(arms) == 1 else value
    if origin is tuple:
        return tuple(_typed(v, args[0]) for v in value)
    if origin in (dict, Mapping):
        return {k: _typed(v, args[1]) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        own = getattr(tp, "from_json", None)
        return own(value) if own is not None else from_json(tp, value)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    return value
