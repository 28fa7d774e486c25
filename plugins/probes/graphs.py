"""Graphs torch.compile made for the cell, the graph breaks between them, and any compile in the timed steps.

A graph break splits a compiled step in two: inductor fuses nothing across it, and under
``mode="reduce-overhead"`` each piece is a CUDA graph of its own. On an H200 (2026-12-02), a ResNet-50 cell
with every batch norm + ReLU through a technique's own Triton kernels (persistent-batch-norm, in
examples/ampsuite-resnet-kernels) had 42 of them and gave no step in 450 s, while nothing in its record said
why. This probe records what dynamo counted by the time the timed steps start (``metrics["compiled_graphs"]``,
``metrics["graph_breaks"]`` and the reasons in ``diagnostics["graph_breaks"]``), with a warning when there was
a break, and a warning that makes the cell untrusted when dynamo compiled during the timed steps, whose time
then holds a compile.

The counts are dynamo's own (``torch._dynamo.utils.counters``), which every torch since 2.0 keeps per
process. A cell runs in a worker of its own, so they are the cell's; after the timed steps the probe clears
them, so that the next cell of an ``--in-process`` run starts from zero. A cell that compiled nothing records
nothing.

Where the first step's time went, too: ``diagnostics["compile_seconds"]``, torch's own compile-time counters
(``torch._dynamo.utils.compilation_time_metrics``, the phases it times with ``dynamo_timed``: tracing, AOTAutograd,
inductor's lowering, code generation, waiting for the Triton compiles, autotuning), each summed over the cell's
graphs, costliest first; the phases nest, so they do not add up. With inductor, ``diagnostics["compile_threads"]``:
the Triton compiles it runs at once. A cold ResNet-50 compile takes 111-265 s of a first step on an
H200 (torch 2.11), and compiles are most of what a tune spends; these say which phase to shorten (there, inductor's
fusion pass, ``Scheduler.fused_nodes``, took 74-205 s of first steps of 111-249 s).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ampsuite import Probe, ProbeContext, hookimpl

__all__ = ["PHASES_KEPT", "REASONS_KEPT", "around", "compile_seconds", "reason_line", "summarize"]

REASONS_KEPT = 5
"""Distinct break reasons kept in the record, most frequent first."""

PHASES_KEPT = 12
"""Compile phases kept in the record, costliest first."""


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


def compile_seconds(timings: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Seconds per compile phase, each summed over its runs, the :data:`PHASES_KEPT` costliest first."""
    totals = {str(phase): round(float(sum(values)), 3) for phase, values in timings.items() if values}
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:PHASES_KEPT])


def _compile_threads() -> int | None:
    """inductor's parallel Triton compiles, when this process imported inductor (a compile with it did)."""
    config = sys.modules.get("torch._inductor.config")
    threads = getattr(config, "compile_threads", None)
    return int(threads) if isinstance(threads, int) else None


@contextlib.contextmanager
def around(ctx: ProbeContext) -> Iterator[None]:
    try:
        from torch._dynamo.utils import counters
    except Exception:  # a torch without dynamo: nothing was compiled by it
        yield
        return
    try:
        from torch._dynamo.utils import compilation_time_metrics as timings
    except ImportError:  # not kept by this torch: the counts alone
        timings = {}
    graphs, breaks, reasons = summarize(counters)
    phases = compile_seconds(timings)
    try:
        yield
    finally:
        after = int(counters["stats"].get("unique_graphs", 0))
        counters.clear()
        timings.clear()
    if graphs == 0 and after == 0:
        return
    ctx.metrics["compiled_graphs"] = graphs
    ctx.metrics["graph_breaks"] = breaks
    if phases:
        ctx.diagnostics["compile_seconds"] = phases
    threads = _compile_threads()
    if threads is not None:
        ctx.diagnostics["compile_threads"] = threads
    if reasons:
        ctx.diagnostics["graph_breaks"] = reasons
    if breaks:
        plural = "s" if breaks != 1 else ""
        first = reasons[0]["reason"]
        ctx.warn(f"torch.compile: {breaks} graph break{plural}, {graphs} graphs (most frequent: {first})")
    if after > graphs:
        # "unstable" puts the cell among the untrusted ones (ampsuite.analysis.access.instability_warnings).
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
