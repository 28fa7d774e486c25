"""Plugin options: dataclass types described for ``ampsuite list`` and built from suite-file values.

Every check raises :class:`OptionError` with the key and what was expected, so
the suite loader can prefix the file and the key path.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

__all__ = ["OptionError", "OptionSpec", "build_options", "describe", "is_list_option", "options_as_dict"]


class OptionError(ValueError):
    """A bad option value; ``key`` is the option name (empty for the whole table)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


@dataclass(frozen=True)
class OptionSpec:
    """One option as ``ampsuite list`` shows it."""

    name: str
    type: str
    default: Any
    help: str


def _hints(options_type: type) -> dict[str, Any]:
    return typing.get_type_hints(options_type)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list of {_type_name(args[0]) if args else 'values'}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def describe(options_type: type) -> list[OptionSpec]:
    """The options of a plugin, in declaration order."""
    hints = _hints(options_type)
    specs = []
    for f in dataclasses.fields(options_type):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        specs.append(OptionSpec(f.name, _type_name(hints[f.name]), default, str(f.metadata.get("help", ""))))
    return specs


def is_list_option(options_type: type, name: str) -> bool:
    """Whether the option's own value is a list (so only a list of lists is an axis)."""
    tp = _hints(options_type).get(name)
    args = get_args(tp) if get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    return any(get_origin(a) in (list, tuple) for a in args)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        errors = []
        for arg in get_args(tp):
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except OptionError as exc:
                errors.append(exc.message)
        raise OptionError(key, f"expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise OptionError(key, f"expected one of {', '.join(repr(a) for a in get_args(tp))}, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise OptionError(key, f"expected {_type_name(tp)}, got {value!r}")
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item = args[0] if args else Any
        items = [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise OptionError(key, f"expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise OptionError(key, f"expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):  # TOML has nan and inf; no option of a benchmark means one
                raise OptionError(key, f"expected a finite number, got {value!r}")
            return float(value)
        raise OptionError(key, f"expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise OptionError(key, f"expected a string, got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise OptionError(key, f"expected {_type_name(tp)}, got {value!r}")


def _nonfinite(value: Any) -> float | None:
    """The first NaN or infinity inside ``value`` (an untyped option may be any TOML value), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    for item in items:
        bad = _nonfinite(item)
        if bad is not None:
            return bad
    return None


def build_options(options_type: type, values: Mapping[str, Any]) -> Any:
    """Build an options instance from plain values, checking names and types.

    :raises OptionError: unknown name (with "did you mean"), wrong type, or a
        ValueError from the dataclass's own ``__post_init__``.
    """
    hints = _hints(options_type)
    names = [f.name for f in dataclasses.fields(options_type)]
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in hints or key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else (f"; options are: {', '.join(names)}" if names else "; it takes no options")
            )
            raise OptionError(key, f"unknown option{hint}")
        kwargs[key] = _coerce(hints[key], value, key)
    try:
        return options_type(**kwargs)
    except (ValueError, TypeError) as exc:
        raise OptionError("", str(exc)) from exc


def options_as_dict(options: Any) -> dict[str, Any]:
    """Plain JSON-able values of an options instance (tuples become lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out
