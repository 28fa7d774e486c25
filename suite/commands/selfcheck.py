"""``ampsuite selfcheck``: the harness timed against plain hand-written loops of the same step."""

from __future__ import annotations

import argparse
from pathlib import Path

from ampsuite.commands.common import Command, count
from ampsuite.contract.errors import ExitCode


def add_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("--device", choices=("cpu", "cuda"))
    check.add_argument("-k", dest="keyword", metavar="EXPR", help="only checks whose name matches EXPR")
    check.add_argument("--rounds", type=count(1, 1000), default=3, help="alternating harness/plain rounds")
    check.add_argument("--min-ratio", type=float, default=0.97, help="flag checks below this plain/harness ratio")
    check.add_argument("-o", "--output", help="write the figures as JSON")
    source = check.add_mutually_exclusive_group()
    source.add_argument(
        "--tuned", metavar="RESULTS", help="check the winners of this tune results file instead of the built-in checks"
    )
    source.add_argument(
        "--cells",
        metavar="RESULTS",
        help="check every passed cell of this results file (-k matches 'cell ID') instead of the built-in checks",
    )


def execute(args: argparse.Namespace) -> ExitCode:
    import json

    import torch

    from ampsuite.display import make_console
    from ampsuite.host import environment, session
    from ampsuite.run import selfcheck
    from ampsuite.spec.keyword import KeywordExpression
    from ampsuite.terminal import plain

    device = session.resolve_device("auto", args.device)
    if args.output:  # before minutes of checks: -o never replaces the file read, nor a run without a backup
        from ampsuite.results.outputs import claim

        kept = claim(Path(args.output), [args.tuned, args.cells], "-o")
        if kept is not None:
            make_console().print(plain(f"{args.output}: an earlier run's results file, kept as {kept}"), markup=False)
    if args.tuned or args.cells:
        from ampsuite import results

        if args.tuned:
            path, checks = args.tuned, selfcheck.tuned_checks(results.load(args.tuned))
            missing = "no tune winner to check (not a tune results file?)"
        else:
            path, checks = args.cells, selfcheck.cell_checks(results.load(args.cells))
            missing = "no passed single-process cell to check"
        if not checks:
            make_console().print(plain(f"{path}: {missing}"), markup=False)
            return ExitCode.NO_CELLS
    else:
        checks = selfcheck.CHECKS[device]
    if args.keyword:
        expr = KeywordExpression(args.keyword)
        checks = tuple(c for c in checks if expr.matches(c.name))
    console = make_console()
    rows = []
    worst = ExitCode.OK
    for check in checks:
        try:
            r = selfcheck.run_check(check, device, rounds=args.rounds)
        except (selfcheck.NotComparable, torch.OutOfMemoryError) as exc:
            reason = str(exc)
            if isinstance(exc, torch.OutOfMemoryError):  # a failure of this check only: the ones after it still run
                worst = ExitCode.CELLS_FAILED
                reason = f"out of memory on {device}: {reason.splitlines()[0]}"
            console.print(plain(f"{check.name}: not checked: {reason}"), markup=False)
            rows.append({"name": check.name, "not_checked": reason})
            continue
        finally:
            selfcheck.release(device)
        flag = "" if r.ratio >= args.min_ratio else f"  BELOW {args.min_ratio:.2f}"
        if flag:
            worst = ExitCode.CELLS_FAILED
        console.print(
            plain(
                f"{r.name}: harness {r.harness_median * 1e3:.3f} ms (noise {r.harness_noise:.2%}), "
                f"plain loop {r.plain_per_step * 1e3:.3f} ms, ratio {r.ratio:.3f}{flag}"
            ),
            markup=False,
        )
        rows.append(selfcheck.as_dict(r))
    if args.output:
        env = environment.collect(device)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps({"environment": env, "checks": rows}, indent=1), encoding="utf-8")
        console.print(f"selfcheck: {args.output}", markup=False)
    return worst


COMMAND = Command(
    "selfcheck", "time the harness against a plain hand-written loop, same process", add_arguments, execute
)
