"""Rules on one option, declared once in its field's metadata: checked by :func:`ampsuite.spec.options.build_options`
and written out by ``ampsuite list``.

The names are those annotated-types and pydantic use:

``ge``, ``gt``, ``le``, ``lt``
    a number's bounds (at least, above, at most, below): ``{"ge": 1}``.
``choices``
    the values the option takes, for a set the type cannot spell (``tuple(DEPTHS)``, a registry's
    names); a ``Literal[...]`` type says the same for a fixed set and is checked likewise.
``min_length``
    the fewest characters of a string, items of a list or entries of a table: ``{"min_length": 1}``.
``pattern``
    a regular expression a string matches whole: ``{"pattern": r"[a-z_]+(\\.[a-z_]+)*"}``.

On a list option, ``min_length`` counts its items and the other rules hold for each item
(its key ``NAME[i]``). ``None`` (an option typed ``X | None``, unset) passes every rule.

``tune`` is no rule: it names the values ``ampsuite tune`` tries for the option of its own accord
(``()``: none), where they are fewer than the choices (docs/tune.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

__all__ = ["BOUNDS", "OptionError", "check_metadata", "check_rules", "one_of", "one_of_text", "rules_text"]


class OptionError(ValueError):
    """A bad option value; ``key`` is the option name (``layers[1]`` for a list's item; empty for the whole
    table)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


BOUNDS: dict[str, tuple[str, Callable[[Any, Any], bool]]] = {
    "ge": (">=", lambda value, bound: value >= bound),
    "gt": (">", lambda value, bound: value > bound),
    "le": ("<=", lambda value, bound: value <= bound),
    "lt": ("<", lambda value, bound: value < bound),
}
"""Field-metadata bound names: the comparison as written in messages, and the test."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def one_of(value: Any, allowed: Collection[Any]) -> tuple[bool, Any]:
    """Whether ``value`` is one of ``allowed``, and the allowed value it is (an integer for a float choice is that
    float). Types are compared too: ``True`` is not the choice ``1``, nor ``4.0`` the choice ``4``."""
    for choice in allowed:
        same = type(value) is type(choice) or (type(choice) is float and _is_number(value))
        if same and value == choice:
            return True, choice
    return False, None


def one_of_text(allowed: Collection[Any]) -> str:
    """``'a', 'b'``: the choices as messages write them."""
    return ", ".join(repr(a) for a in allowed)


def _bounds_text(metadata: Mapping[str, Any]) -> str:
    return " and ".join(f"{op} {metadata[name]!r}" for name, (op, _) in BOUNDS.items() if name in metadata)


def _too_short(n: int, value: Any) -> str | None:
    """What ``value`` should have been when it is shorter than ``n`` (None when it is long enough, or unsized)."""
    if isinstance(value, str):
        what, unit = "string", "characters"
    elif isinstance(value, Mapping):
        what, unit = "table", "entries"
    elif isinstance(value, list | tuple):
        what, unit = "list", "items"
    else:
        return None
    if len(value) >= n:
        return None
    return f"a non-empty {what}" if n == 1 else f"a {what} of at least {n} {unit}"


def _check_item(metadata: Mapping[str, Any], value: Any, key: str) -> Any:
    if "choices" in metadata:
        found, choice = one_of(value, metadata["choices"])
        if not found:
            raise OptionError(key, f"expected one of {one_of_text(metadata['choices'])}, got {value!r}")
        value = choice
    if _is_number(value):
        for name, (_, ok) in BOUNDS.items():
            if name in metadata and not ok(value, metadata[name]):
                kind = "an integer" if isinstance(value, int) else "a number"
                raise OptionError(key, f"expected {kind} {_bounds_text(metadata)}, got {value!r}")
    if isinstance(value, str) and "pattern" in metadata and re.fullmatch(metadata["pattern"], value) is None:
        raise OptionError(key, f"expected a string matching {metadata['pattern']}, got {value!r}")
    return value


def check_rules(metadata: Mapping[str, Any], value: Any, key: str) -> Any:
    """``value`` (already of its field's type) checked against the rules in ``metadata``; returns it with each
    choice as declared.

    :raises OptionError: the first rule it breaks, keyed by ``key`` (or ``key[i]`` for a list's item).
    """
    if value is None:
        return None
    expected = _too_short(metadata["min_length"], value) if "min_length" in metadata else None
    if expected is not None:
        raise OptionError(key, f"expected {expected}, got {value!r}")
    if isinstance(value, list | tuple):
        return type(value)(_check_item(metadata, item, f"{key}[{i}]") for i, item in enumerate(value))
    if isinstance(value, Mapping):
        return value
    return _check_item(metadata, value, key)


def rules_text(metadata: Mapping[str, Any], type_name: str, *, is_bool: bool = False) -> str:
    """The field's type as ``ampsuite list`` shows it with its rules: ``int >= 1``, ``18 | 34 | 50``,
    ``non-empty str``, ``str matching RE``."""
    text = type_name
    if "choices" in metadata:
        # The choices name the values, as a Literal type's do; a list's are its items'.
        choices = " | ".join(repr(c) for c in metadata["choices"])
        text = f"list of {choices}" if type_name.startswith("list of ") else choices
        text += " or none" if type_name.endswith(" or none") else ""
    bounds = "" if is_bool else _bounds_text(metadata)
    if bounds:
        text = f"{text} {bounds}"
    if "pattern" in metadata:
        text = f"{text} matching {metadata['pattern']}"
    n = metadata.get("min_length")
    if n is not None:
        text = f"non-empty {text}" if n == 1 else f"{text} of length >= {n}"
    return text


def check_metadata(metadata: Mapping[str, Any], name: str) -> None:
    """A field's declared rules are well-formed (checked when a plugin loads).

    :raises OptionError: keyed by the option's name.
    """
    choices = metadata.get("choices")
    if choices is not None and (isinstance(choices, str | bytes | Mapping) or not isinstance(choices, Sequence)):
        raise OptionError(name, f"choices must be a list or tuple of values, got {choices!r}")
    if choices is not None and not choices:
        raise OptionError(name, "choices must name at least one value")
    n = metadata.get("min_length")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise OptionError(name, f"min_length must be an integer >= 0, got {n!r}")
    if "pattern" in metadata:
        try:
            re.compile(metadata["pattern"])
        except (re.error, TypeError) as exc:
            raise OptionError(name, f"pattern {metadata['pattern']!r} is no regular expression: {exc}") from exc
    for bound in BOUNDS:
        if bound in metadata and not _is_number(metadata[bound]):
            raise OptionError(name, f"{bound} must be a number, got {metadata[bound]!r}")
    tried = metadata.get("tune", ())
    if isinstance(tried, str | bytes | Mapping) or not isinstance(tried, Sequence):
        raise OptionError(name, f"tune must be a list or tuple of values, got {tried!r}")
