"""One table of a suite file, read key by key: each key popped as it is read, so that what is left is unknown.

Every error is a :class:`SuiteFileError` naming the file, the key path and what was expected; an unknown key
gets a "did you mean". :mod:`ampsuite.spec.suitefile` reads every table with it, and
:mod:`ampsuite.spec.quality` the ``[quality]`` table.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from ampsuite.contract.errors import SuiteFileError
from ampsuite.spec import limits
from ampsuite.spec.combinations import show_value as _show

__all__ = ["TableReader", "too_large"]


class TableReader:
    """Pops keys from one table so that leftovers can be reported as unknown."""

    def __init__(self, path: str, key: str, table: Any, known: tuple[str, ...] | None = None) -> None:
        if not isinstance(table, dict):
            raise SuiteFileError(path, key, f"expected a table, got {_show(table)}")
        self.path, self.key, self.table, self.known = path, key, dict(table), known

    def _key(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def error(self, name: str, message: str) -> SuiteFileError:
        return SuiteFileError(self.path, self._key(name), message)

    def get(self, name: str, kind: type | tuple[type, ...], default: Any, what: str) -> Any:
        if name not in self.table:
            return default
        value = self.table.pop(name)
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self.error(name, f"expected {what}, got {_show(value)}")
        if not isinstance(value, kind):
            raise self.error(name, f"expected {what}, got {_show(value)}")
        return value

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float,
        maximum: float,
        integer: bool = False,
        strict: bool = False,
        bound: str = limits.WORK_BOUND,
    ) -> Any:
        what = ("an integer" if integer else "a number") + (f" > {minimum:g}" if strict else f" >= {minimum:g}")
        value = self.get(name, int if integer else (int, float), default, what)
        if not math.isfinite(value):  # TOML has nan and inf; every number here must be finite
            raise self.error(name, f"expected a finite number{what.removeprefix('a number')}, got {value!r}")
        if value < minimum or (strict and value == minimum):
            raise self.error(name, f"expected {what}, got {_show(value)}")
        if value > maximum:
            raise self.error(name, too_large(maximum, value, bound))
        return float(value) if not integer else value

    def finish(self) -> None:
        """Refuse whatever key is left (one that no ``get`` took)."""
        if self.table:
            self._unknown(sorted(self.table)[0])

    def refuse_unknown(self) -> None:
        """Refuse keys outside ``known`` now, before later checks could blame a misspelling on something else."""
        if self.known is not None:
            unknown = sorted(k for k in self.table if k not in self.known)
            if unknown:
                self._unknown(unknown[0])

    def _unknown(self, name: str) -> None:
        hint = ""
        if self.known:
            close = difflib.get_close_matches(name, self.known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(self.known)}"
        raise self.error(name, f"unknown key{hint}")


def too_large(maximum: float, value: Any, why: str = limits.WORK_BOUND) -> str:
    """The error of a value over its bound, with why the bound exists."""
    shown = f"{maximum:,.0f}" if float(maximum).is_integer() else f"{maximum:g}"
    return f"expected at most {shown} ({why}), got {str(value)[:40]}"
