"""The ``ampsuite`` command: the parser assembled from ``ampsuite.commands``, and one exit code per outcome.

Every user error is one line on stderr and an :class:`ExitCode`; only a bug prints a traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from ampsuite import __version__
from ampsuite.commands import COMMANDS
from ampsuite.commands.common import add_plugin_args
from ampsuite.contract.errors import AmpsuiteError, ExitCode, UsageError

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit 2, which means INTERRUPTED here
        raise UsageError(f"{self.prog}: {message}")


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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except AmpsuiteError as exc:
        print(f"ampsuite: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("ampsuite: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except Exception:
        traceback.print_exc()
        print(
            "ampsuite: internal error (a bug in ampsuite; please report it with the traceback above)", file=sys.stderr
        )
        return int(ExitCode.INTERNAL_ERROR)
