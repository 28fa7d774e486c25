"""``ampsuite tune``: the fastest trustworthy recipe per workload within a budget, and its ablation."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ampsuite.commands.common import Command, add_cell_args, cell_settings, plan_cells
from ampsuite.contract.errors import ExitCode
from ampsuite.terminal import echo


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m`` or ``1h`` as seconds (the tune budget)."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:].lower(), 0.0)
    try:
        value = float(text[:-1] if scale else text) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 15m or 1h, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the budget must be > 0, got {text!r}")
    from ampsuite.spec.limits import MAX_TIMEOUT

    if value > MAX_TIMEOUT:  # inf and typos like 1e9h: a search is planned against its budget
        raise argparse.ArgumentTypeError(f"the budget must be at most a week ({MAX_TIMEOUT:g} s), got {text!r}")
    return value


def add_arguments(tn: argparse.ArgumentParser) -> None:
    add_cell_args(tn, "only workloads of cells whose id matches EXPR")
    tn.add_argument("--budget", type=duration, default=900.0, help="wall-clock budget: 90s, 15m, 1h (default 15m)")
    tn.add_argument("--resume", action="store_true", help="keep candidates already measured in the tune results")
    tn.add_argument("--report-dir", help="output directory (default reports/SUITE-NAME-tune)")


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results
    from ampsuite.report.render import render_tune_page
    from ampsuite.run.signals import deferred
    from ampsuite.tune import TuneConfig, recipe_toml, tune, tune_markdown

    p = plan_cells(args)
    if p is None:
        return ExitCode.NO_CELLS
    out_dir = Path(args.report_dir or Path("reports") / f"{p.spec.dir_name}-tune")
    config = TuneConfig(
        output=out_dir / "results.json",
        budget_seconds=args.budget,
        resume=args.resume,
        **cell_settings(args, p),
    )

    def write_outputs(summary: dict[str, Any]) -> Path:
        with deferred():  # a signal now ends the command once the outputs are whole (ampsuite.run.signals)
            recipe = recipe_toml(summary)
            (out_dir / "recipe.toml").write_text(recipe, encoding="utf-8")
            doc = results.load(config.output)  # the machine the page and tune.md name, the records they count
            (out_dir / "tune.md").write_text(tune_markdown(summary, doc), encoding="utf-8")
            for line in recipe.splitlines():
                echo(line)
            return render_tune_page(summary, out_dir, doc)

    with results.locked(config.output, wait=False):
        try:
            summary = tune(p, config, echo)
        except KeyboardInterrupt:
            # The results file holds the summary so far: the outputs beside it must not be an older run's.
            write_outputs(results.load(config.output)["run"]["tune"])
            raise
    page = write_outputs(summary)
    for line in (f"results: {config.output}", f"recipe: {out_dir / 'recipe.toml'}", f"page: {page}"):
        echo(line)
    return ExitCode.OK if all(w.get("winner") for w in summary["workloads"]) else ExitCode.CELLS_FAILED


COMMAND = Command(
    "tune", "search the suite's techniques for the fastest trustworthy recipe per workload", add_arguments, execute
)
