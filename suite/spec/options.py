"""Plugin options: dataclass types described for ``ampsuite list`` and built from suite-file values.

Every check raises :class:`OptionError` with the key and what was expected, so
the suite loader can prefix the file and the key path.

A field typed ``dict[str, X]`` (or ``Mapping``) is a *table option*: a suite file
writes it as a sub-table (``[techniques.torch-compile.inductor]``) whose entries
are checked against ``X``. Its field may name what entries the table takes with
``metadata={"entry_type": fn}``: ``fn(name)`` returns the type of entry ``name``'s
value, or raises ``ValueError`` with why the name is refused; a TOML sub-table under
a name ``fn`` refuses is read as dotted names (``triton.tile_reductions = true``,
unquoted, is the entry ``"triton.tile_reductions"``). Errors name the entry's key,
``inductor."triton.tile_reductionz"``. Where a later table goes on top of an
earlier one (:func:`merge_values`), a table option's entries merge one by one.

Rules on one option are declared once, in the field's metadata: a number's bounds
(``ge``/``gt``/``le``/``lt``), ``choices``, ``min_length`` and ``pattern``
(:mod:`ampsuite.spec.optionrules`), e.g. ``field(default=2.0, metadata={"help": ...,
"gt": 1})``. :func:`build_options` checks them with the option's key, ``ampsuite list``
shows them, and :func:`check_declaration` holds each default to them when a plugin
loads; ``__post_init__`` is left for rules that tie options together.
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

from ampsuite.spec.optionrules import OptionError, check_metadata, check_rules, one_of, one_of_text, rules_text
from ampsuite.spec.tomltext import toml_key

__all__ = [
    "OptionError",
    "OptionSpec",
    "UnknownOption",
    "build_options",
    "check_declaration",
    "check_value",
    "declared_choices",
    "describe",
    "is_list_option",
    "is_table_option",
    "merge_values",
    "options_as_dict",
]

_TABLES = (dict, Mapping)


class UnknownOption(OptionError):
    """A name the options (or a table option's ``entry_type`` hook) do not take: the key's fault, not its value's."""


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
    if origin in _TABLES or tp in _TABLES:
        kv = get_args(tp)
        return "table" if len(kv) < 2 or kv[1] is Any else f"table of {_type_name(kv[1])}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def describe(options_type: type) -> list[OptionSpec]:
    """The options of a plugin, in declaration order."""
    hints = _hints(options_type)
    specs = []
    for f in dataclasses.fields(options_type):
        type_name = rules_text(f.metadata, _type_name(hints[f.name]), is_bool=hints[f.name] is bool)
        specs.append(OptionSpec(f.name, type_name, _default(f), str(f.metadata.get("help", ""))))
    return specs


def check_declaration(options_type: type) -> None:
    """Each field's declared rules are well-formed, and its default and its ``tune`` values keep them and its
    type (checked when a plugin loads, so a default outside its own choices never reaches a suite).

    :raises OptionError: keyed by the option's name.
    """
    hints = _hints(options_type)
    for f in dataclasses.fields(options_type):
        check_metadata(f.metadata, f.name)
        values = [("default", _default(f)), *((f"tune[{i}]", v) for i, v in enumerate(f.metadata.get("tune", ())))]
        for what, value in values:
            try:
                check_rules(f.metadata, _coerce(hints[f.name], value, f.name), f.name)
            except OptionError as exc:
                raise OptionError(f.name, f"{what}: {exc.message}") from exc


def declared_choices(options_type: type) -> dict[str, tuple[Any, ...]]:
    """The values each option restricted to a set takes (its ``choices``, or its ``Literal`` type's), in
    declaration order; a list option's choices are its items', not values of the option, and are left out."""
    hints = _hints(options_type)
    out: dict[str, tuple[Any, ...]] = {}
    for f in dataclasses.fields(options_type):
        if is_list_option(options_type, f.name):
            continue
        if "choices" in f.metadata:
            out[f.name] = tuple(f.metadata["choices"])
        elif get_origin(hints[f.name]) is Literal:
            out[f.name] = get_args(hints[f.name])
    return out


def _alternatives(options_type: type, name: str) -> tuple[Any, ...]:
    tp = _hints(options_type).get(name)
    return get_args(tp) if get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def is_list_option(options_type: type, name: str) -> bool:
    """Whether the option's own value is a list (so only a list of lists is an axis)."""
    return any(get_origin(a) in (list, tuple) for a in _alternatives(options_type, name))


def is_table_option(options_type: type, name: str) -> bool:
    """Whether the option's value is a table (a ``dict`` or ``Mapping`` field): its entries merge one by one."""
    return any(get_origin(a) in _TABLES or a in _TABLES for a in _alternatives(options_type, name))


def merge_values(options_type: type, base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over``'s plain values on top of ``base``'s, as ``[combination_options]`` go on top of ``[techniques]``.

    Any option ``over`` names replaces ``base``'s value, except a table option, whose entries go on top of
    ``base``'s table one by one; a key ``OPTION.ENTRY`` (``OPTION`` a table option) sets that one entry, which
    is how ``ampsuite tune`` names an entry it varies (``inductor.coordinate_descent_tuning``).
    """
    out = dict(base)
    for key, value in over.items():
        head, dot, entry = key.partition(".")
        if dot and is_table_option(options_type, head):
            key, value = head, {entry: value}
        earlier = out.get(key)
        if isinstance(value, Mapping) and isinstance(earlier, Mapping) and is_table_option(options_type, key):
            value = {**earlier, **value}
        out[key] = value
    return out


def _table(tp: Any, value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise OptionError(key, f"expected a table (KEY = value), got {value!r}")
    args = get_args(tp)
    item = args[1] if len(args) == 2 else Any
    out = {}
    for name, v in value.items():
        sub = f"{key}.{toml_key(str(name))}"
        if not isinstance(name, str):
            raise OptionError(sub, f"expected a string key, got {name!r}")
        bad = _nonfinite(v) if item is Any else None
        if bad is not None:  # an untyped entry may be any TOML value; no option of a benchmark means NaN
            raise OptionError(sub, f"expected a finite number, got {bad!r}")
        out[name] = _coerce(item, v, sub)
    return out


def _entries(entry_type: Any, table: Mapping[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    """A table option's entries checked by its field's ``entry_type`` hook; sub-tables of names it refuses
    become dotted names (TOML's ``triton.tile_reductions = true`` is ``{"triton": {"tile_reductions": true}}``)."""
    out: dict[str, Any] = {}
    for name, value in table.items():
        full = prefix + name
        try:
            tp = entry_type(full)
        except ValueError as exc:
            if isinstance(value, Mapping) and value:
                out.update(_entries(entry_type, value, key, f"{full}."))
                continue
            raise UnknownOption(f"{key}.{toml_key(full)}", str(exc)) from exc
        out[full] = _coerce(tp, value, f"{key}.{toml_key(full)}")
    return out


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in _TABLES or tp in _TABLES:
        return _table(tp, value, key)
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
        found, choice = one_of(value, get_args(tp))
        if found:
            return choice
        raise OptionError(key, f"expected one of {one_of_text(get_args(tp))}, got {value!r}")
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            raise OptionError(key, f"expected {_type_name(tp)}, got {value!r}")
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item = args[0] if args else Any
        items = [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if tuple in (origin, tp) else items
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


def check_value(options_type: type, key: str, value: Any) -> Any:
    """``value`` as option ``key`` takes it: coerced to its type and held to its declared rules, alone (the
    options' ``__post_init__``, which ties options together, is :func:`build_options`'s to run).

    :raises OptionError: wrong type or a value outside the field's rules; :class:`UnknownOption` for a name the
        options do not have (with "did you mean").
    """
    hints = _hints(options_type)
    fields = {f.name: f for f in dataclasses.fields(options_type)}
    names = list(fields)
    if key not in hints or key not in names:
        close = difflib.get_close_matches(key, names, n=1)
        hint = (
            f"; did you mean {close[0]!r}?"
            if close
            else (f"; options are: {', '.join(names)}" if names else "; it takes no options")
        )
        raise UnknownOption(key, f"unknown option{hint}")
    checked = check_rules(fields[key].metadata, _coerce(hints[key], value, key), key)
    entry_type = fields[key].metadata.get("entry_type")
    if entry_type is not None and isinstance(checked, Mapping):
        return _entries(entry_type, checked, key)
    return checked


def build_options(options_type: type, values: Mapping[str, Any]) -> Any:
    """Build an options instance from plain values, checking names and types.

    :raises OptionError: unknown name (with "did you mean"), wrong type, a value outside the field's declared
        rules (bounds, choices, length, pattern), or a ValueError from the dataclass's own ``__post_init__``.
    """
    kwargs = {key: check_value(options_type, key, value) for key, value in values.items()}
    try:
        return options_type(**kwargs)
    except (ValueError, TypeError) as exc:
        raise OptionError("", str(exc)) from exc


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def options_as_dict(options: Any) -> dict[str, Any]:
    """Plain JSON-able values of an options instance (tuples become lists, tables plain dicts)."""
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}
