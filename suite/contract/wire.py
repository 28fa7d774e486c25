"""The wire format: every shape a cell's data takes between the suite file and the report.

One module holds them all so that each boundary has one typed definition:

- one point of the matrix, :class:`ampsuite.contract.cell.Cell`, travels as
  ``Cell.as_dict()`` inside the payload;
- :class:`WorkerPayload`, the plain data a worker process starts from;
- :class:`Outcome`, what one measurement (a worker, or the runner on its behalf)
  says about a cell;
- :class:`Record`, one cell's entry in the results file, and :class:`Document`,
  the file itself;
- :class:`Status`, the one spelling of every status, with its subsets
  (:mod:`ampsuite.contract.status`, re-exported here);
- ``run.tune``, the summary of ``ampsuite tune``: the record
  :class:`ampsuite.contract.tunerecords.TuneSummary`, checked by its fields' types.

The records are ``TypedDict``s, not classes: a results file is JSON, and readers
(reports, asv, other tools) index it as such. :func:`check` validates any value
against these types, so the results loader can refuse a malformed file and every
reader after it can trust the types.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from ampsuite.contract.qualitywire import Quality, QualityRule, QualityVerdicts
from ampsuite.contract.status import FAILURES, NOT_RUN, ORDER, TERMINAL, WORKER_STATUSES, Status
from ampsuite.contract.tunerecords import TuneSummary
from ampsuite.contract.validate import (
    MAX_DEPTH,
    MAX_INT,
    MAX_RECORD_BYTES,
    WireError,
    check,
    json_problem,
    size_problem,
)

__all__ = [
    "FAILURES",
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_RECORD_BYTES",
    "NOT_RUN",
    "ORDER",
    "TERMINAL",
    "WORKER_STATUSES",
    "Document",
    "Evidence",
    "Machine",
    "Metrics",
    "Numerics",
    "Outcome",
    "Record",
    "Status",
    "StepTime",
    "WireError",
    "WorkerPayload",
    "check",
    "json_problem",
    "outcome",
    "record_problem",
    "size_problem",
]


# ---------------------------------------------------------------------------
# the cell
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# parent -> worker
# ---------------------------------------------------------------------------


class MeasureData(TypedDict, total=False):
    """The ``[measure]`` table as the parent hands it to a worker (every key: it comes from a ``MeasureSpec``)
    and as a results file's ``run.measure`` records it, where files written before a key existed lack it."""

    warmup_steps: int
    warmup_seconds: float
    min_steps: int
    max_steps: int
    max_seconds: float
    noise_target: float
    numerics_steps: int
    processes: int


class WorkerPayload(TypedDict):
    """What a worker process is started with (pickled through multiprocessing; plain data only)."""

    cell: dict[str, Any]
    """:meth:`Cell.as_dict` (the worker rebuilds the :class:`Cell`)."""
    measure: MeasureData
    seed: int
    data_dir: str
    plugins: dict[str, Any]
    """``PluginSettings.as_dict()``: the worker loads the same plugins."""
    log_path: str
    memory_limit_bytes: int
    cpu_threads: int | None
    artifact_dir: NotRequired[str]
    """The cell's own folder beside the results file, where probes may leave files (a profiler trace)."""
    artifact_prefix: NotRequired[str]
    """``artifact_dir`` relative to the results file's folder: how records name those files."""
    quality: NotRequired[dict[str, Any]]
    """A quality suite's training plan for this cell (``QualitySpec.plan``); absent: no quality run."""


# ---------------------------------------------------------------------------
# what one measurement says, and the record
# ---------------------------------------------------------------------------


class StepTime(TypedDict):
    samples: list[float]
    n: int
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float
    iqr: float
    rel_iqr: float
    noise: float
    p99: NotRequired[float]
    processes: NotRequired[list[dict[str, Any]]]


class Metrics(TypedDict, total=False):
    """Figures of one cell. Probes may add keys of their own (JSON values)."""

    step_time: StepTime
    throughput: float | None
    samples_per_step: int | float
    build_seconds: float
    first_step_seconds: float | None
    warmup_steps: int
    """The untimed warm-up steps that ran (``[measure]`` ``warmup_steps``, more for ``warmup_seconds``)."""
    torch_threads: int
    flops_per_step: float | int | None
    tflops: float | None
    model_flops_per_step: float | None
    model_tflops: float | None
    matmul_dtype: str | None
    peak_memory_bytes: int | None
    peak_memory_allocated_bytes: int | None
    memory_kind: str
    clocks: dict[str, Any]
    gpu_busy_share: float | None
    kernel_seconds_per_step: float | None
    world_size: int
    samples_per_step_per_gpu: int | float
    throughput_per_gpu: float | None
    slowest_rank: int
    ranks: list[dict[str, Any]]


class Numerics(TypedDict, total=False):
    losses: list[float | None]
    loss_at_n: float | None
    final_loss: float | None
    nonfinite_step: int | None
    nonfinite_what: str | None
    scale_history: list[float | None] | None
    skipped_steps: int | None
    scale_start: float | None
    scale_collapsed_step: int | None
    scale_at_collapse: float | None
    output_check: dict[str, Any]


class Evidence(TypedDict, total=False):
    """Why a cell did not pass; which keys are present depends on the status."""

    reason: str
    type: str
    message: str
    traceback: str
    phase: str
    cause: str
    memory: dict[str, Any]
    exitcode: int | None
    signal: str | None
    stderr_tail: str
    timeout_seconds: float
    process: int
    rank: int | None
    world_size: int
    ranks: list[dict[str, Any]]
    node: int
    nodes: list[dict[str, Any]]
    result_status: str | None
    stacks: str
    executor: str
    """The executor whose job ended without a record (``slurm``); with ``cluster``, ``job_id`` and ``state``."""
    cluster: str
    job_id: str
    state: str
    """The scheduler's state of that job (``TIMEOUT``, ``PREEMPTED``, ``NODE_FAIL``, ...)."""
    cell_evidence: dict[str, Any] | None
    """The cell's own evidence when the scheduler stopped a cell that was still running."""


class TensorCoreOp(TypedDict, total=False):
    """One row of the tensor-cores probe: an op, its operand shapes and the dtype it ran in."""

    op: str
    shapes: list[list[int]]
    dtype: str
    count: int
    aligned: bool
    dims: dict[str, int]
    phase: str


class TensorCores(TypedDict, total=False):
    ops: list[TensorCoreOp]
    misaligned: int


class Diagnostics(TypedDict, total=False):
    """Structured evidence. The built-in probes' payloads that reports read are typed; others are JSON."""

    tensor_cores: TensorCores
    precision_ops: list[dict[str, Any]] | dict[str, Any]


class Outcome(TypedDict, total=False):
    """What one measurement of a cell says: a worker's result, or the runner's word for it."""

    status: Status
    metrics: dict[str, Any]
    numerics: dict[str, Any] | None
    diagnostics: dict[str, Any]
    notes: dict[str, Any]
    warnings: list[str]
    evidence: dict[str, Any] | None
    quality: Quality


def outcome(status: Status, evidence: Mapping[str, Any] | None = None, **parts: Any) -> Outcome:
    """An :class:`Outcome` with ``status``, ``evidence`` and any other parts given."""
    out: dict[str, Any] = {"status": status, "evidence": dict(evidence) if evidence is not None else None, **parts}
    return typing.cast(Outcome, out)


class WorkloadInfo(TypedDict):
    id: str
    plugin: str
    options: dict[str, Any]
    axes: dict[str, Any]
    unit: str
    precision_option: NotRequired[str | None]
    """The workload's ``Workload.precision_option`` (absent in records written before it existed)."""


class TechniqueInfo(TypedDict):
    name: str
    options: dict[str, Any]


class Machine(TypedDict):
    """Which machine measured a record (``ampsuite.host.environment.identity``): records of one machine are held
    against each other, records of two are not (``ampsuite.analysis.machines.beside``)."""

    host: str
    device: str
    """The GPU's name, else the CPU's model."""
    gpu_uuid: str | None
    driver: str | None
    max_sm_mhz: int | None


class Remeasured(TypedDict):
    """A record measured a second time in more processes (``ampsuite.commands.again``), and its first figure."""

    processes: int
    first_median: float
    first_noise: float
    reason: str
    """Why the first figure was not trusted, or that the cell is the reference of one that was not."""


class Record(TypedDict):
    """One cell's entry in the results file (docs/architecture.md lists every key)."""

    id: str
    status: Status
    device: str
    batch_size: int
    world_size: NotRequired[int]
    """Absent in files written before data-parallel cells existed (read as 1)."""
    nodes: NotRequired[int]
    """The nodes of a multi-node cell (suite-file ``nodes``); written only when > 1, absent means 1."""
    combination: str
    baseline: str
    workload: WorkloadInfo
    techniques: list[TechniqueInfo]
    started: str
    wall_seconds: float
    metrics: Metrics
    numerics: Numerics | None
    diagnostics: Diagnostics
    notes: dict[str, Any]
    warnings: list[str]
    evidence: Evidence | None
    machine: NotRequired[Machine]
    """Absent in files written before records named their machine: such a record is beside no other."""
    remeasured: NotRequired[Remeasured]
    """Present when the run measured this cell again, its first figure being an untrusted headline."""
    quality: NotRequired[Quality]
    """A quality suite's trainings of the cell, one per seed (docs/quality.md)."""


def record_problem(record: Record, where: str) -> str | None:
    """What the types cannot say: a passed record carries the figures every reader shows."""
    if record["status"] == Status.PASSED:
        metrics = record["metrics"]
        for key in ("step_time", "throughput"):
            if key not in metrics:
                return f"{where}.metrics: a passed cell without {key!r}"
    return None


class SuiteInfo(TypedDict):
    name: str
    path: str | None
    sha256: str | None
    baseline: str
    device: str
    numerics_tolerance: float
    quality: NotRequired[QualityRule]


class ExecutorState(TypedDict):
    """``run.executor``: what the run's executor remembered of cells whose records are not written yet."""

    name: str
    """The executor that remembered them; another executor under ``--resume`` does not see them."""
    jobs: dict[str, dict[str, Any]]
    """Per cell id, the executor's own JSON data (the slurm executor: its job); removed with the record's writing."""


class RunInfo(TypedDict):
    id: str
    started: str
    finished: str | None
    argv: list[str]
    suite: SuiteInfo
    measure: MeasureData
    plugins: list[dict[str, Any]]
    resumed: NotRequired[list[str]]
    executor: NotRequired[ExecutorState]
    tune: NotRequired[TuneSummary]
    """A tune results file's summary (:class:`~ampsuite.contract.tunerecords.TuneSummary` as JSON)."""
    quality: NotRequired[QualityVerdicts]
    """A quality suite's verdicts when the run ended (:mod:`ampsuite.contract.qualitywire`)."""


class Document(TypedDict):
    format: Literal["ampsuite-results"]
    version: int
    run: RunInfo
    environment: dict[str, Any]
    cells: list[Record]
    integrity: NotRequired[dict[str, str]]
