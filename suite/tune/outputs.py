"""What a tune run hands back: the recipe as a suite-file snippet, and the summary as Markdown.

Both are pure functions of the summary :func:`ampsuite.tune.search.tune` returns (also
stored in the results file's ``run.tune``), so they can be rewritten from a
results file without measuring again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ampsuite.analysis.best import NO_GAIN
from ampsuite.contract.wire import Status
from ampsuite.spec.tomltext import toml_key, toml_value

__all__ = ["combination_name", "recipe_toml", "tune_markdown"]


def combination_name(key: str) -> str:
    """The recipe's combination id for a workload configuration (a valid suite-file combination id)."""
    return "tuned-" + re.sub(r"[^A-Za-z0-9_-]+", "-", key).strip("-")


def _beats_fp32(winner: Mapping[str, Any]) -> bool:
    """False for a winner measured slower than its FP32 reference (no FP32 figure: nothing to say it is)."""
    speed = winner.get("speedup_vs_fp32")
    return not isinstance(speed, int | float) or speed >= 1.0


def recipe_toml(summary: Mapping[str, Any]) -> str:
    """The winners as a suite-file snippet: one ``[combinations]`` entry per workload, then the option values
    each ran with (the suite's ``[techniques]`` values and tune's choices) as
    ``[combination_options.COMBINATION.TECHNIQUE]`` (each winner keeps its own)."""
    lines = [f"# ampsuite tune on {summary.get('device')}: the fastest trustworthy recipe per workload"]
    if summary.get("incomplete"):
        lines.append("# interrupted: the search so far (`ampsuite tune --resume` measures the rest)")
    if summary.get("base_techniques"):
        # Every candidate ran with them: the recipe holds in a suite with the same base.
        lines.append(f"# measured with [suite] base_techniques = {toml_value(summary['base_techniques'])}")
    combos: list[str] = []
    tables: list[str] = []
    notes: list[str] = []
    for w in summary.get("workloads") or []:
        winner = w.get("winner")
        if not winner:
            notes.append(f"# {w['key']}: no recipe ({w.get('reason') or 'not tuned'})")
            continue
        speed = winner.get("speedup_vs_fp32")
        figure = f"{winner['throughput']:,.1f} {w['unit']}/s" + (f", {speed:.2f}x FP32" if speed else "")
        name = combination_name(w["key"])
        if not _beats_fp32(winner):
            # A recipe slower than FP32 is no recipe: pasted into a suite it would be read as the tuned one.
            notes.append(f"# {w['key']}: {NO_GAIN} (fastest trustworthy: {toml_value(winner['techniques'])}, {figure})")
            continue
        combos.append(f"# {w['key']}, batch_size = {winner['batch_size']}: {figure}")
        combos.append(f"{toml_key(name)} = {toml_value(winner['techniques'])}")
        # Every option value the winner ran with, the tune suite's own [techniques] tables included: pasted into
        # another suite, a snippet with only tune's choices would run that suite's values instead (a recipe may
        # owe its speed to compile options set in the tune suite's [techniques]). Summaries of older versions
        # have only "overrides".
        for technique, values in (winner.get("options") or winner.get("overrides") or {}).items():
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


def _recipe(row: Mapping[str, Any]) -> str:
    """An ablation row's techniques, then the option values tune chose."""
    techniques = " + ".join(row["techniques"]) or "none"
    options = row.get("options") or []  # absent in files of older versions
    return f"{techniques} ({', '.join(options)})" if options else techniques


def _num(value: Any, suffix: str = "") -> str:
    return "" if value is None else f"{value:,.1f}{suffix}"


def _x(value: Any) -> str:
    return "" if value is None else f"{value:.2f}x"


def _pct(value: Any) -> str:
    return "" if value is None else f"{value:+.1%}"


def tune_markdown(summary: Mapping[str, Any]) -> str:
    """The tune run in Markdown: budget, each workload's winner, its ablation and the search steps."""
    out = [
        "# ampsuite tune",
        "",
        f"Device {summary.get('device')}; budget {summary.get('budget_seconds', 0):.0f} s, used "
        f"{summary.get('elapsed_seconds', 0):.1f} s; {summary.get('cells', 0)} candidate cells, "
        f"{summary.get('started_cells', 0)} measured in this run"
        + (f", {summary['refused_cells']} not started (budget spent)" if summary.get("refused_cells") else "")
        + ".",
    ]
    if summary.get("incomplete"):
        out += ["", INTERRUPTED]
    for w in summary.get("workloads") or []:
        winner = w.get("winner")
        out += ["", f"## {w['key']}", ""]
        if not winner:
            out.append(f"No recipe: {w.get('reason')}.")
        else:
            out.append(
                ("" if _beats_fp32(winner) else f"**{NO_GAIN[0].upper()}{NO_GAIN[1:]}.** Fastest trustworthy: ")
                + f"{'Winner: ' if _beats_fp32(winner) else ''}`{winner['combination']}` at batch "
                f"{winner['batch_size']}, {_num(winner['throughput'])} {w['unit']}/s "
                f"({_x(winner.get('speedup_vs_fp32'))} FP32)."
            )
        if w.get("ablation"):
            out += [
                "",
                "| ablation | techniques | status | throughput | vs FP32 | vs TF32 | contribution | note |",
                "|---|---|---|---:|---:|---:|---:|---|",
            ]
            for row in w["ablation"]:
                note = (row.get("reason") if row["status"] != Status.PASSED else row.get("untrusted")) or ""
                out.append(
                    f"| {row['label']} | {_recipe(row)} | {row['status']} | "
                    f"{_num(row['throughput'])} | {_x(row['speedup_vs_fp32'])} | {_x(row['speedup_vs_tf32'])} | "
                    f"{_pct(row['contribution'])} | {note} |"
                )
        if w.get("steps"):
            out += ["", "| step | candidate | batch | status | throughput | decision | why not trusted |"]
            out.append("|---|---|---:|---|---:|---|---|")
            for s in w["steps"]:
                out.append(
                    f"| {s['phase']} | {s['combination']} | {s['batch_size']} | {s['status']} | "
                    f"{_num(s['throughput'])} | {s['decision']} | {s['untrusted'] or ''} |"
                )
    return "\n".join(out) + "\n"
