"""The ``ampsuite`` command: the parser assembled from ``ampsuite.commands``, and one exit code per outcome.

Every user error is one line on stderr and an :class:`ExitCode`; only a bug prints a traceback. Every command
runs under one signal policy (:mod:`ampsuite.run.signals`): SIGINT, SIGTERM and SIGHUP interrupt it, what was
measured is written, and it exits INTERRUPTED (2).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from ampsuite import __version__
from ampsuite.commands import COMMANDS
from ampsuite.commands.common import add_plugin_args
from ampsuite.contract.errors import AmpsuiteError, ExitCode, UsageError
from ampsuite.run.signals import interrupts
from ampsuite.terminal import echo

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit 2, which means INTERRUPTED here
        # "ampsuite: error: " comes first already: name the subcommand alone, once.
        command = self.prog.removeprefix("ampsuite").strip()
        raise UsageError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ampsuite", description="Benchmark mixed-precision training techniques.")
    parser.add_argument("--version", action="version", version=f"ampsuite {__version__}")
    add_plugin_args(parser, dest="global_plugin")  # -p anywhere: `ampsuite -p no:NAME list` as well
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        add_plugin_args(p)
        command.add_arguments(p)
        p.set_defaults(func=command.execute)
    return parser


UNFINISHED = (ExitCode.OK, ExitCode.CELLS_FAILED, ExitCode.NO_CELLS)
"""Outcomes that a signal received on the way turns into INTERRUPTED: the command did not do all it was asked."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (the process's own arguments when None) and return its exit code.

    Called without ``argv`` the process is this command's (the ``ampsuite`` script, ``python -m ampsuite``): the
    signals stay ignored after it returns (its exit code is decided, and a Ctrl-C during the interpreter's
    teardown would otherwise end the process silently with 130), and an interrupted command exits at once.
    """
    own = argv is None
    with interrupts(keep_ignoring=own) as policy:
        code = _command(argv)
        if policy.received is not None and code in UNFINISHED:
            # The signal came while the output was being written, which was finished first: say why exit 2.
            echo(f"ampsuite: interrupted ({policy.received}) after its output was written whole", file=sys.stderr)
            code = ExitCode.INTERRUPTED
    if own and policy.received is not None:
        # Asked to stop, and what was measured is written: leave without the interpreter's teardown, which
        # (torch's, a CUDA context's) takes seconds. Files are closed by the OS, the results lock with them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    return int(code)


def _command(argv: Sequence[str] | None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help and --version: argparse's own exit, with its own code
            return exc.code if isinstance(exc.code, int) else 0
        return int(args.func(args))
    except AmpsuiteError as exc:
        echo(f"ampsuite: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        echo("ampsuite: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exc:  # sys.exit() in code the command ran (a plugin's hook): not a way to end ampsuite
        echo(
            f"ampsuite: error: sys.exit({exc.code!r}) was called while the command ran (by a plugin?); "
            "a plugin reports an error by raising an exception",
            file=sys.stderr,
        )
        return int(ExitCode.USAGE_ERROR)
    except Exception as exc:
        missing = _missing_requirement(exc)
        if missing is not None:  # an environment installed without ampsuite's dependencies: not a bug
            echo(f"ampsuite: error: {missing}", file=sys.stderr)
            return int(ExitCode.USAGE_ERROR)
        for line in traceback.format_exc().splitlines():  # an exception's message may be a plugin's text
            echo(line, file=sys.stderr)
        echo("ampsuite: internal error (a bug in ampsuite; please report it with the traceback above)", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)


def _missing_requirement(exc: BaseException) -> str | None:
    """What to say when ``exc`` is the import of one of ampsuite's own requirements (no extra's) that is not
    installed; None for any other exception."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    from importlib import metadata

    try:
        declared = metadata.requires("ampsuite") or []
    except metadata.PackageNotFoundError:
        return None
    top = exc.name.partition(".")[0].lower()
    for text in declared:
        spec, _, marker = text.partition(";")
        name = re.match(r"[A-Za-z0-9._-]+", spec.strip())
        if name and "extra" not in marker and name.group().lower().replace("-", "_") == top:
            return (
                f"no module named {exc.name!r}: ampsuite requires {spec.strip()!r}, which is not installed in "
                "this environment (pip install ampsuite installs it)"
            )
    return None
