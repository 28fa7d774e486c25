"""``ampsuite show``: the terminal table of results files."""

from __future__ import annotations

import argparse

from ampsuite.commands.common import Command
from ampsuite.contract.errors import ExitCode


def add_arguments(show: argparse.ArgumentParser) -> None:
    show.add_argument("results", nargs="+")


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results
    from ampsuite.summary import print_summary

    for path in args.results:
        print_summary(results.load(path))
    return ExitCode.OK


COMMAND = Command("show", "print the table of a results file", add_arguments, execute)
