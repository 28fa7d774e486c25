"""What a validated suite is (:class:`SuiteSpec` and its parts), and the keys each table of a suite file takes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.spec import names
from ampsuite.spec.quality import QUALITY_KEYS, QualitySpec

__all__ = [
    "DEVICES",
    "EXECUTOR_KEYS",
    "MEASURE_KEYS",
    "RULE_KEYS",
    "SUITE_KEYS",
    "TABLE_KEYS",
    "TOP_KEYS",
    "WORKLOAD_KEYS",
    "ExecutorSpec",
    "MeasureSpec",
    "Rule",
    "SuiteSpec",
    "WorkloadEntry",
]


DEVICES = ("auto", "cpu", "cuda")
RULE_KEYS = ("workload", "plugin", "combination", "technique", "batch_size", "options")
TOP_KEYS = (
    "suite",
    "measure",
    "workloads",
    "combinations",
    "combination_options",
    "techniques",
    "include",
    "exclude",
    "executor",
    "tune",
    "quality",
)
"""The tables a suite file may have; any other top-level key is refused."""
SUITE_KEYS = (
    "name",
    "description",
    "device",
    "seed",
    "timeout",
    "baseline",
    "numerics_tolerance",
    "memory_limit_gb",
    "cpu_threads",
    "base_techniques",
)
"""The keys of ``[suite]``; any other is refused."""
WORKLOAD_KEYS = ("workload", "plugin", "batch_size", "gpus", "nodes")
"""The keys of a ``[workloads.ID]`` table that are not workload options (every other key is one); ``plugin`` is
the older spelling of ``workload``, still read."""
EXECUTOR_KEYS = ("name",)
"""The key of ``[executor]`` that is not an executor option (every other key is one)."""


@dataclass(frozen=True)
class MeasureSpec:
    """How each cell is measured (the ``[measure]`` table)."""

    warmup_steps: int = 3
    """Untimed steps after the numerics phase."""
    warmup_seconds: float = 0.0
    """The warm-up goes on past ``warmup_steps`` until this long has passed: a GPU at its power cap lowers its
    clocks about a second into sustained load, so a cell timed sooner measures a burst."""
    min_steps: int = 10
    """Timed steps before the noise rule may stop the timing."""
    max_steps: int = 200
    """Timed steps at most."""
    max_seconds: float = 5.0
    """Timing stops once this long has passed (and at least 3 steps ran)."""
    noise_target: float = 0.01
    """Timing stops once the noise of the median is at most this; a figure above it is untrusted."""
    numerics_steps: int = 5
    """Steps of the numerics phase, whose loss is held against the FP32 cell's."""
    processes: int = 1
    """Fresh worker processes each single-process cell is measured in, one after another, samples pooled
    (see :func:`ampsuite.run.runner.pool_outcomes`); data-parallel cells (``gpus`` > 1) run once whatever it says."""


MEASURE_KEYS = tuple(MeasureSpec.__dataclass_fields__)
"""The keys of ``[measure]``: the fields of :class:`MeasureSpec`; any other is refused."""


@dataclass(frozen=True)
class WorkloadEntry:
    """One ``[workloads.ID]`` table; ``options`` still holds raw values (lists may be axes)."""

    id: str
    workload: str
    """The registered workload's name (``ampsuite list``): the table's ``workload`` key, else its ID."""
    batch_sizes: tuple[int, ...]
    options: Mapping[str, Any]
    gpus: tuple[int, ...] = (1,)
    """Processes (one per GPU) per node each cell runs on; 1 is the usual single-process cell."""
    nodes: tuple[int, ...] = (1,)
    """Nodes each cell spans (world size = nodes x gpus); 1: every process on one host."""
    key: str = field(default="workload", compare=False)
    """The key that named the workload (``workload``, or its older spelling ``plugin``), for messages."""


TABLE_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "": TOP_KEYS,
        "suite": SUITE_KEYS,
        "measure": MEASURE_KEYS,
        "workloads.ID": WORKLOAD_KEYS,
        "include": RULE_KEYS,
        "exclude": RULE_KEYS,
        "executor": EXECUTOR_KEYS,
        "quality": QUALITY_KEYS,
    }
)
"""Each table's own keys, as the loader reads them ("" is the top level): what docs/suite-file.md documents.
``[workloads.ID]`` and ``[executor]`` list only the suite's keys; their other keys are the plugin's options.
``[combinations]``, ``[techniques.*]``, ``[combination_options.*]`` and ``[tune.*]`` have no fixed keys."""


@dataclass(frozen=True)
class Rule:
    """One ``[[include]]`` or ``[[exclude]]`` table: a cell matches when every key matches."""

    workload: str | None = None
    plugin: str | None = None
    combination: str | None = None
    technique: str | None = None
    batch_size: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, cell: Cell, plugin: str) -> bool:
        """Whether ``cell``, of a ``[workloads.ID]`` table running workload ``plugin``, matches every key given."""
        if self.workload not in (None, cell.workload_id) or self.plugin not in (None, plugin):
            return False
        if self.combination not in (None, cell.combination) or self.batch_size not in (None, cell.batch_size):
            return False
        if self.technique is not None and self.technique not in [n for n, _ in cell.techniques]:
            return False
        return all(cell.options.get(k) == v for k, v in self.options.items())


@dataclass(frozen=True)
class ExecutorSpec:
    """The ``[executor]`` table: the executor's name (None: the default) and its options, still raw values."""

    name: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SuiteSpec:
    """A validated suite file."""

    path: str
    sha256: str
    name: str
    description: str
    device: str
    seed: int
    timeout: float
    baseline: str
    numerics_tolerance: float
    memory_limit_gb: float
    """GiB of address space each CPU worker may map beyond what it maps when the limit is set; 0: no limit."""
    cpu_threads: int
    measure: MeasureSpec
    workloads: tuple[WorkloadEntry, ...]
    combinations: Mapping[str, tuple[str, ...]]
    technique_options: Mapping[str, Mapping[str, Any]]
    include: tuple[Rule, ...] = ()
    exclude: tuple[Rule, ...] = ()
    base_techniques: tuple[str, ...] = ()
    """Techniques every combination starts from (``[suite] base_techniques``); already in ``combinations``."""
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    """Where the cells run (the ``[executor]`` table); its options are checked against the executor's."""
    tune_choices: Mapping[str, Mapping[str, tuple[Any, ...]]] = field(default_factory=dict)
    """``[tune.TECHNIQUE]``: technique -> option -> values ``ampsuite tune`` tries; checked by ``matrix.expand``."""
    combination_options: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    """``[combination_options.COMBINATION.TECHNIQUE]``: options of one technique in one combination's cells, on
    top of ``technique_options``; values checked by ``matrix.expand``."""
    quality: QualitySpec | None = None
    """``[quality]``: cells also train to a budget on real data, judged against a reference (docs/quality.md)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def dir_name(self) -> str:
        """The folder under ``reports/`` this suite's results and report go to by default (a slug of the name)."""
        return names.path_component(self.name)
