"""What every subcommand shares: its record, the plugin arguments, the registry, the report rendering."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampsuite.contract.errors import ExitCode

if TYPE_CHECKING:
    from ampsuite.host.manager import PluginSettings, Registry
    from ampsuite.host.session import Plan

__all__ = [
    "Command",
    "add_cell_args",
    "add_plugin_args",
    "cell_settings",
    "plan_cells",
    "plugin_settings",
    "registry",
    "render",
    "report_sections",
    "seconds",
]


@dataclass(frozen=True)
class Command:
    """One subcommand, as asv's commands and tox's session/cmd each keep theirs in a module of its own.

    A command module imports only argparse-level names at import time: ``ampsuite --help`` builds every
    parser, and must not pay for torch or the plugin manager.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    execute: Callable[[argparse.Namespace], ExitCode]


def add_plugin_args(p: argparse.ArgumentParser, dest: str = "plugin") -> None:
    p.add_argument(
        "-p",
        dest=dest,
        action="append",
        metavar="MODULE",
        help="load plugin MODULE; -p no:NAME blocks the plugin registered as NAME",
    )


def add_cell_args(p: argparse.ArgumentParser, keyword_help: str, per: str = "cell") -> None:
    """What a command that runs a suite's cells takes (run, tune, max-batch): the suite file, ``-k``, ``--device``,
    ``--timeout`` (seconds ``per`` cell or attempt) and ``--data-dir``."""
    p.add_argument("suite", nargs="?", help="suite file (TOML)")
    p.add_argument("-k", dest="keyword", metavar="EXPR", help=keyword_help)
    p.add_argument("--device", choices=("cpu", "cuda"), help="override the suite's device")
    p.add_argument("--timeout", type=seconds, help=f"seconds per {per} (overrides suite.timeout)")
    p.add_argument("--data-dir", default="reports/data", help="where generated data sets live")


def plan_cells(args: argparse.Namespace) -> Plan | None:
    """The suite's plan for :func:`add_cell_args`' arguments; None, having said so, when ``-k`` selects no cell."""
    from ampsuite.host import session
    from ampsuite.terminal import echo

    p = session.plan(args.suite, device=args.device, keyword=args.keyword, settings=plugin_settings(args))
    if not p.cells:
        echo(f"{p.spec.path}: no cells selected")
        return None
    return p


def cell_settings(args: argparse.Namespace, p: Plan) -> dict[str, Any]:
    """What a search's workers take from the command line: the plugins, the data folder, the timeout, the
    command (for the results file)."""
    # Keywords, not string keys: the literal "timeout" would spell a cell Status outside contract/status.py
    # (tests/test_layers.py keeps each status spelled in one module).
    return dict(plugins=p.settings, data_dir=Path(args.data_dir), timeout=args.timeout, argv=sys.argv)


def seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds > 0 within the bound the suite file's ``timeout`` has."""
    from ampsuite.spec.limits import MAX_TIMEOUT

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    if value > MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TIMEOUT:g} seconds (a week), got {text!r}")
    return value


def count(low: int, high: int) -> Callable[[str], int]:
    """An argument that is a whole number from ``low`` to ``high`` (``--rounds``, ``--limit``): out of range is a
    one-line usage error before anything runs, not a failure after minutes of measuring."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low:,} to {high:,}, got {text!r}")
        return value

    return parse


def plugin_settings(args: argparse.Namespace) -> PluginSettings:
    """The plugins to load: ``-p`` given before or after the subcommand, and the environment."""
    from ampsuite.host.manager import PluginSettings  # imported when needed: `ampsuite --help` stays fast

    # -p before the subcommand (main parser) and after it (subparser) land in different attributes:
    # argparse lets a subparser's default overwrite the main parser's value for one dest.
    return PluginSettings.from_args([*(getattr(args, "global_plugin", None) or []), *(args.plugin or [])])


def registry(args: argparse.Namespace) -> Registry:
    from ampsuite.host.manager import load_registry

    return load_registry(plugin_settings(args))


def report_sections(registry: Registry, docs: list[dict[str, Any]]) -> list[Any]:
    """What plugins add to the report, collected once per rendering."""
    return [s for group in registry.hook.ampsuite_report_sections(results=docs) for s in group]


def render(
    sections: list[Any],
    docs: list[dict[str, Any]],
    out_dir: Path,
    compare_with: Any = None,
    history: Any = None,
    files: Sequence[str | Path] = (),
    inputs: Sequence[str | Path | None] = (),
) -> Path:
    """The report site of ``docs`` in ``out_dir``; ``files`` (the documents' files) and ``inputs`` (other files the
    command read) are never replaced (:mod:`ampsuite.results.outputs`). A signal while it is written ends the
    command once the site is whole."""
    from ampsuite.contract.errors import OutputError
    from ampsuite.report import render_site
    from ampsuite.run.signals import deferred
    from ampsuite.terminal import echo

    try:
        with deferred():
            return Path(
                render_site(
                    docs,
                    out_dir,
                    compare_with=compare_with,
                    history=history,
                    extra_sections=sections,
                    results_files=files,
                    inputs=[i for i in inputs if i is not None],
                    note=echo,
                )
            )
    except OSError as exc:  # read-only folder, full disk: one line, exit OUTPUT_ERROR
        # A failed copy (the page's stylesheet, a trace) names its source first and the file it wrote second.
        raise OutputError(exc.filename2 or exc.filename or str(out_dir), exc) from None
