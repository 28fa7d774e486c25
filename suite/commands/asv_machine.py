"""``ampsuite asv-machine``: asv's machine file, written from this machine's facts without prompts."""

from __future__ import annotations

import argparse

from ampsuite.commands.common import Command
from ampsuite.contract.errors import ExitCode, UsageError
from ampsuite.terminal import echo


def add_arguments(machine: argparse.ArgumentParser) -> None:
    machine.add_argument("--machine", help="entry name (default: the host name, as asv uses)")
    machine.add_argument("--file", help="machine file (default ~/.asv-machine.json)")


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite.asvtools.machine import write_machine_file

    try:
        path = write_machine_file(args.file, args.machine)
    except ValueError as exc:
        raise UsageError(f"asv-machine: {exc}") from exc
    echo(f"asv machine file: {path}")
    return ExitCode.OK


COMMAND = Command("asv-machine", "write asv's machine file (GPU, driver, CUDA) without prompts", add_arguments, execute)
