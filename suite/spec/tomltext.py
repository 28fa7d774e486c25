"""Plain data (a suite as dicts and lists) written as TOML text: the inverse of ``tomllib.loads`` for suites.

Written here rather than taken from a library (tomli-w) because a suite file has few
shapes (scalars, lists, tables, arrays of tables, inline tables) and a dependency for
forty lines is not worth its weight; ``tomllib`` reads back everything written here,
which the tests check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["toml_key", "toml_lines", "toml_value"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # 1e-05, inf and nan are TOML floats as Python writes them
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list | tuple) and bool(value) and all(isinstance(v, Mapping) for v in value)


def toml_lines(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[str]:
    """TOML lines for a suite as plain data (tables, arrays of tables, scalars, lists)."""
    lines = []
    for key, value in data.items():
        if not isinstance(value, Mapping) and not _is_table_array(value):
            lines.append(f"{toml_key(str(key))} = {toml_value(value)}")
    for key, value in data.items():
        path = (*prefix, toml_key(str(key)))
        if isinstance(value, Mapping):
            lines += ["", f"[{'.'.join(path)}]", *toml_lines(value, path)]
        elif _is_table_array(value):
            for item in value:
                lines += ["", f"[[{'.'.join(path)}]]"]
                lines += [f"{toml_key(str(k))} = {toml_value(v)}" for k, v in item.items()]
    return lines
