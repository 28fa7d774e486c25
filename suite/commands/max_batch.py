"""``ampsuite max-batch``: the largest batch size that runs, per workload and combination."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampsuite.commands.common import Command, add_cell_args, cell_settings, plan_cells
from ampsuite.contract.errors import ExitCode, UsageError
from ampsuite.contract.wire import Status
from ampsuite.terminal import echo


def add_arguments(mb: argparse.ArgumentParser) -> None:
    add_cell_args(mb, "only cells whose id matches EXPR (and, or, not)", per="attempt")
    mb.add_argument("--start", type=int, help="first batch size (default: the suite's smallest for that workload)")
    mb.add_argument("--limit", type=int, default=65536, help="largest batch size to try (default 65536)")
    mb.add_argument("-o", "--output", help="results file (default reports/SUITE-NAME/max-batch.json)")


def _print_record(record: dict[str, Any]) -> None:
    facts = record["metrics"].get("max_batch")
    if facts is None:
        echo(f"{record['id']}: {record['status']}")
    elif record["status"] == Status.PASSED:
        unit = record["workload"]["unit"]
        echo(f"{record['id']}: {facts['largest']} ({record['metrics']['throughput']:,.1f} {unit}/s)")
    else:
        reason = (record.get("evidence") or {}).get("reason") or (record.get("evidence") or {}).get("message", "")
        echo(f"{record['id']}: {record['status']} {reason}".rstrip())


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite.results.outputs import file_target
    from ampsuite.run import maxbatch

    if args.output is not None:  # before the search: a directory there would be renamed aside
        file_target(args.output, "-o", "the results file")
    p = plan_cells(args)
    if p is None:
        return ExitCode.NO_CELLS
    output = Path(args.output) if args.output is not None else Path("reports") / p.spec.dir_name / "max-batch.json"
    try:
        config = maxbatch.SearchConfig(
            output=output,
            start=args.start,
            limit=args.limit,
            **cell_settings(args, p),
        )
    except ValueError as exc:
        raise UsageError(f"max-batch: {exc}") from None
    summaries = maxbatch.search(p, config, _print_record)
    echo(f"results: {output}")
    return (
        ExitCode.OK if all(r["status"] in (Status.PASSED, Status.SKIPPED) for r in summaries) else ExitCode.CELLS_FAILED
    )


COMMAND = Command(
    "max-batch", "find the largest batch size that runs, per workload and combination", add_arguments, execute
)
