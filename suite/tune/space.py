"""The candidate space of a suite, and candidates as ordinary cells.

A candidate is a set of techniques with their options at one batch size for one
workload configuration. It becomes a cell by expanding a *derived* suite (the
workload entry at that batch size, the combinations ``fp32`` and the
candidate's own) with :func:`ampsuite.spec.matrix.expand`, so that option
validation, conflicts, requirements and every technique's ``check`` prune it
exactly as they prune a suite's own cells, before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.spec import matrix
from ampsuite.spec.options import OptionError, build_options, declared_choices, merge_values
from ampsuite.spec.suitespec import MeasureSpec, SuiteSpec, WorkloadEntry

__all__ = [
    "AMP",
    "FP32",
    "Candidate",
    "WorkloadConfig",
    "option_choices",
    "option_defaults",
    "option_value",
    "technique_values",
    "screen_measure",
    "technique_pool",
    "workload_configs",
]

FP32 = "fp32"
"""The combination id of the candidate without techniques (and of the suite-file baseline it is compared with)."""
AMP = ("amp-fp16", "amp-bf16")
"""The AMP dtypes: always both tried as starting points, whatever the suite declares."""
TF32 = "tf32"


@dataclass(frozen=True)
class WorkloadConfig:
    """One workload entry at one point of its option axes: what a recipe is searched for."""

    key: str
    """The cell-id prefix of its cells (``toy`` or ``toy[hidden=128]``)."""
    entry: WorkloadEntry
    axes: Mapping[str, Any]
    """The option values of this point of the entry's option axes."""
    batch_sizes: tuple[int, ...]
    """The batch sizes selected for it, the first being where the technique search runs."""
    unit: str = "samples"


@dataclass(frozen=True)
class Candidate:
    """Techniques (applied in the plugins' order whatever the order here), option overrides, a batch size."""

    techniques: tuple[str, ...]
    batch_size: int
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Technique options that differ from the suite file's ``[techniques.NAME]``; an entry of a table option
    is one override of its own, ``OPTION.ENTRY`` (``inductor.combo_kernels``), merged into the suite's table."""

    @property
    def settings(self) -> list[str]:
        """The option overrides as ``name.option=value``, sorted."""
        return [f"{t}.{k}={v}" for t in sorted(self.overrides) for k, v in sorted(self.overrides[t].items())]

    @property
    def combination(self) -> str:
        """The combination id: ``fp32``, else the technique names joined by ``+``, then ``@name.option=value``."""
        if not self.techniques:
            return FP32
        return "@".join(["+".join(self.techniques), *self.settings])

    @property
    def name(self) -> str:
        """``COMBINATION/bsN``: how progress lines and the best so far name the candidate's cell."""
        return f"{self.combination}/bs{self.batch_size}"

    def plus(self, technique: str) -> Candidate:
        return dataclasses.replace(self, techniques=(*self.techniques, technique))

    def minus(self, technique: str) -> Candidate:
        overrides = {t: o for t, o in self.overrides.items() if t != technique}
        return dataclasses.replace(
            self, techniques=tuple(t for t in self.techniques if t != technique), overrides=overrides
        )

    def with_option(self, technique: str, option: str, value: Any, suite_value: Any) -> Candidate:
        """This candidate with ``technique``'s ``option`` at ``value``: an override, none when it is the suite's
        value (``suite_value``), so that one cell has one combination id however the search reached it."""
        if json.dumps(value) == json.dumps(suite_value):
            return self.without_option(technique, option)
        own = {**self.overrides.get(technique, {}), option: value}
        return dataclasses.replace(self, overrides={**self.overrides, technique: own})

    def without_option(self, technique: str, option: str) -> Candidate:
        """This candidate with the suite file's value of ``technique``'s ``option`` (its override dropped)."""
        kept = {t: {k: v for k, v in o.items() if (t, k) != (technique, option)} for t, o in self.overrides.items()}
        return dataclasses.replace(self, overrides={t: o for t, o in kept.items() if o})

    def cell(self, spec: SuiteSpec, catalog: matrix.Catalog, device: str, config: WorkloadConfig) -> Cell:
        """This candidate as the cell ``ampsuite run`` would build for it (skip reason set when pruned)."""
        cid = self.combination
        # The suite's base techniques (cudnn-benchmark in the CUDA suites) are in every candidate, FP32
        # included, as in every combination of `ampsuite run`: baselines stay tuned.
        base = tuple(t for t in spec.base_techniques if t not in self.techniques)
        techniques = (*base, *self.techniques)
        options = {t: technique_values(spec, catalog, t, self.overrides.get(t, {})) for t in techniques}
        derived = dataclasses.replace(
            spec,
            workloads=(dataclasses.replace(config.entry, batch_sizes=(self.batch_size,), gpus=(1,)),),
            combinations={FP32: tuple(spec.base_techniques), cid: techniques},
            technique_options={t: o for t, o in options.items() if o},
            baseline=FP32,
            include=(),
            exclude=(),
            tune_choices={},  # checked with the suite; a candidate's own combinations need not use them
            combination_options={},  # the suite's combinations' own options: the candidate's are in technique_options
        )
        for cell in matrix.expand(derived, catalog, device):
            if cell.combination == cid and cell.axes == dict(config.axes):
                return cell
        raise LookupError(f"{config.key}: expansion gave no cell for {cid}")  # expand always gives one


def workload_configs(spec: SuiteSpec, cells: Sequence[Cell], units: Mapping[str, str]) -> list[WorkloadConfig]:
    """The workload configurations among ``cells`` (a plan's selection, after ``-k``), in matrix order.

    :param units: workload plugin name -> its unit (``samples``, ``images``...).
    """
    entries = {e.id: e for e in spec.workloads}
    found: dict[str, tuple[Cell, list[int]]] = {}
    for cell in cells:
        key = cell.id.split("/", 1)[0]
        _, sizes = found.setdefault(key, (cell, []))
        if cell.batch_size not in sizes:
            sizes.append(cell.batch_size)
    return [
        WorkloadConfig(key, entries[c.workload_id], dict(c.axes), tuple(sizes), units.get(c.workload, "samples"))
        for key, (c, sizes) in found.items()
    ]


def technique_pool(spec: SuiteSpec, catalog: matrix.Catalog) -> tuple[str, ...]:
    """The techniques the suite's combinations declare, without the AMP dtypes (those are the starting points)
    and without tf32 (the ablation's reference, not a recipe ingredient here: it only changes FP32 matmuls)
    and the suite's base techniques (every candidate has them).
    """
    seen: list[str] = []
    for techniques in spec.combinations.values():
        for t in techniques:
            if t in spec.base_techniques:
                continue
            if t not in seen and t not in AMP and t != TF32 and t in catalog.techniques:
                seen.append(t)
    return tuple(seen)


def technique_values(
    spec: SuiteSpec, catalog: matrix.Catalog, technique: str, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """``technique``'s suite-file values (``[techniques.NAME]``) with a candidate's ``overrides`` on top: each
    ``OPTION.ENTRY`` override goes into that table option's entries (:func:`ampsuite.spec.options.merge_values`)."""
    return merge_values(catalog.techniques[technique].options, spec.technique_options.get(technique, {}), overrides)


def option_defaults(catalog: matrix.Catalog, technique: str) -> dict[str, Any]:
    """The default of each of ``technique``'s options (its options dataclass's fields; a table's is empty)."""
    options_type = getattr(catalog.techniques[technique], "options", None)
    if options_type is None or not dataclasses.is_dataclass(options_type):
        return {}
    out = {}
    for f in dataclasses.fields(options_type):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def option_value(values: Mapping[str, Any], name: str) -> Any:
    """The value of option ``name`` in plain ``values``, or of one entry of a table option when ``name`` is
    ``OPTION.ENTRY`` (None where unset)."""
    if name in values:
        return values[name]
    head, dot, entry = name.partition(".")
    table = values.get(head)
    return table.get(entry) if dot and isinstance(table, Mapping) else None


def option_choices(
    catalog: matrix.Catalog,
    technique: str,
    current: Mapping[str, Any],
    declared: Mapping[str, Sequence[Any]] | None = None,
) -> list[tuple[str, Any]]:
    """(option, value) pairs to try instead of ``current`` for ``technique``: the values of its options declared
    as a set (``Literal`` types, ``choices`` metadata; a field's ``tune`` metadata, where given, names the ones
    tried), and the suite's ``[tune.TECHNIQUE]`` table (``declared``), which replaces the
    values of the options it names (flags are left alone unless declared: each variant is a full measurement);
    an ``OPTION.ENTRY`` name there is one entry of a table option, set on top of ``current``'s table.
    A value the technique refuses together with ``current`` is no choice, nor one that changes nothing."""
    record = catalog.techniques[technique]
    choices: dict[str, tuple[Any, ...]] = {}
    options_type = getattr(record, "options", None)
    # An option the suite leaves unset has its default: trying that value would measure the same cell again.
    current = {**option_defaults(catalog, technique), **current}
    if isinstance(options_type, type) and dataclasses.is_dataclass(options_type):
        choices.update(declared_choices(options_type))
        # A field's "tune" metadata narrows them to what is worth a measurement of its own (compile's
        # max-autotune modes compile a large model for many minutes: a suite that wants them declares them).
        choices.update(
            {f.name: tuple(f.metadata["tune"]) for f in dataclasses.fields(options_type) if "tune" in f.metadata}
        )
    for name, tried in (declared or {}).items():
        choices[name] = tuple(tried)
    out = []
    for name, values in choices.items():
        for value in values:
            if json.dumps(option_value(current, name)) == json.dumps(value):
                continue
            joined = merge_values(options_type, current, {name: value}) if options_type is not None else {}
            if options_type is not None and not _accepts(options_type, joined):
                continue  # refused with the options it would join (a compile mode under backend aot_eager)
            out.append((name, value))
    return out


def _accepts(options_type: type, values: Mapping[str, Any]) -> bool:
    try:
        build_options(options_type, values)
    except OptionError:
        return False
    return True


def screen_measure(measure: MeasureSpec) -> MeasureSpec:
    """The short measure of the screening rung: a quarter of the suite's time and steps, one process.

    The numerics phase is the suite's own (same steps), so a screened candidate's
    loss is held against the FP32 cell exactly as a fully measured one's is.
    """
    min_steps = max(3, min(measure.min_steps, 5))
    return dataclasses.replace(
        measure,
        warmup_steps=min(measure.warmup_steps, 2),
        min_steps=min_steps,
        max_steps=max(min_steps, measure.max_steps // 4),
        max_seconds=measure.max_seconds / 4,
        processes=1,
    )
