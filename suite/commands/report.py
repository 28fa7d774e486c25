"""``ampsuite report``: the static HTML site (and Markdown) of results files, their history, a comparison.

With ``--compare`` the comparison is also printed as a table (as ``asv compare`` prints one), and
``--fail-on-regression`` turns it into a gate: exit ``CELLS_FAILED`` when a cell got slower.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from ampsuite.commands.common import Command, registry, render, report_sections
from ampsuite.contract.errors import ExitCode, OutputError, UsageError
from ampsuite.terminal import echo


def _percent(text: str) -> float:
    """``--fail-on-regression=PCT``: a percentage (``5``, ``2.5%``) as a fraction."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5 or 2.5%, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a percentage > 0, got {text!r}")
    return value / 100


def add_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "results",
        nargs="+",
        help="results files: several of one machine (GPU and host) are its history; "
        "of several machines, also compared side by side (machines.html)",
    )
    report.add_argument("-o", "--output", help="output directory (optional with --compare: the table alone)")
    report.add_argument(
        "--compare",
        metavar="RESULTS",
        help="compare against this earlier results file: a table of the changed cells here, compare.html in -o",
    )
    report.add_argument("--compare-all", action="store_true", help="print every cell of the comparison")
    report.add_argument(
        "--fail-on-regression",
        nargs="?",
        const=0.0,  # without PCT: the noise-aware rule alone decides
        type=_percent,
        metavar="PCT",
        help="with --compare: exit 1 when a cell got slower beyond the noise (and beyond PCT percent, if given) "
        "or fails now",
    )
    report.add_argument("--asv-results", metavar="DIR", help="asv results directory for the history page")
    report.add_argument("--markdown", metavar="FILE", help="also write a Markdown summary")


def _check_usage(args: argparse.Namespace) -> None:
    if args.output is None and args.compare is None:
        raise UsageError("report: give -o DIR for the HTML report, or --compare RESULTS for the comparison alone")
    if args.compare is None and (args.fail_on_regression is not None or args.compare_all):
        flag = "--fail-on-regression" if args.fail_on_regression is not None else "--compare-all"
        raise UsageError(f"report: {flag} needs --compare RESULTS (the run to compare against)")


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results

    _check_usage(args)
    docs = [results.load(p) for p in args.results]
    compare_with = results.load(args.compare) if args.compare else None
    for path, doc in zip(args.results, docs, strict=True):  # docs/architecture.md: such reports are refused
        if compare_with is not None:  # two machines are compared side by side, not cell by cell
            results.check_comparable(
                path,
                doc["environment"],
                compare_with["environment"],
                action="compare",
                other=args.compare,
                instead=f"to set them side by side: ampsuite report {path} {args.compare} -o DIR",
            )
            if args.fail_on_regression is not None:
                _check_gate(path, doc, args.compare, compare_with)
    if args.markdown:  # an input, an earlier run or a file of the site there is never replaced
        _check_markdown(args)

    sections = None
    if args.output is not None:
        sections = _render(args, docs, compare_with)
    if args.markdown:
        from ampsuite.report import markdown_summary

        if sections is None:
            sections = report_sections(registry(args), docs)
        text = markdown_summary(docs, compare_with=compare_with, extra_sections=sections)
        try:
            Path(args.markdown).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise OutputError(args.markdown, exc) from exc
        echo(f"markdown: {args.markdown}")
    if compare_with is None:
        return ExitCode.OK
    return _compare(args, docs, compare_with)


def _check_gate(path: str, doc: dict[str, Any], compare: str, compare_with: dict[str, Any]) -> None:
    """Refuse a regression gate that could never fail: two files of one run, or of no cell in common."""
    from ampsuite import analysis

    if analysis.same_run(compare_with, doc):
        raise UsageError(
            f"report --fail-on-regression: {path} and {compare} hold the same run "
            f"({doc['run']['id']}), so no cell can regress; compare with an earlier run"
        )
    if not {r["id"] for r in doc["cells"]} & {r["id"] for r in compare_with["cells"]}:
        raise UsageError(
            f"report --fail-on-regression: {path} and {compare} have no cell in common, so no cell can regress; "
            "compare runs of the same suite"
        )


def _check_markdown(args: argparse.Namespace) -> None:
    from ampsuite import results

    markdown = Path(args.markdown)
    results.claim(markdown, [*args.results, args.compare], "--markdown")
    if args.output is not None and markdown.resolve().is_relative_to(Path(args.output).resolve()):
        raise UsageError(
            f"report: --markdown {args.markdown} is inside the report's folder {args.output}, whose files the "
            f"report writes (its own Markdown summary is {Path(args.output) / 'summary.md'}); name a path outside it"
        )


def _render(args: argparse.Namespace, docs: list[dict[str, Any]], compare_with: dict[str, Any] | None) -> list[Any]:
    """The HTML site in ``args.output``; returns the plugins' report sections, which the Markdown shares."""
    from ampsuite import analysis

    # Files of one machine (GPU card, else CPU and host) are its history; files of several machines
    # are also compared side by side on machines.html (render_site decides that from the same rule).
    machines = analysis.group_machines(docs, args.results)
    if len(machines) > 1:
        echo("machines: " + "; ".join(f"{m.label} ({len(m.docs)} file{'s' * (len(m.docs) > 1)})" for m in machines))
    # Their paths, not the documents: where two of these machines read alike, the history tells them apart by file.
    own_history = [args.results[i] for m in machines if len(m.docs) > 1 for i in m.docs]
    history = None
    if args.asv_results or own_history:
        from ampsuite.report.history import git_commit_order, in_commit_order

        history = analysis.history(own_history if not args.asv_results else Path(args.asv_results))
        if args.asv_results:  # asv tracks whatever suite it was given: keep the cells of these results
            ids = {str(r["id"]) for doc in docs for r in doc["cells"]}
            tracked = len(history)
            history = {k: v for k, v in history.items() if k.split(" @ ", 1)[0] in ids}
            if not history:
                echo(f"history: {args.asv_results} tracks none of these cells ({tracked} others); no history page")
        history = in_commit_order(history, git_commit_order()) if history else None
    sections = report_sections(registry(args), docs)
    index = render(
        sections,
        docs,
        Path(args.output),
        compare_with=compare_with,
        history=history,
        files=args.results,
        inputs=[args.compare],
    )
    echo(f"report: {index}")
    return sections


def _compare(args: argparse.Namespace, docs: list[dict[str, Any]], compare_with: dict[str, Any]) -> ExitCode:
    from ampsuite import analysis
    from ampsuite.comparison import gate_line, line, print_comparison
    from ampsuite.display import make_console

    console = make_console()
    failed = []
    for path, doc in zip(args.results, docs, strict=True):
        if analysis.same_run(compare_with, doc):
            line(console, f"no change: {path} and {args.compare} hold the same run ({doc['run']['id']})")
            continue
        all_rows = print_comparison(console, compare_with, doc, args.compare, path, everything=args.compare_all)
        regressed = analysis.regressions((r.comparison for r in all_rows), args.fail_on_regression)
        if args.fail_on_regression is not None:
            line(console, gate_line(regressed, args.compare, args.fail_on_regression))
        failed += regressed
    if args.fail_on_regression is not None and failed:
        return ExitCode.CELLS_FAILED
    return ExitCode.OK


COMMAND = Command("report", "render the HTML report of results files, or compare two runs", add_arguments, execute)
