"""``ampsuite report``: the static HTML site (and Markdown) of results files, their history, a comparison."""

from __future__ import annotations

import argparse
from pathlib import Path

from ampsuite.commands.common import Command, registry, render, report_sections
from ampsuite.contract.errors import ExitCode


def add_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "results",
        nargs="+",
        help="results files: several of one machine (GPU and host) are its history; "
        "of several machines, also compared side by side (machines.html)",
    )
    report.add_argument("-o", "--output", required=True, help="output directory")
    report.add_argument("--compare", metavar="RESULTS", help="compare against this earlier results file")
    report.add_argument("--asv-results", metavar="DIR", help="asv results directory for the history page")
    report.add_argument("--markdown", metavar="FILE", help="also write a Markdown summary")


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite import analysis, results

    docs = [results.load(p) for p in args.results]
    compare_with = results.load(args.compare) if args.compare else None
    for path, doc in zip(args.results, docs, strict=True):  # docs/architecture.md: such reports are refused
        if compare_with is not None:
            results.check_comparable(path, compare_with["environment"], doc["environment"], action="compare")

    # Files of one machine (GPU, else CPU, and host) are its history; files of several machines
    # are also compared side by side on machines.html (render_site decides that from the same rule).
    machines = analysis.group_machines(docs, args.results)
    if len(machines) > 1:
        print("machines: " + "; ".join(f"{m.label} ({len(m.docs)} file{'s' * (len(m.docs) > 1)})" for m in machines))
    own_history = [docs[i] for m in machines if len(m.docs) > 1 for i in m.docs]
    history = None
    if args.asv_results or own_history:
        from ampsuite.report.history import git_commit_order, in_commit_order

        history = analysis.history(own_history if not args.asv_results else Path(args.asv_results))
        if args.asv_results:  # asv tracks whatever suite it was given: keep the cells of these results
            ids = {str(r["id"]) for doc in docs for r in doc["cells"]}
            tracked = len(history)
            history = {k: v for k, v in history.items() if k.split(" @ ", 1)[0] in ids}
            if not history:
                print(f"history: {args.asv_results} tracks none of these cells ({tracked} others); no history page")
        history = in_commit_order(history, git_commit_order()) if history else None
    sections = report_sections(registry(args), docs)
    index = render(sections, docs, Path(args.output), compare_with=compare_with, history=history, files=args.results)
    print(f"report: {index}")
    if args.markdown:
        from ampsuite.report import markdown_summary

        text = markdown_summary(docs, compare_with=compare_with, extra_sections=sections)
        Path(args.markdown).write_text(text, encoding="utf-8")
    return ExitCode.OK


COMMAND = Command("report", "render the HTML report of results files", add_arguments, execute)
