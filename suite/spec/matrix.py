"""Matrix expansion: a validated suite and the registry in, a list of cells out.

:func:`expand` is a pure function of its inputs; cell ids are stable and
readable: ``WORKLOAD[axis=value,...]/COMBINATION/bsN``, where only options
that are axes in the suite file appear in brackets; a data-parallel cell
(suite-file ``gpus`` > 1) reads ``WORKLOAD/COMBINATION/xN/bsN`` (N processes,
batch size per process), one spanning M > 1 nodes (suite-file ``nodes``)
``WORKLOAD/COMBINATION/nMxN/bsN`` (:func:`ampsuite.spec.parallel.id_part`), so ids of
single-process cells never change and ``ampsuite max-batch`` still finds the batch
size last.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import SuiteFileError
from ampsuite.contract.plugin import CheckContext, Technique, Workload
from ampsuite.spec import limits, parallel
from ampsuite.spec.lookups import Catalog, check_rules, entry_key_typo, lookup
from ampsuite.spec.names import shown_id
from ampsuite.spec.options import (
    OptionError,
    UnknownOption,
    build_options,
    is_list_option,
    merge_values,
    options_as_dict,
)
from ampsuite.spec.suitespec import SuiteSpec, WorkloadEntry

__all__ = ["Catalog", "Cell", "CheckRaised", "check_size", "expand", "matrix_size"]


class CheckRaised(Exception):
    """A workload's or technique's ``check`` raised while a device was previewed (``--as-device``): the check
    probed a device the preview only pretends to have (``ampsuite.host.session`` names the plugin)."""

    def __init__(self, kind: str, name: str, error: Exception) -> None:
        super().__init__(f"{kind} {name!r}: check raised {type(error).__name__}: {error}")
        self.kind, self.name, self.error = kind, name, error


def _checked(kind: str, name: str, preview: bool, check: Any, *args: Any) -> str | None:
    """``check(*args)``; in a preview an exception from it is :class:`CheckRaised`, naming the record."""
    if not preview:
        result: str | None = check(*args)
        return result
    try:
        result = check(*args)
    except Exception as exc:
        raise CheckRaised(kind, name, exc) from exc
    return result


def _fmt(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "x".join(_fmt(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _technique_options(spec: SuiteSpec, registry: Catalog) -> dict[str, dict[str, dict[str, Any]]]:
    """combination id -> technique -> its options as a dict: ``[techniques]``, then ``[combination_options]``."""
    used = {t for combo in spec.combinations.values() for t in combo}
    for i, t in enumerate(spec.base_techniques):
        lookup(spec, f"suite.base_techniques[{i}]", registry.techniques, "technique", t)
    for cid, combo in spec.combinations.items():
        for i, t in enumerate(combo):
            # With base techniques in front, the position in the file's list is not the one here: name the list.
            key = f"combinations.{cid}" + ("" if spec.base_techniques else f"[{i}]")
            lookup(spec, key, registry.techniques, "technique", t)
    for name in spec.technique_options:
        lookup(spec, f"techniques.{name}", registry.techniques, "technique", name)
        if name not in used:
            raise SuiteFileError(spec.path, f"techniques.{name}", "options given for a technique no combination uses")
    suite_wide: dict[str, dict[str, Any]] = {}
    for name in used:
        suite_wide[name] = _build(spec, registry, name, spec.technique_options.get(name, {}), f"techniques.{name}")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cid, combo in spec.combinations.items():
        out[cid] = {t: suite_wide[t] for t in combo}
        for t, values in spec.combination_options.get(cid, {}).items():
            key = f"combination_options.{cid}.{t}"
            # On top of [techniques.T]: a table option's entries one by one, any other option replaced.
            merged = merge_values(registry.techniques[t].options, spec.technique_options.get(t, {}), values)
            out[cid][t] = _build(spec, registry, t, merged, key)
    _check_tune_choices(spec, registry, used)
    return out


def _build(spec: SuiteSpec, registry: Catalog, name: str, values: Mapping[str, Any], key: str) -> dict[str, Any]:
    try:
        return options_as_dict(build_options(registry.techniques[name].options, values))
    except OptionError as exc:
        raise SuiteFileError(spec.path, key + (f".{exc.key}" if exc.key else ""), exc.message) from exc


def _check_tune_choices(spec: SuiteSpec, registry: Catalog, used: set[str]) -> None:
    """Each ``[tune.TECHNIQUE]`` value must be one the technique accepts on top of the suite's own options."""
    for name, choices in spec.tune_choices.items():
        lookup(spec, f"tune.{name}", registry.techniques, "technique", name)
        if name not in used:
            raise SuiteFileError(spec.path, f"tune.{name}", "choices given for a technique no combination uses")
        record = registry.techniques[name]
        for option, values in choices.items():
            for i, value in enumerate(values):
                try:
                    # OPTION.ENTRY ([tune.T.OPTION] tables) sets one entry of a table option.
                    suite_values = spec.technique_options.get(name, {})
                    build_options(record.options, merge_values(record.options, suite_values, {option: value}))
                except OptionError as exc:
                    # An unknown option or entry is the key's fault; a bad value is the list item's.
                    entry = "." in option and exc.key.startswith(option.partition(".")[0] + ".")
                    key = f"tune.{name}.{exc.key if entry else option}"
                    raise SuiteFileError(
                        spec.path, key + ("" if isinstance(exc, UnknownOption) else f"[{i}]"), exc.message
                    ) from exc


def _split_axes(entry: WorkloadEntry, record: Workload) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """(axes, fixed options) of a workload entry: a list is an axis unless the option itself is a list."""
    axes: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    for name, value in entry.options.items():
        list_typed = is_list_option(record.options, name)
        if isinstance(value, list) and (not list_typed or all(isinstance(v, list) for v in value)):
            axes[name] = value
        else:
            fixed[name] = value
    return axes, fixed


def matrix_size(spec: SuiteSpec, registry: Catalog) -> int:
    """How many cells the suite expands to before include/exclude rules, computed without building one."""
    total = 0
    for entry in spec.workloads:
        entry_key_typo(spec, entry, registry)
        lookup(spec, f"workloads.{entry.id}.{entry.key}", registry.workloads, "workload", entry.workload)
        axes, _ = _split_axes(entry, registry.workloads[entry.workload])
        total += math.prod(len(v) for v in axes.values()) * len(entry.batch_sizes) * len(entry.gpus) * len(entry.nodes)
    return total * len(spec.combinations)


def check_size(spec: SuiteSpec, registry: Catalog, max_cells: int | None) -> None:
    """Refuse a matrix over ``max_cells`` (None: any size) before it is expanded.

    :raises SuiteFileError: naming the size, the bound and ``--allow-large``.
    """
    size = matrix_size(spec, registry)
    if max_cells is not None and size > max_cells:
        raise SuiteFileError(
            spec.path,
            "",
            f"the matrix has {size:,} cells, more than the {max_cells:,} run without asking; "
            "narrow it (-k, include/exclude, fewer axis values) or pass --allow-large",
        )


def _workload_configs(spec: SuiteSpec, registry: Catalog) -> list[tuple[Any, Workload, dict[str, Any], dict[str, Any]]]:
    """(entry, record, options, axis values) for every point of each workload's option axes."""
    configs = []
    for entry in spec.workloads:
        key = f"workloads.{entry.id}"
        entry_key_typo(spec, entry, registry)
        lookup(spec, f"{key}.{entry.key}", registry.workloads, "workload", entry.workload)
        record = registry.workloads[entry.workload]
        axes, fixed = _split_axes(entry, record)
        for point in itertools.product(*axes.values()):
            axis_values = dict(zip(axes, point, strict=True))
            try:
                options = build_options(record.options, {**fixed, **axis_values})
            except OptionError as exc:
                where = f"{key}.{exc.key}" if exc.key else key
                raise SuiteFileError(spec.path, where, exc.message) from exc
            configs.append((entry, record, options_as_dict(options), axis_values))
    return configs


def _skip_reason(
    spec: SuiteSpec,
    registry: Catalog,
    record: Workload,
    options: Any,
    techniques: Sequence[Technique],
    device: str,
    batch_size: int,
    tech_options: Mapping[str, Mapping[str, Any]],
    preview: bool,
) -> str | None:
    if record.requires and device not in record.requires:
        needs = " or ".join(sorted(record.requires))
        return f"workload {record.name!r} needs a {needs} device; this run is on {device}"
    if record.check is not None:
        reason = _checked("workload", record.name, preview, record.check, options, device)
        if reason:
            return reason
    names = {t.name for t in techniques}
    for t in techniques:
        clash = sorted(names & t.conflicts)
        if clash:
            return f"{t.name} conflicts with {clash[0]}"
        for req in sorted(t.requires):
            if req == "cuda":
                if device != "cuda":
                    return f"{t.name} needs a CUDA device; this run is on {device}"
            elif req not in names:
                return f"{t.name} requires {req} in the same combination"
        missing = sorted(t.requires_traits - record.traits)
        if missing:
            traits = ("trait " if len(missing) == 1 else "traits ") + ", ".join(repr(m) for m in missing)
            return f"{t.name} needs a workload with {traits}; {record.name!r} has none"
    ctx = CheckContext(
        record,
        options,
        device,
        tuple(sorted(names)),
        batch_size,
        {t.name: build_options(t.options, tech_options[t.name]) for t in techniques},
        preview,
    )
    for t in techniques:
        if t.check is not None:
            reason = _checked("technique", t.name, preview, t.check, ctx)
            if reason:
                return reason if reason.startswith(t.name) else f"{t.name}: {reason}"  # a reason that names itself
    return None


def _refuse_repeat(spec: SuiteSpec, made_by: dict[str, str], cell_id: str, wid: str, axes: Mapping[str, Any]) -> None:
    """Record which entry makes ``cell_id``, refusing one made twice: results, ``-k`` and ``--resume`` find a
    cell by its id. Every cell counts, an excluded one too, so a rule cannot hide the clash."""
    by = shown_id("workloads", wid) + (" (" + ", ".join(f"{k} = {v!r}" for k, v in axes.items()) + ")" if axes else "")
    if cell_id in made_by:
        raise SuiteFileError(
            spec.path,
            shown_id("workloads", wid),
            f"cell id {cell_id!r} is made twice, by {made_by[cell_id]} and by {by}; give each cell its own id",
        )
    made_by[cell_id] = by


def expand(
    spec: SuiteSpec,
    registry: Catalog,
    device: str,
    gpu_count: int = 0,
    *,
    max_cells: int | None = limits.MAX_CELLS,
    preview: bool = False,
) -> list[Cell]:
    """Every cell of the suite on ``device`` with ``gpu_count`` GPUs, in run order, with skip reasons set.

    ``preview``: the device facts are not this machine's (``ampsuite run --dry-run --as-device``); checks are
    told so (``CheckContext.preview``), and one that raises is :class:`CheckRaised`.

    Order: workloads and their option points as declared, then batch sizes,
    then world sizes (``gpus``, then ``nodes``), then combinations with the baseline first (so
    that comparisons against it, and against the one-process cell, are
    available as soon as possible).

    :raises SuiteFileError: for unknown plugins, options or bad option values, and for
        include/exclude rules that name a workload, combination, plugin, technique or option
        the suite does not have, for two cells with one id, and for a matrix over ``max_cells`` (None: no bound).
    """
    check_size(spec, registry, max_cells)
    tech_options = _technique_options(spec, registry)
    check_rules(spec, registry)
    combos = sorted(spec.combinations.items(), key=lambda kv: kv[0] != spec.baseline)
    cells: list[Cell] = []
    made_by: dict[str, str] = {}
    for entry, record, options, axis_values in _workload_configs(spec, registry):
        opts_obj = build_options(record.options, options)
        suffix = "[" + ",".join(f"{k}={_fmt(v)}" for k, v in axis_values.items()) + "]" if axis_values else ""
        for bs, per_node, nodes in itertools.product(entry.batch_sizes, entry.gpus, entry.nodes):
            world = per_node * nodes
            for cid, names in combos:
                techs = sorted((registry.techniques[n] for n in names), key=lambda t: (t.order, t.name))
                # Every cell owns its dicts: ampsuite_modify_cells may change one cell without touching others.
                cell = Cell(
                    id=f"{entry.id}{suffix}/{cid}{parallel.id_part(world, nodes)}/bs{bs}",
                    workload_id=entry.id,
                    workload=record.name,
                    options=copy.deepcopy(options),
                    axes=copy.deepcopy(axis_values),
                    combination=cid,
                    techniques=tuple((t.name, copy.deepcopy(tech_options[cid][t.name])) for t in techs),
                    batch_size=bs,
                    device=device,
                    baseline=spec.baseline,
                    world_size=world,
                    nodes=nodes,
                )
                _refuse_repeat(spec, made_by, cell.id, entry.id, axis_values)
                if spec.include and not any(r.matches(cell, entry.workload) for r in spec.include):
                    continue
                if any(r.matches(cell, entry.workload) for r in spec.exclude):
                    continue
                reason = _skip_reason(spec, registry, record, opts_obj, techs, device, bs, tech_options[cid], preview)
                if reason is None and world > 1:
                    reason = parallel.skip_reason(world, device, [t.name for t in techs], gpu_count, nodes)
                if reason is not None:
                    cell = cell.skipped(reason)
                cells.append(cell)
    return cells
