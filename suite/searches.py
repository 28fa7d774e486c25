"""The subcommands that search or check rather than run a suite: ``max-batch``, ``tune``, ``selfcheck``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ampsuite.cliargs import plugin_settings as _plugin_settings
from ampsuite.contract.errors import ExitCode, UsageError
from ampsuite.contract.wire import Status

__all__ = ["cmd_max_batch", "cmd_selfcheck", "cmd_tune"]


def cmd_selfcheck(args: argparse.Namespace) -> ExitCode:
    import json

    from ampsuite.display import make_console
    from ampsuite.host import environment, session
    from ampsuite.run import selfcheck
    from ampsuite.spec.keyword import KeywordExpression

    device = session.resolve_device("auto", args.device)
    if args.tuned or args.cells:
        from ampsuite import results

        if args.tuned:
            path, checks = args.tuned, selfcheck.tuned_checks(results.load(args.tuned))
            missing = "no tune winner to check (not a tune results file?)"
        else:
            path, checks = args.cells, selfcheck.cell_checks(results.load(args.cells))
            missing = "no passed single-process cell to check"
        if not checks:
            make_console().print(f"{path}: {missing}", markup=False)
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
        except selfcheck.NotComparable as exc:
            console.print(f"{check.name}: not checked: {exc}", markup=False)
            rows.append({"name": check.name, "not_checked": str(exc)})
            continue
        flag = "" if r.ratio >= args.min_ratio else f"  BELOW {args.min_ratio:.2f}"
        if flag:
            worst = ExitCode.CELLS_FAILED
        console.print(
            f"{r.name}: harness {r.harness_median * 1e3:.3f} ms (noise {r.harness_noise:.2%}), "
            f"plain loop {r.plain_per_step * 1e3:.3f} ms, ratio {r.ratio:.3f}{flag}",
            markup=False,
        )
        rows.append(selfcheck.as_dict(r))
    if args.output:
        env = environment.collect(device)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps({"environment": env, "checks": rows}, indent=1), encoding="utf-8")
        console.print(f"selfcheck: {args.output}", markup=False)
    return worst


def cmd_max_batch(args: argparse.Namespace) -> ExitCode:
    from ampsuite.host import session
    from ampsuite.run import maxbatch

    p = session.plan(args.suite, device=args.device, keyword=args.keyword, settings=_plugin_settings(args))
    if not p.cells:
        print(f"{p.spec.path}: no cells selected")
        return ExitCode.NO_CELLS
    output = Path(args.output) if args.output else Path("reports") / p.spec.dir_name / "max-batch.json"
    try:
        config = maxbatch.SearchConfig(
            output=output,
            start=args.start,
            limit=args.limit,
            plugins=p.settings,
            data_dir=Path(args.data_dir),
            timeout=args.timeout,
            argv=sys.argv,
        )
    except ValueError as exc:
        raise UsageError(f"max-batch: {exc}") from None

    def report(record: dict[str, Any]) -> None:
        facts = record["metrics"].get("max_batch")
        if facts is None:
            print(f"{record['id']}: {record['status']}", flush=True)
        elif record["status"] == Status.PASSED:
            unit = record["workload"]["unit"]
            print(f"{record['id']}: {facts['largest']} ({record['metrics']['throughput']:,.1f} {unit}/s)", flush=True)
        else:
            reason = (record.get("evidence") or {}).get("reason") or (record.get("evidence") or {}).get("message", "")
            print(f"{record['id']}: {record['status']} {reason}".rstrip(), flush=True)

    summaries = maxbatch.search(p, config, report)
    print(f"results: {output}")
    return (
        ExitCode.OK if all(r["status"] in (Status.PASSED, Status.SKIPPED) for r in summaries) else ExitCode.CELLS_FAILED
    )


def _duration(text: str) -> float:
    """``90``, ``90s``, ``15m`` or ``1h`` as seconds (the tune budget)."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:].lower(), 0.0)
    try:
        value = float(text[:-1] if scale else text) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 15m or 1h, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the budget must be > 0, got {text!r}")
    return value


def cmd_tune(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results
    from ampsuite.host import session
    from ampsuite.report.tune_page import render_tune_page
    from ampsuite.tune import TuneConfig, recipe_toml, tune, tune_markdown

    p = session.plan(args.suite, device=args.device, keyword=args.keyword, settings=_plugin_settings(args))
    if not p.cells:
        print(f"{p.spec.path}: no cells selected")
        return ExitCode.NO_CELLS
    out_dir = Path(args.report_dir or Path("reports") / f"{p.spec.dir_name}-tune")
    config = TuneConfig(
        output=out_dir / "results.json",
        budget_seconds=args.budget,
        resume=args.resume,
        plugins=p.settings,
        data_dir=Path(args.data_dir),
        timeout=args.timeout,
        argv=sys.argv,
    )

    def write_outputs(summary: dict[str, Any]) -> Path:
        recipe = recipe_toml(summary)
        (out_dir / "recipe.toml").write_text(recipe, encoding="utf-8")
        (out_dir / "tune.md").write_text(tune_markdown(summary), encoding="utf-8")
        print(recipe, end="")
        return render_tune_page(summary, out_dir)

    with results.locked(config.output, wait=False):
        try:
            summary = tune(p, config, lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            # The results file holds the summary so far: the outputs beside it must not be an older run's.
            write_outputs(results.load(config.output)["run"]["tune"])
            raise
    page = write_outputs(summary)
    print(f"results: {config.output}\nrecipe: {out_dir / 'recipe.toml'}\npage: {page}")
    return ExitCode.OK if all(w.get("winner") for w in summary["workloads"]) else ExitCode.CELLS_FAILED
