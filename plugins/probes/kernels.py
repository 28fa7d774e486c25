"""Where a CUDA step's time goes: the GPU's busy share and the kernel classes that fill it (opt-in).

Loaded on request, not by default: ``ampsuite run SUITE -p ampsuite.plugins.probes.kernels``.
Before the warm-up, the probe runs ``WARM_STEPS`` untimed steps of the cell's
composed step (captured graphs and compiled code included), then profiles
``PROFILED_STEPS`` more under ``torch.profiler`` with CUDA activity only (CUPTI;
no CPU-op tracing, which would slow the host side it is meant to judge). From
the exported Chrome trace it takes every kernel, memcpy and memset interval and
records:

* ``metrics["gpu_busy_share"]``: the union of those intervals over the host's
  wall time of the profiled steps. Near 1.0 the step is bound by its kernels;
  well below it, by the host (Python, dispatch, launches) or by synchronisation.
* ``metrics["kernel_seconds_per_step"]``: that union per step.
* ``diagnostics["kernels"]``: the time per step by kernel class (matmul/conv,
  attention, normalization, elementwise, reduction, layout/cast, optimizer, copy,
  other) and the heaviest kernels by name, and ``trace``: where the profiled
  steps' timeline is saved (``TRACE_NAME`` in the cell's artifacts beside the
  results file, gzipped Chrome trace JSON for Perfetto or chrome://tracing),
  which the report links.

The profiled steps are never the timed ones: the figures explain a median, they
do not replace it. CUPTI adds a little to every launch, so the profiled wall
time per step is an upper bound on the timed median, and the busy share a lower
bound on the timed steps' own. The classes come from kernel names (cuBLAS,
cuDNN, CUTLASS, PyTorch and Triton naming), the usual way profilers group them;
a kernel no rule names counts as ``other`` and shows in the top list.

The probe also adds a report section (a table of every profiled cell), shown
when the report is rendered with the plugin loaded, as ``ampsuite run`` does.
"""

from __future__ import annotations

import gzip
import html
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from ampsuite import Probe, ProbeContext, ReportSection, hookimpl

__all__ = ["CLASSES", "PROFILED_STEPS", "WARM_STEPS", "classify", "inspect", "summarize_trace", "union_seconds"]

WARM_STEPS = 3
PROFILED_STEPS = 5
TRACE_NAME = "kernels-trace.json.gz"
TOP_KERNELS = 40
"""Kernels kept by name: enough to set two cells' steps side by side kernel by kernel (a ResNet-50 step runs
about 920 kernels; with a short list the cut-off makes kernels come and go between two recipes)."""
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

# First match wins: attention before matmul (flash kernels are CUTLASS too),
# layout/cast before elementwise (PyTorch names its casts and transposes
# unrolled_elementwise_kernel<direct_copy_kernel_cuda...>).
CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|\bsgd|_sgd", re.I)),
    ("normalization", re.compile(r"norm|batchnorm|\bbn_|bn_fw|bn_bw|welford|gammabeta", re.I)),
    ("layout/cast", re.compile(r"nchwtonhwc|nhwctonchw|transpose|permute|copy_kernel|catarray", re.I)),
    (
        "matmul/conv",
        re.compile(
            r"gemm|nvjet|cutlass|cublas|xmma|wgmma|sm\d\d_|conv|wgrad|dgrad|fprop|implicit|winograd|triton_(tem|mm)",
            re.I,
        ),
    ),
    ("reduction", re.compile(r"reduce|triton_(red|per)_|softmax|cross_entropy|nll_loss|argmax|sum_", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|triton_poi_|fill|where|relu|gelu|add|mul", re.I)),
)


def classify(name: str, category: str = "kernel") -> str:
    """The class of one GPU activity from its trace category and kernel name."""
    if category != "kernel":
        return "copy"
    for label, pattern in CLASSES:
        if pattern.search(name):
            return label
    return "other"


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals (any unit in, same unit out)."""
    total, end = 0.0, -float("inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _gpu_events(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    events = trace.get("traceEvents", []) if isinstance(trace, Mapping) else []
    return [
        e
        for e in events
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES and "dur" in e and "ts" in e
    ]


def summarize_trace(trace: Mapping[str, Any], wall_seconds: float, steps: int) -> dict[str, Any]:
    """The probe's figures from a Chrome trace (``traceEvents``, microseconds) of ``steps`` steps.

    :param wall_seconds: the host's wall time of the profiled steps (synchronised at both ends).
    """
    events = _gpu_events(trace)
    busy = union_seconds((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events) / 1e6
    by_class: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[Any]] = {}
    for e in events:
        seconds = float(e["dur"]) / 1e6
        name = str(e.get("name", "?"))
        cls = classify(name, str(e["cat"]))
        by_class[cls] += seconds
        entry = by_name.setdefault(name, [cls, 0, 0.0])
        entry[1] += 1
        entry[2] += seconds
    summed = sum(by_class.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1][2])[:TOP_KERNELS]
    return {
        "steps": steps,
        "wall_seconds_per_step": wall_seconds / steps,
        "busy_seconds_per_step": busy / steps,
        "busy_share": min(1.0, busy / wall_seconds) if wall_seconds > 0 else None,
        "kernels_per_step": len(events) / steps,
        # Summed durations exceed the union when kernels overlap (several streams).
        "summed_seconds_per_step": summed / steps,
        "classes": {
            cls: {"seconds_per_step": s / steps, "share": s / summed if summed else 0.0}
            for cls, s in sorted(by_class.items(), key=lambda kv: -kv[1])
        },
        "top": [
            {
                "name": name if len(name) <= 160 else name[:157] + "...",
                "class": cls,
                "calls_per_step": calls / steps,
                "seconds_per_step": s / steps,
                "share": s / summed if summed else 0.0,
            }
            for name, (cls, calls, s) in top
        ],
    }


def _profile(ctx: ProbeContext, steps: int) -> tuple[dict[str, Any], float]:
    from torch.profiler import ProfilerActivity, profile

    device = ctx.step.device
    for _ in range(WARM_STEPS):
        ctx.run(ctx.step.data())
    torch.cuda.synchronize(device)
    fd, path = tempfile.mkstemp(prefix="ampsuite-trace-", suffix=".json")
    os.close(fd)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for _ in range(steps):
                ctx.run(ctx.step.data())
            torch.cuda.synchronize(device)
            wall = time.perf_counter() - t0
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return json.load(f), wall
    finally:
        os.unlink(path)


def inspect(ctx: ProbeContext) -> None:
    if ctx.step.device.type != "cuda":
        return  # CUPTI sees CUDA kernels only; a CPU step has nothing for this probe
    try:
        trace, wall = _profile(ctx, PROFILED_STEPS)
    except Exception as exc:  # a probe must not void the cell's timing; the warning is the evidence
        ctx.warn(f"kernels probe could not profile the step: {type(exc).__name__}: {exc}")
        return
    summary = summarize_trace(trace, wall, PROFILED_STEPS)
    if not summary["kernels_per_step"]:
        ctx.warn("kernels probe: the profiler recorded no GPU activity")
        return
    ctx.metrics["gpu_busy_share"] = summary["busy_share"]
    ctx.metrics["kernel_seconds_per_step"] = summary["busy_seconds_per_step"]
    # The timeline itself, for Perfetto or chrome://tracing: beside the results file, linked by the report.
    trace_file = ctx.save_artifact(TRACE_NAME, gzip.compress(json.dumps(trace).encode("utf-8")))
    if trace_file is not None:
        summary["trace"] = trace_file
    ctx.diagnostics["kernels"] = summary


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="kernels",
            summary="GPU busy share and time by kernel class over 5 profiled steps (torch.profiler, CUDA only)",
            inspect=inspect,
            order=95,
        )
    ]


# ---------------------------------------------------------------------------
# report section
# ---------------------------------------------------------------------------

_SHOWN_CLASSES = 4


def _run_label(doc: Mapping[str, Any]) -> str:
    run = doc.get("run") or {}
    suite = (run.get("suite") or {}).get("name") if isinstance(run, Mapping) else None
    return " ".join(str(x) for x in (suite, run.get("id") if isinstance(run, Mapping) else None) if x) or "-"


def _rows(results: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for doc in results:
        label = _run_label(doc)
        for rec in doc.get("cells") or []:
            k = (rec.get("diagnostics") or {}).get("kernels")
            median = ((rec.get("metrics") or {}).get("step_time") or {}).get("median")
            if not isinstance(k, Mapping) or not isinstance(k.get("busy_share"), int | float):
                continue
            classes = ", ".join(
                f"{cls} {v['share']:.0%}" for cls, v in list(k.get("classes", {}).items())[:_SHOWN_CLASSES]
            )
            rows.append(
                [
                    label,
                    str(rec.get("id")),
                    f"{median * 1e3:.2f}" if isinstance(median, int | float) else "-",
                    f"{k['wall_seconds_per_step'] * 1e3:.2f}",
                    f"{k['busy_seconds_per_step'] * 1e3:.2f}",
                    f"{k['busy_share']:.0%}",
                    f"{k['kernels_per_step']:.0f}",
                    classes,
                ]
            )
    return rows


_HEADER = [
    "run",
    "cell",
    "timed median ms",
    "profiled ms/step",
    "GPU busy ms/step",
    "busy share",
    "kernels/step",
    "kernel time by class",
]


@hookimpl
def ampsuite_report_sections(results: Sequence[Mapping[str, Any]]) -> Iterable[ReportSection]:
    rows = _rows(results)
    if not rows:
        return []
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    intro = (
        "From 5 steps profiled with torch.profiler (CUDA activity only) before each cell's warm-up. "
        "Busy share = union of kernel, memcpy and memset time over the host's wall time of those steps: "
        "near 100% the step is bound by its kernels, lower by the host or by synchronisation."
    )
    markdown = "\n".join(
        [
            intro,
            "",
            "| " + " | ".join(_HEADER) + " |",
            "|" + "---|" * len(_HEADER),
            *("| " + " | ".join(row) + " |" for row in rows),
        ]
    )
    return [
        ReportSection(
            title="Where the GPU time goes (kernels probe)",
            html=f"<p>{html.escape(intro)}</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
            markdown=markdown,
        )
    ]
