"""The suite file's ``[combinations]`` (technique lists, the suite's base techniques, and ``-NAME``) and
``[combination_options]``."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ampsuite.contract.errors import SuiteFileError
from ampsuite.spec.names import shown_id, unsafe_id

__all__ = ["parse_combination_options", "parse_combinations", "show_value"]


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
        # First, so that no later message prints a key with a newline in it.
        problem = unsafe_id(cid, "combination")
        if problem:
            raise SuiteFileError(path, shown_id("combinations", cid), problem)
        if not isinstance(techniques, list) or not all(isinstance(t, str) for t in techniques):
            raise SuiteFileError(
                path, f"combinations.{cid}", f"expected a list of technique names, got {show_value(techniques)}"
            )
        if len(set(techniques)) != len(techniques):
            raise SuiteFileError(path, f"combinations.{cid}", f"a technique is listed twice: {techniques!r}")
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


def parse_combination_options(
    path: str, table: dict[str, Any], combinations: Mapping[str, tuple[str, ...]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """``[combination_options.ID.TECHNIQUE]``: each names a declared combination and one of its techniques."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cid, techniques in table.items():
        key = f"combination_options.{cid}"
        if cid not in combinations:
            close = difflib.get_close_matches(cid, list(combinations), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"combinations are: {', '.join(combinations)}"
            raise SuiteFileError(path, key, f"{cid!r} is not a combination; {hint}")
        if not isinstance(techniques, dict) or not techniques:
            raise SuiteFileError(path, key, f"expected [{key}.TECHNIQUE] option tables, got {show_value(techniques)}")
        for tname, options in techniques.items():
            if tname not in combinations[cid]:
                listed = ", ".join(combinations[cid]) or "none"
                raise SuiteFileError(
                    path, f"{key}.{tname}", f"{tname!r} is not in combination {cid!r} (its techniques: {listed})"
                )
            if not isinstance(options, dict):
                raise SuiteFileError(path, f"{key}.{tname}", f"expected a table of options, got {show_value(options)}")
            out.setdefault(cid, {})[tname] = dict(options)
    return out
