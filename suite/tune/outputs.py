"""What a tune run hands back: the recipe as a suite-file snippet, and the summary as Markdown.

Both are pure functions of the summary (:class:`ampsuite.contract.tunerecords.TuneSummary`, which
the results file's ``run.tune`` stores), so they can be rewritten from a results file without
measuring again; either takes the record or its JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ampsuite.analysis.best import NO_GAIN
from ampsuite.analysis.estimate import budget_text
from ampsuite.analysis.machines import provenance_line
from ampsuite.contract.tunerecords import TuneSummary, Winner
from ampsuite.spec.tomltext import toml_key, toml_value

__all__ = ["combination_name", "recipe_toml", "tune_markdown"]

Summary = TuneSummary | Mapping[str, Any]
"""A tune summary, or its JSON (``run.tune`` of a results file)."""


def combination_name(key: str) -> str:
    """The recipe's combination id for a workload configuration (a valid suite-file combination id)."""
    return "tuned-" + re.sub(r"[^A-Za-z0-9_-]+", "-", key).strip("-")


def _figure(winner: Winner, unit: str) -> str:
    speed = winner.speedup_vs_fp32
    return f"{winner.throughput:,.1f} {unit}/s" + (f", {speed:.2f}x FP32" if speed else "")


def recipe_toml(summary: Summary) -> str:
    """The winners as a suite-file snippet: one ``[combinations]`` entry per workload, then the option values
    each ran with (the suite's ``[techniques]`` values and tune's choices) as
    ``[combination_options.COMBINATION.TECHNIQUE]`` (each winner keeps its own)."""
    summary = TuneSummary.of(summary)
    lines = [f"# ampsuite tune on {summary.device}: the fastest trustworthy recipe per workload"]
    if summary.incomplete:
        lines.append("# interrupted: the search so far (`ampsuite tune --resume` measures the rest)")
    if summary.base_techniques:
        # Every candidate ran with them: the recipe holds in a suite with the same base.
        lines.append(f"# measured with [suite] base_techniques = {toml_value(list(summary.base_techniques))}")
    combos: list[str] = []
    tables: list[str] = []
    notes: list[str] = []
    for w in summary.workloads:
        winner = w.winner
        if winner is None:
            notes.append(f"# {w.key}: no recipe ({w.reason or 'not tuned'})")
            continue
        name = combination_name(w.key)
        techniques = toml_value(list(winner.techniques))
        if not winner.beats_fp32:
            # A recipe slower than FP32 is no recipe: pasted into a suite it would be read as the tuned one.
            notes.append(f"# {w.key}: {NO_GAIN} (fastest trustworthy: {techniques}, {_figure(winner, w.unit)})")
            continue
        combos.append(f"# {w.key}, batch_size = {winner.batch_size}: {_figure(winner, w.unit)}")
        combos.append(f"{toml_key(name)} = {techniques}")
        # Every option value the winner ran with, the tune suite's own [techniques] tables included: pasted into
        # another suite, a snippet with only tune's choices would run that suite's values instead (a recipe may
        # owe its speed to compile options set in the tune suite's [techniques]).
        for technique, values in winner.recipe_options.items():
            tables += [
                "",
                f"[combination_options.{toml_key(name)}.{toml_key(technique)}]",
                *(f"{toml_key(k)} = {toml_value(v)}" for k, v in values.items()),
            ]
    lines += notes
    if combos:
        lines += ["", "[combinations]", *combos]
    return "\n".join(lines + tables) + "\n"


INTERRUPTED = "**Interrupted**: what follows is the search so far; `ampsuite tune --resume` measures the rest."


def _num(value: Any, suffix: str = "") -> str:
    return "" if value is None else f"{value:,.1f}{suffix}"


def _x(value: Any) -> str:
    return "" if value is None else f"{value:.2f}x"


def _pct(value: Any) -> str:
    return "" if value is None else f"{value:+.1%}"


def _first_up(text: str) -> str:
    return text[:1].upper() + text[1:]


def tune_markdown(summary: Summary, doc: Mapping[str, Any] | None = None) -> str:
    """The tune run in Markdown: budget, each workload's winner, its ablation and the search steps.

    ``summary`` is the record, its JSON or the whole results document; the document (``doc``, or ``summary``
    itself) adds the machine it names and splits the kept cells from the pruned ones.
    """
    summary, doc = TuneSummary.with_document(summary, doc)
    machine = provenance_line(doc) if doc is not None else ""
    out = [
        "# ampsuite tune",
        "",
        f"Device {summary.device}" + (f", measured on {machine}." if machine else "."),
        "",
        f"{_first_up(budget_text(summary, doc))}; {summary.counts(None if doc is None else doc.get('cells') or [])}.",
    ]
    if summary.incomplete:
        out += ["", INTERRUPTED]
    for w in summary.workloads:
        winner = w.winner
        out += ["", f"## {w.key}", ""]
        if winner is None:
            out.append(f"No recipe: {w.reason}.")
        else:
            out.append(
                ("Winner: " if winner.beats_fp32 else f"**{_first_up(NO_GAIN)}.** Fastest trustworthy: ")
                + f"`{winner.combination}` at batch {winner.batch_size}, {_num(winner.throughput)} {w.unit}/s "
                f"({_x(winner.speedup_vs_fp32)} FP32)."
            )
        if w.ablation:
            out += [
                "",
                "| ablation | techniques | status | throughput | vs FP32 | vs TF32 | contribution | note |",
                "|---|---|---|---:|---:|---:|---:|---|",
            ]
            for row in w.ablation:
                out.append(
                    f"| {row.label} | {row.recipe} | {row.status} | "
                    f"{_num(row.throughput)} | {_x(row.speedup_vs_fp32)} | {_x(row.speedup_vs_tf32)} | "
                    f"{_pct(row.contribution)} | {row.note} |"
                )
        if w.steps:
            out += ["", "| step | candidate | batch | status | throughput | decision | why not trusted |"]
            out.append("|---|---|---:|---|---:|---|---|")
            for s in w.steps:
                out.append(
                    f"| {s.phase} | {s.combination} | {s.batch_size} | {s.status} | "
                    f"{_num(s.throughput)} | {s.describe()} | {s.untrusted or ''} |"
                )
    return "\n".join(out) + "\n"
