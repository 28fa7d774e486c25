"""Which executor runs a suite's cells, with which options: the suite file's ``[executor]`` and the command line.

The suite file's ``[executor]`` table names an executor and sets its options;
``ampsuite run --executor NAME`` picks another one (the table's options then
belong to an executor not in use and are ignored), and ``--executor-option
KEY=VALUE`` overrides one option. A bad key or value in the suite file is a
:class:`SuiteFileError` naming the file and ``executor.KEY``; one given on the
command line is a :class:`UsageError` naming the option.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ampsuite.contract.errors import SuiteFileError, UsageError
from ampsuite.contract.plugin import Executor
from ampsuite.spec.options import OptionError, build_options
from ampsuite.spec.suitespec import SuiteSpec

__all__ = ["DEFAULT", "Chosen", "parse_option", "resolve"]

DEFAULT = "local"
"""The executor of a run that names none: the cells one after another on this machine."""


@dataclass(frozen=True)
class Chosen:
    """The executor a run uses and its validated options instance."""

    executor: Executor
    options: Any


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line: VALUE read as a TOML value (``30``, ``true``, ``"a b"``), else as text."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--executor-option: expected KEY=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def resolve(
    spec: SuiteSpec,
    executors: Mapping[str, Executor],
    name: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Chosen:
    """The executor ``name`` (else the suite's, else ``local``) with the suite's options and ``overrides`` applied.

    :raises SuiteFileError: an unknown executor or a bad option in the suite file's ``[executor]``.
    :raises UsageError: an unknown ``--executor`` or a bad ``--executor-option``.
    """
    overrides = dict(overrides or {})
    from_suite = name is None or name == spec.executor.name
    chosen = name or spec.executor.name or DEFAULT
    if chosen not in executors:
        close = difflib.get_close_matches(chosen, list(executors), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"choose one of: {', '.join(sorted(executors))}"
        message = f"unknown executor {chosen!r}; {hint} (see `ampsuite list`)"
        if name is None:
            raise SuiteFileError(spec.path, "executor.name", message)
        raise UsageError(f"--executor: {message}")
    record = executors[chosen]
    suite_options = dict(spec.executor.options) if from_suite else {}
    try:
        build_options(record.options, suite_options)
    except OptionError as exc:
        key = "executor" + (f".{exc.key}" if exc.key else "")
        raise SuiteFileError(spec.path, key, f"{exc.message} (executor {chosen!r})") from exc
    try:
        options = build_options(record.options, {**suite_options, **overrides})
    except OptionError as exc:
        where = f"--executor-option {exc.key}" if exc.key else "--executor-option"
        raise UsageError(f"{where}: {exc.message} (executor {chosen!r})") from exc
    return Chosen(record, options)
