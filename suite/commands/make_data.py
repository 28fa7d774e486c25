"""``ampsuite make-data``: write the on-disk data sets that a suite's data-path workloads read."""

from __future__ import annotations

import argparse

from ampsuite.commands.common import Command, plugin_settings
from ampsuite.contract.errors import ExitCode
from ampsuite.terminal import echo


def add_arguments(data: argparse.ArgumentParser) -> None:
    data.add_argument("suite", nargs="?")
    data.add_argument("--device", choices=("cpu", "cuda"))
    data.add_argument("--data-dir", default="reports/data")


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite.host import session
    from ampsuite.spec.options import build_options

    p = session.plan(args.suite, device=args.device, settings=plugin_settings(args))
    done = set()
    for cell in p.cells:
        record = p.registry.workloads[cell.workload]
        key = (cell.workload, repr(sorted(cell.options.items())))
        if record.prepare is None or key in done:
            continue
        done.add(key)
        where = record.prepare(build_options(record.options, cell.options), args.data_dir)
        echo(f"{cell.workload_id}: {where or 'synthetic data, nothing written'}")
    return ExitCode.OK


COMMAND = Command("make-data", "generate the on-disk data sets a suite's workloads read", add_arguments, execute)
