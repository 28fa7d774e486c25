"""``ampsuite new-plugin``: the skeleton of a third-party plugin package."""

from __future__ import annotations

import argparse

from ampsuite.commands.common import Command
from ampsuite.contract.errors import ExitCode
from ampsuite.terminal import echo


def add_arguments(new_plugin: argparse.ArgumentParser) -> None:
    new_plugin.add_argument("name", help="distribution name of the package, e.g. ampsuite-myplugin")
    new_plugin.add_argument(
        "-o",
        "--output",
        default=".",
        help="directory in which the package's own folder NAME/ is created (default .: ./NAME)",
    )


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite import scaffold

    target = scaffold.create(args.name, args.output)
    names = scaffold.plugin_names(args.name)
    echo(f"created {target}: workload {names.workload!r}, technique {names.technique!r}")
    where = target if target.is_absolute() else f"./{target}"  # pip reads a bare name as a PyPI project
    echo(f"next: pip install -e '{where}[test]' && ampsuite list && pytest {where}")
    return ExitCode.OK


COMMAND = Command("new-plugin", "write a plugin package: one workload, one technique, a test", add_arguments, execute)
