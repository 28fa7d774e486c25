"""The typed records that plugins register: workloads, techniques, probes, executors, report sections."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, Unpack

if TYPE_CHECKING:
    import torch

    from ampsuite.contract.cell import Cell
    from ampsuite.contract.step import TrainStep
    from ampsuite.contract.wire import Status

__all__ = [
    "BuildContext",
    "CellTask",
    "CheckContext",
    "Executor",
    "ExecutorContext",
    "NoOptions",
    "Probe",
    "ProbeContext",
    "ReportSection",
    "Technique",
    "Workload",
]


@dataclass(frozen=True)
class NoOptions:
    """The options of a plugin that takes none."""


@dataclass(frozen=True)
class BuildContext:
    """What a workload's ``build`` receives beside its options (in the worker)."""

    device: torch.device
    batch_size: int
    seed: int
    data_dir: str
    """Where generated on-disk data sets live (``ampsuite make-data`` writes there)."""


@dataclass(frozen=True)
class CheckContext:
    """What a technique's ``check`` sees when the matrix is expanded (in the parent).

    Attributes:
        workload: the workload record of the cell.
        workload_options: the validated options instance of that workload.
        device_type: ``"cpu"`` or ``"cuda"``.
        techniques: names of every technique in the cell's combination.
        batch_size: the cell's batch size.
        technique_options: validated options instance of every technique in
            the combination, by name.
        preview: True when the device is previewed (``ampsuite run --dry-run
            --as-device cuda:N``) rather than this machine's: decide from
            these fields alone; what only the real device can say (compute
            capability, free memory) belongs in ``apply`` (raise ``SkipCell``).
    """

    workload: Workload
    workload_options: Any
    device_type: str
    techniques: tuple[str, ...]
    batch_size: int
    technique_options: Mapping[str, Any] = field(default_factory=dict)
    preview: bool = False


@dataclass(frozen=True)
class Workload:
    """A model (or kernel) with its optimizer and data, registered by a plugin.

    Attributes:
        name: unique across all plugins; what suite files refer to.
        summary: one line for ``ampsuite list`` and the report.
        build: ``build(options, ctx) -> TrainStep``; runs in the worker process.
        options: a dataclass type; fields with defaults, ``metadata={"help": ...}``.
        unit: what one sample is (``"images"``, ``"sequences"``); throughput is
            reported in ``unit``/s.
        traits: facts techniques check, e.g. ``"data-path"`` (has a host dataset
            for loading techniques), ``"dynamic-shapes"``, ``"conv"``, ``"model"``.
        requires: device kinds the workload can run on, empty for any.
        check: optional ``check(options, device_type) -> skip reason or None``,
            evaluated when the matrix is expanded (in the parent).
        prepare: optional ``prepare(options, data_dir) -> path``: generates the
            on-disk data set the workload reads with these options (idempotent;
            ``ampsuite make-data`` calls it, and ``build`` may call it when the
            data is missing).
        precision_option: the option that sets the storage precision, when
            precision is an option of the workload rather than a technique
            (GEMM's ``dtype``); its values are dtype names. The report then
            holds the ``float16``/``bfloat16`` cells of a configuration against
            its ``float32`` cell, as it holds techniques against FP32.
    """

    name: str
    summary: str
    build: Callable[[Any, BuildContext], TrainStep]
    options: type = NoOptions
    unit: str = "samples"
    traits: frozenset[str] = frozenset()
    requires: frozenset[str] = frozenset()
    check: Callable[[Any, str], str | None] | None = None
    prepare: Callable[[Any, str], str] | None = None
    precision_option: str | None = None


@dataclass(frozen=True)
class Technique:
    """A transformation of a training step, registered by a plugin.

    Attributes:
        name: unique across all plugins; what suite files refer to.
        summary: one line for ``ampsuite list`` and the report.
        apply: ``apply(step, options) -> TrainStep``; runs in the worker, may
            raise :class:`ampsuite.SkipCell` with a reason.
        options: a dataclass type, as for workloads.
        order: techniques of a combination apply in ascending order (ties by name).
        requires: names of techniques that must be in the same combination,
            and/or ``"cuda"`` for device-only techniques.
        conflicts: names of techniques that cannot share a combination.
        check: ``check(ctx) -> skip reason or None``, evaluated when the matrix
            is expanded, so a skip costs no worker.
        requires_traits: workload traits the technique needs (``"model"``,
            ``"blocks"``, ...): a cell whose workload lacks one is skipped when
            the matrix is expanded, with one reason naming the technique, the
            workload and the missing traits, before ``check`` is asked.
    """

    name: str
    summary: str
    apply: Callable[[TrainStep, Any], TrainStep]
    options: type = NoOptions
    order: int = 50
    requires: frozenset[str] = frozenset()
    conflicts: frozenset[str] = frozenset()
    check: Callable[[CheckContext], str | None] | None = None
    requires_traits: frozenset[str] = frozenset()


@dataclass
class ProbeContext:
    """Handed to probes in the worker; probes write what they find into it.

    Attributes:
        step: the cell's step after every technique was applied.
        run: the composed step function that is timed.
        cell: the cell being measured (the same :class:`~ampsuite.contract.cell.Cell` ``ampsuite_modify_cells`` saw).
        metrics: numbers for the record (JSON values; floats, never NaN).
        diagnostics: structured evidence (tables of shapes, dtype per op, ...).
        warnings: one-line warnings for the record and the report.
        artifact_dir: the cell's folder beside the results file for files too large for a record (a
            profiler trace); None when the run keeps none (in-process runs, tests). Use :meth:`save_artifact`.
        artifact_prefix: ``artifact_dir`` relative to the results file's folder.
    """

    step: TrainStep
    run: Callable[..., Any]
    cell: Cell
    metrics: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    artifact_dir: Path | None = None
    artifact_prefix: str = ""

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def save_artifact(self, name: str, data: bytes) -> str | None:
        """Write ``data`` as the file ``name`` of this cell's artifacts; returns the path a record names it by
        (relative to the results file's folder, so the report can link it), or None when the run keeps none."""
        if self.artifact_dir is None:
            return None
        if not name or Path(name).name != name or name in (".", ".."):
            raise ValueError(f"an artifact's name is one file name, got {name!r}")
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.artifact_dir / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.artifact_dir / name)
        return f"{self.artifact_prefix}/{name}" if self.artifact_prefix else name


@dataclass(frozen=True)
class Probe:
    """Extra measurements around a cell, registered by a plugin.

    Attributes:
        name: unique across all plugins.
        summary: one line for ``ampsuite list``.
        inspect: ``inspect(ctx)`` runs once before warm-up and may run steps
            itself (FLOP counting, dtype tracing); nothing it does is timed.
        around: ``around(ctx)`` returns a context manager entered just before
            the timed steps and left just after them (memory, clocks).
        order: probes run in ascending order.
    """

    name: str
    summary: str
    inspect: Callable[[ProbeContext], None] | None = None
    around: Callable[[ProbeContext], contextlib.AbstractContextManager[None]] | None = None
    order: int = 50


@dataclass(frozen=True)
class ReportSection:
    """A section that a plugin adds to the HTML report.

    ``html`` is trusted markup produced by the plugin (escape what you insert);
    ``markdown`` is used in the Markdown summary when given.
    """

    title: str
    html: str
    markdown: str | None = None
    anchor: str | None = None


class NodePlace(TypedDict):
    """Where one node of a multi-node cell runs: the keywords of :meth:`CellTask.node`.

    Every node of the cell has the same ``nnodes``, ``endpoint`` (``host:port`` of the rendezvous store, on
    node 0's host) and ``run_id`` (one per cell, a job id, say), and its own ``node_rank``. ``local_addr``: this
    host's address as the other nodes reach it (None, the default: its host name); ``share_gpus``: several nodes
    stand in on one host, so each sees only its share of the GPUs (default False).
    """

    node_rank: int
    nnodes: int
    endpoint: str
    run_id: str
    local_addr: NotRequired[str | None]
    share_gpus: NotRequired[bool]


class CellTask(Protocol):
    """One cell an executor is handed to run (made by the runner; executors never build one).

    Calling it runs the cell in the calling process's machine, through the same
    isolated path as ``ampsuite run`` (a fresh worker process with the suite's
    timeout), and returns the cell's complete record. A task is picklable, so
    an executor may call it in another process or on another node; there it
    loads the run's plugins itself.
    """

    @property
    def index(self) -> int:
        """The cell's position in the run."""
        ...

    @property
    def cell(self) -> Cell:
        """The cell."""
        ...

    def __call__(self) -> dict[str, Any]:
        """Run the cell here; its complete record."""
        ...

    def node(self, **place: Unpack[NodePlace]) -> dict[str, Any]:
        """Run one node of a multi-node cell (``cell.nodes`` > 1) here, isolated, with the cell's timeout.

        Every node of the cell calls it once, on its own host, with its :class:`NodePlace`
        (``task.node(node_rank=..., nnodes=..., endpoint=..., run_id=...)``). Returns the cell's
        complete record on the node whose ranks included global rank 0, or a failure's record (with
        the ``node``), else ``{"node_done": {...}, "node": node_rank}``.
        """
        ...

    def record(self, status: Status, evidence: Mapping[str, Any]) -> dict[str, Any]:
        """A record of this cell that was not measured: ``status`` with ``evidence`` (parent only)."""
        ...


@dataclass(frozen=True)
class ExecutorContext:
    """What an executor's ``run`` receives (in the parent).

    Attributes:
        tasks: the cells to run, in run order; an iterable to consume once (a
            sequential executor takes one task at a time, a batch executor
            lists them all first). Skipped cells and cells kept by ``--resume``
            are not among them.
        options: the validated options instance of the executor.
        device: ``"cpu"`` or ``"cuda"``.
        cell_seconds: the most one cell may take inside its job (the suite's
            timeout times ``[measure] processes``), for a scheduler's time limit.
        started: ``started(task)`` tells the display that a task's cell began.
        message: ``message(text)`` prints one line to the user.
        remember: ``remember(task, data)`` keeps ``data`` (a mapping of JSON data, at most
            :data:`REMEMBER_BYTES` as JSON) for a task in the results file, under
            ``run.executor.jobs[cell id]``, and rewrites the file at once (atomically, by the
            runner), so a run that is killed now still knows it: call it right after
            submitting a job (its id, its files). A later call for the task replaces the
            data; the runner forgets it when the cell's record is written.
        remembered: ``remembered(task)`` gives back what this executor remembered for the
            task in an earlier, killed run of the same results file (``--resume``), or
            None: reattach to that job instead of submitting the cell again. Data that
            is not used is forgotten with the cell's record too, so a job is reattached
            at most until the cell has a record.
    """

    tasks: Iterable[CellTask]
    options: Any
    device: str
    cell_seconds: float
    started: Callable[[CellTask], None]
    message: Callable[[str], None]
    remember: Callable[[CellTask, Mapping[str, Any]], None] = field(default=lambda task, data: None)
    remembered: Callable[[CellTask], Mapping[str, Any] | None] = field(default=lambda task: None)


REMEMBER_BYTES = 16 * 1024
"""The most JSON one ``ExecutorContext.remember`` call may keep: a job's id and files, not its output."""


@dataclass(frozen=True)
class Executor:
    """Where and how the cells of a run execute, registered by a plugin (``ampsuite run --executor NAME``).

    Attributes:
        name: unique across all plugins; what ``--executor`` and the suite
            file's ``[executor] name`` refer to.
        summary: one line for ``ampsuite list``.
        run: ``run(ctx) -> iterator of (task, record)``: runs every task of
            ``ctx.tasks`` somewhere and yields each task with its record as soon
            as it exists (in any order); the runner writes each record the
            moment it is yielded. The runner closes the iterator early when the
            run is interrupted: release what was submitted in a ``finally``.
        options: a dataclass type, as for workloads; set in the suite file's
            ``[executor]`` table and by ``--executor-option KEY=VALUE``.
        check: optional ``check(options) -> reason or None``: why the executor
            cannot run here (a missing package), asked before any cell runs.
    """

    name: str
    summary: str
    run: Callable[[ExecutorContext], Iterator[tuple[CellTask, Mapping[str, Any]]]]
    options: type = NoOptions
    check: Callable[[Any], str | None] | None = None
