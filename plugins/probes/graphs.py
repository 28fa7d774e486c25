"""Graphs torch.compile made for the cell, the graph breaks between them, and any compile in the timed steps.

A graph break splits a compiled step in two: inductor fuses nothing across it, and under
``mode="reduce-overhead"`` each piece is a CUDA graph of its own. Session 22's ResNet-50 cell with every
batch norm + ReLU through persistent-batch-norm's kernels had 42 of them (an ``importlib.import_module`` in
the module's forward) and gave no step in 450 s, while nothing in its record said why. This probe records what
dynamo counted by the time the timed steps start (``metrics["compiled_graphs"]``, ``metrics["graph_breaks"]``
and the reasons in ``diagnostics["graph_breaks"]``), with a warning when there was a break, and a warning that
makes the cell untrusted when dynamo compiled during the timed steps, whose time then holds a compile.

The counts are dynamo's own (``torch._dynamo.utils.counters``), which every torch since 2.0 keeps per
process. A cell runs in a worker of its own, so they are the cell's; after the timed steps the probe clears
them, so that the next cell of an ``--in-process`` run starts from zero. A cell that compiled nothing records
nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from suite import Probe, ProbeContext, hookimpl

__all__ = ["REASONS_KEPT", "around", "reason_line", "summarize"]

REASONS_KEPT = 5
"""Distinct break reasons kept in the record, most frequent first."""


def reason_line(reason: str) -> str:
    """One line of a dynamo break reason: its first line, with the explanation where dynamo gives one."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    if not lines:
        return "(no reason given)"
    explanation = next((line for line in lines[1:] if line.startswith("Explanation:")), None)
    text = lines[0] if explanation is None else f"{lines[0]}: {explanation.removeprefix('Explanation:').strip()}"
    return text if len(text) <= 240 else text[:237] + "..."


def summarize(counters: Mapping[str, Mapping[str, int]]) -> tuple[int, int, list[dict[str, Any]]]:
    """(graphs compiled, graph breaks, the most frequent break reasons) from dynamo's counters."""
    graphs = int((counters.get("stats") or {}).get("unique_graphs", 0))
    merged: dict[str, int] = {}
    for reason, count in (counters.get("graph_break") or {}).items():
        line = reason_line(reason)
        merged[line] = merged.get(line, 0) + int(count)
    ranked = sorted(merged.items(), key=lambda item: (-item[1], item[0]))
    return graphs, sum(merged.values()), [{"reason": r, "count": c} for r, c in ranked[:REASONS_KEPT]]


@contextlib.contextmanager
def around(ctx: ProbeContext) -> Iterator[None]:
    try:
        from torch._dynamo.utils import counters
    except Exception:  # a torch without dynamo: nothing was compiled by it
        yield
        return
    graphs, breaks, reasons = summarize(counters)
    try:
        yield
    finally:
        after = int(counters["stats"].get("unique_graphs", 0))
        counters.clear()
    if graphs == 0 and after == 0:
        return
    ctx.metrics["compiled_graphs"] = graphs
    ctx.metrics["graph_breaks"] = breaks
    if reasons:
        ctx.diagnostics["graph_breaks"] = reasons
    if breaks:
        plural = "s" if breaks != 1 else ""
        first = reasons[0]["reason"]
        ctx.warn(f"torch.compile: {breaks} graph break{plural}, {graphs} graphs (most frequent: {first})")
    if after > graphs:
        # "unstable" puts the cell among the untrusted ones (suite.analysis.access.instability_warnings).
        ctx.warn(f"unstable timing: torch.compile compiled {after - graphs} graph(s) during the timed steps")


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="compiled-graphs",
            summary="graphs torch.compile made, its graph breaks and their reasons, and compiles in the timed steps",
            around=around,
            order=90,
        )
    ]
