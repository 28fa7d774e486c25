"""The suite file's ``[combinations]``: technique lists, the suite's base techniques, and ``-NAME``."""

from __future__ import annotations

from typing import Any

from ampsuite.contract.errors import SuiteFileError

__all__ = ["parse_combinations", "show_value"]


def show_value(value: Any) -> str:
    """A suite-file value as error messages quote it (tables and long lists by kind only)."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return f"a list {value!r}" if len(repr(value)) < 60 else "a list"
    return repr(value)


def parse_combinations(path: str, table: dict[str, Any], base: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each combination id with its techniques (base techniques first), checked; ``path`` is for messages."""
    combinations: dict[str, tuple[str, ...]] = {}
    for cid, techniques in table.items():
        if not isinstance(techniques, list) or not all(isinstance(t, str) for t in techniques):
            raise SuiteFileError(
                path, f"combinations.{cid}", f"expected a list of technique names, got {show_value(techniques)}"
            )
        if len(set(techniques)) != len(techniques):
            raise SuiteFileError(path, f"combinations.{cid}", f"a technique is listed twice: {techniques!r}")
        if any(c in cid for c in "/[], ") or not cid:
            raise SuiteFileError(
                path, f"combinations.{cid}", "combination ids may not contain '/', '[', ']', ',' or spaces"
            )
        combinations[cid] = _with_base(path, cid, base, techniques)
    return combinations


def _with_base(path: str, cid: str, base: tuple[str, ...], techniques: list[str]) -> tuple[str, ...]:
    """A combination's techniques: the suite's base techniques, less those it removes with ``-NAME``, then its own.

    A base technique is part of every combination so that baselines are tuned the way
    practitioners run them (cudnn.benchmark on); ``-NAME`` keeps an extra row with
    PyTorch's plain defaults for comparison.
    """
    removed = {t[1:] for t in techniques if t.startswith("-")}
    unknown = sorted(removed - set(base))
    if unknown:
        raise SuiteFileError(
            path, f"combinations.{cid}", f"'-{unknown[0]}' removes a technique that is not in suite.base_techniques"
        )
    own = [t for t in techniques if not t.startswith("-")]
    return (*[t for t in base if t not in removed and t not in own], *own)
