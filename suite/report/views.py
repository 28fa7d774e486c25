"""View models: results records turned into the plain, pre-formatted data the templates show.

Templates only lay out what this module prepared (StrictUndefined makes a
missing key an error), so every figure is formatted once, here, with the
helpers of :mod:`ampsuite.report.fmt`. Text stays raw: Jinja2's autoescape
escapes it when the page is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from ampsuite import analysis
from ampsuite.analysis import AnyDocument as Doc
from ampsuite.analysis import Derived, as_mapping
from ampsuite.contract.wire import Record, Status
from ampsuite.report import charts
from ampsuite.report.fmt import DASH, bytes_, num, pct, ratio, secs

__all__ = ["CellView", "Run", "cell_anchor", "cell_view", "load_runs", "setup_label", "workload_page_name"]

EVIDENCE_TEXT_KEYS = ("traceback", "stacks", "stderr_tail")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def workload_page_name(workload_id: str) -> str:
    """A safe, stable file name for a workload's page (ids may hold any character)."""
    slug = re.sub(r"[^a-z0-9]+", "-", workload_id.lower()).strip("-")[:40] or "workload"
    return f"workload-{slug}-{_digest(workload_id)}.html"


def cell_anchor(run_index: int, cell_id: str) -> str:
    return f"cell-{run_index}-{_digest(cell_id)}"


@dataclass(frozen=True)
class Run:
    """One results document with its derived figures and a label for headings."""

    index: int
    doc: Doc
    derived: dict[str, Derived]
    label: str
    artifacts: Mapping[str, str] = field(default_factory=dict)
    """Cell id -> link to its profiler trace in the site (:func:`ampsuite.report.artifacts.copy_artifacts`)."""

    @property
    def cells(self) -> list[Record]:
        return list(self.doc.get("cells") or [])

    @property
    def baseline_lines(self) -> list[str]:
        """What each baseline is (combination and techniques), one line each."""
        return analysis.baseline_lines(self.doc)

    @property
    def data_parallel(self) -> bool:
        """Whether the run holds a data-parallel cell: its tables then get GPU and scaling columns."""
        return analysis.data_parallel(self.doc)

    @property
    def env(self) -> Mapping[str, Any]:
        env = self.doc.get("environment")
        return env if isinstance(env, Mapping) else {}

    @property
    def run(self) -> Mapping[str, Any]:
        run = self.doc.get("run")
        return run if isinstance(run, Mapping) else {}


def run_label(doc: Doc) -> str:
    run = doc.get("run") or {}
    env = doc.get("environment") or {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), Mapping) else None
    where = gpu.get("name") if gpu else (env.get("cpu") or "CPU")
    return f"run {run.get('id', '?')} \u00b7 {where}"


def load_runs(docs: Sequence[Doc], artifacts: Sequence[Mapping[str, str]] = ()) -> list[Run]:
    return [
        Run(i, doc, analysis.derive(doc), run_label(doc), artifacts[i] if i < len(artifacts) else {})
        for i, doc in enumerate(docs)
    ]


def setup_label(record: Record) -> str:
    """The combination's label, with the precision option's value where the workload has one and the
    GPU count of a data-parallel cell: ``fp32 \u00b7 dtype=bfloat16``, ``amp-bf16 \u00b7 2 GPUs``,
    ``fp32 \u00b7 2 nodes \u00d7 1 GPUs`` (a multi-node cell).

    Cells of one combination and batch size but different precisions or world
    sizes stay apart wherever the report keys or labels cells by combination.
    """
    label, n, nodes = analysis.cell_label(record), analysis.world_size(record), analysis.nodes(record)
    if nodes > 1:
        return f"{label} \u00b7 {nodes} nodes \u00d7 {n // nodes} GPUs"
    return label if n == 1 else f"{label} \u00b7 {n} GPUs"


def scaling_title(record: Record, derived: Derived) -> str:
    """The tooltip of a scaling efficiency: what it divides, or why there is none."""
    n = analysis.world_size(record)
    if n == 1:
        return "one process: no scaling efficiency"
    if derived.single_id is None:
        return "no one-process cell of the same configuration in this run"
    if derived.scaling_efficiency is None:
        return f"{derived.single_id} or this cell has no throughput"
    return f"total throughput / ({n} \u00d7 throughput of {derived.single_id})"


def techniques_text(record: Record, *, options: bool = True) -> str:
    """``amp(dtype=bfloat16) + channels-last``, without the options ``amp + channels-last``; "none (FP32)" for
    the plain cell."""
    parts = []
    for technique in record.get("techniques") or []:
        args = ", ".join(f"{k}={v}" for k, v in (technique.get("options") or {}).items()) if options else ""
        parts.append(f"{technique.get('name')}({args})" if args else str(technique.get("name")))
    return " + ".join(parts) if parts else "none (FP32)"


def recipe_text(record: Record) -> str:
    """A cell's techniques by name (``amp-bf16 + torch-compile``), for a reader choosing what to adopt; "" for
    the plain cell, whose id already says FP32."""
    return techniques_text(record, options=False) if record.get("techniques") else ""


@dataclass(frozen=True)
class EvidenceView:
    """Why a cell did not pass: a one-line summary, facts, and long texts for <details>."""

    summary: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    blocks: list[tuple[str, str]] = field(default_factory=list)


def evidence_view(record: Record) -> EvidenceView | None:
    evidence = record.get("evidence")
    if not isinstance(evidence, Mapping) or not evidence:
        return None if record["status"] == Status.PASSED else EvidenceView("no evidence recorded")
    rest = dict(evidence)
    blocks = [(key.replace("_", " "), str(rest.pop(key))) for key in EVIDENCE_TEXT_KEYS if rest.get(key)]
    if "reason" in rest:
        summary = str(rest.pop("reason"))
    elif "type" in rest or "message" in rest:
        summary = f"{rest.pop('type', 'error')}: {rest.pop('message', '')}".rstrip(": ")
    elif "timeout_seconds" in rest:
        summary = f"no result within {rest.pop('timeout_seconds')} s"
    elif "exitcode" in rest or "signal" in rest:
        signal = rest.pop("signal", None)
        summary = f"worker exited with code {rest.pop('exitcode', '?')}" + (f" ({signal})" if signal else "")
    else:
        summary = record.get("status", "")
    facts = [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in rest.items() if v is not None]
    return EvidenceView(summary, facts, blocks)


@dataclass(frozen=True)
class CellView:
    """Everything a page shows about one cell, formatted."""

    id: str
    anchor: str
    page: str
    status: str
    combination: str
    setup: str
    """The combination with the GPU count of a data-parallel cell (:func:`setup_label`)."""
    techniques: str
    batch_size: str
    unit: str
    throughput: str
    """Samples per second; the total over every GPU of a data-parallel cell."""
    world_size: str
    data_parallel: bool
    throughput_per_gpu: str
    scaling: str
    """The scaling efficiency of a data-parallel cell against its one-process cell (``analysis.Derived``)."""
    scaling_title: str
    speedup_fp32: str
    speedup_tf32: str
    speedup_baseline: str
    median: str
    noise: str
    p10: str
    p90: str
    samples: str
    memory: str
    memory_other: str
    """The allocator figure that peak memory is not: allocated beside reserved, or reserved beside allocated."""
    memory_saving: str
    tflops: str
    mfu: str
    model_tflops: str
    """The workload's declared model FLOPs per step / median (an LLM's 6 N + 12 L H Q T), in TFLOP/s."""
    mfu_datasheet: str
    mfu_measured: str
    mfu_basis: str
    bandwidth_util: str
    """Achieved DRAM throughput over the measured copy bandwidth (the memory-side twin of MFU)."""
    trace: str | None
    """The kernels probe's profiler trace (Chrome/Perfetto JSON), as a link relative to the report, if saved."""
    matmul_dtype: str
    loss: str
    loss_diff: str
    verdict: str
    nonfinite: str
    skipped_steps: str
    first_step: str
    trusted: bool
    trust_note: str
    power_cap: str
    warnings: list[str]
    evidence: EvidenceView | None
    scale_spark: Markup
    loss_spark: Markup
    tensor_ops: list[dict[str, Any]]
    misaligned: int
    precision_ops: Table | None
    notes: list[tuple[str, str]]
    """The technique's facts (``notes``), one ``key: value`` line each; nested keys joined into one path."""


def _get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def _tensor_ops(diagnostics: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    table = _get(diagnostics, "tensor_cores")
    ops = _get(table, "ops") or []
    rows = [
        {
            "op": str(op.get("op", "")),
            "shapes": " \u00d7 ".join(json.dumps(s) for s in op.get("shapes") or []),
            "dtype": str(op.get("dtype", "")),
            "count": str(op.get("count", "")),
            "aligned": bool(op.get("aligned", True)),
            "highlight": not op.get("aligned", True) and op.get("dtype") in LOW_PRECISION,
            "phase": str(op.get("phase", "")),
        }
        for op in ops
        if isinstance(op, Mapping)
    ]
    misaligned = _get(table, "misaligned")
    count = misaligned if isinstance(misaligned, int) else sum(1 for r in rows if r["highlight"])
    return rows, count


LOW_PRECISION = ("float16", "bfloat16")
"""The dtypes for which Tensor Core alignment matters and in which sensitive ops are worth a look."""


@dataclass(frozen=True)
class Row:
    cells: list[str]
    low: bool = False


@dataclass(frozen=True)
class Table:
    """A generic table of probe evidence (columns from the rows' keys, in first-seen order)."""

    columns: list[str]
    rows: list[Row]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def note_lines(notes: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``notes`` as readable ``key: value`` lines, nested mappings flattened into their path."""
    lines: list[tuple[str, str]] = []
    for key, value in sorted(notes.items(), key=lambda kv: str(kv[0])):
        path = f"{prefix} \u203a {key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            lines += note_lines(value, path)
        elif isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            lines.append((path, ", ".join(_text(v) for v in value) or "none"))
        else:
            lines.append((path, _text(value)))
    return lines


def _precision_ops(diagnostics: Mapping[str, Any]) -> Table | None:
    """``precision_ops`` as a table: a list of rows (the tensor-cores probe) or a plain mapping.

    Rows computed in float16/bfloat16 are marked: they are the numerically
    sensitive ops (norms, softmax, losses) that a technique left in low precision.
    """
    value = _get(diagnostics, "precision_ops")
    if isinstance(value, Mapping):
        return Table(["key", "value"], [Row([str(k), _text(v)]) for k, v in value.items()])
    if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
        columns = list(dict.fromkeys(k for r in value for k in r))
        rows = [Row([_text(r.get(c, "")) for c in columns], r.get("dtype") in LOW_PRECISION) for r in value]
        return Table(columns, rows)
    if value:
        return Table(["value"], [Row([json.dumps(value)])])
    return None


def cell_view(run: Run, record: Record) -> CellView:
    cell_id = str(record.get("id"))
    d = run.derived.get(cell_id) or Derived(cell_id)
    metrics = as_mapping(record.get("metrics"))
    step = as_mapping(metrics.get("step_time"))
    numerics = as_mapping(record.get("numerics"))
    diagnostics = as_mapping(record.get("diagnostics"))
    workload = as_mapping(record.get("workload"))
    unit = str(workload.get("unit") or "samples")
    scale = numerics.get("scale_history")
    losses = numerics.get("losses")
    nonfinite = ""
    if numerics.get("nonfinite_step") is not None:
        nonfinite = f"{numerics.get('nonfinite_what') or 'value'} at step {numerics.get('nonfinite_step')}"
    ops, misaligned = _tensor_ops(diagnostics)
    memory_kind = metrics.get("memory_kind")
    memory = bytes_(metrics.get("peak_memory_bytes"))
    notes = record.get("notes")
    return CellView(
        id=cell_id,
        anchor=cell_anchor(run.index, cell_id),
        page=workload_page_name(str(workload.get("id", ""))),
        status=str(record.get("status", "?")),
        combination=analysis.combination_label(record),
        setup=setup_label(record),
        techniques=techniques_text(record),
        batch_size=str(record.get("batch_size", "")),
        unit=unit,
        throughput=num(analysis.throughput(record)),
        world_size=str(analysis.world_size(record)),
        data_parallel=analysis.world_size(record) > 1,
        throughput_per_gpu=num(analysis.throughput_per_gpu(record)),
        scaling=pct(d.scaling_efficiency),
        scaling_title=scaling_title(record, d),
        speedup_fp32=ratio(d.speedup_vs_fp32),
        speedup_tf32=ratio(d.speedup_vs_tf32),
        speedup_baseline=ratio(d.speedup_vs_baseline),
        median=secs(step.get("median")) if record["status"] == Status.PASSED else DASH,
        noise=pct(step.get("noise"), 2),
        p10=secs(step.get("p10")),
        p90=secs(step.get("p90")),
        samples=str(step.get("n", DASH)),
        memory=f"{memory} ({memory_kind})" if memory_kind and memory != DASH else memory,
        memory_other=bytes_(
            metrics.get("peak_memory_allocated_bytes")
            if memory_kind == "cuda-reserved"
            else metrics.get("peak_memory_reserved_bytes")
        ),
        memory_saving=pct(d.memory_saving),
        tflops=num(d.tflops),
        mfu=pct(d.mfu),
        model_tflops=num(d.model_tflops),
        mfu_datasheet=pct(d.mfu_datasheet),
        mfu_measured=pct(d.mfu_measured),
        mfu_basis=d.mfu_basis or "",
        bandwidth_util=pct(d.bandwidth_util),
        trace=run.artifacts.get(cell_id),
        matmul_dtype=str(metrics.get("matmul_dtype") or DASH),
        loss=num(numerics.get("loss_at_n")),
        loss_diff=pct(d.loss_rel_diff, 2),
        verdict=d.numerics_verdict,
        nonfinite=nonfinite,
        skipped_steps=DASH if numerics.get("skipped_steps") is None else str(numerics["skipped_steps"]),
        first_step=secs(metrics.get("first_step_seconds")),
        trusted=d.trusted,
        trust_note=d.trust_note or "",
        power_cap=analysis.power_cap_note(record) or "",
        warnings=[str(w) for w in record.get("warnings") or []],
        evidence=evidence_view(record),
        scale_spark=charts.sparkline(scale, title=f"GradScaler scale, {cell_id}", log2=True)
        if isinstance(scale, list) and scale
        else Markup(""),
        loss_spark=charts.sparkline(losses, title=f"loss per step, {cell_id}")
        if isinstance(losses, list) and losses
        else Markup(""),
        tensor_ops=ops,
        misaligned=misaligned,
        precision_ops=_precision_ops(diagnostics),
        notes=note_lines(notes) if isinstance(notes, Mapping) else [],
    )
