"""Throughput of each cell across commits, from results files or an asv results directory (:func:`history`)."""

from __future__ import annotations

import ast
import datetime as _dt
import itertools
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ampsuite.analysis.access import AnyDocument, as_mapping, finite, noise, throughput
from ampsuite.analysis.machines import group_machines
from ampsuite.contract.errors import ResultsFileError

__all__ = ["HistoryPoint", "HistorySource", "history"]


class HistoryPoint(NamedTuple):
    """One measurement of a cell at one commit (or run)."""

    label: str
    """The commit (12 hex digits) or, without one, the run id."""
    date: str
    """ISO 8601; the run's start for results files, the commit date for asv."""
    throughput: float
    noise: float | None


HistorySource = AnyDocument | str | os.PathLike[str]

SECONDS_PER_SAMPLE = "seconds_per_sample"
SAMPLES_PER_SECOND = ("samples_per_second", "throughput")
NOISE = "noise"


def _iso(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(value / 1000, tz=_dt.UTC).isoformat(timespec="seconds")
    return "" if value is None else str(value)


def _sort_key(point: HistoryPoint) -> tuple[float, str]:
    try:
        stamp = _dt.datetime.fromisoformat(point.date)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=_dt.UTC)
        return stamp.timestamp(), point.label
    except ValueError:
        return math.inf, point.label


def _doc_points(doc: AnyDocument, source: str) -> Iterable[tuple[str, str, HistoryPoint]]:
    """(source, cell id, point) for each passed cell of a results document of the machine named ``source``."""
    run, env = doc["run"], as_mapping(doc["environment"])
    commit = env.get("workdir_commit")
    label = str(commit)[:12] if commit else str(run["id"])
    for record in doc["cells"]:
        value = throughput(record)
        if value is not None:
            yield source, record["id"], HistoryPoint(label, _iso(run.get("started")), value, noise(record))


def _param_value(text: Any) -> str:
    """asv stores parameter values as their ``repr``; cell ids come back as plain strings."""
    if not isinstance(text, str):
        return str(text)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return str(value)


def _cell_id(combo: tuple[Any, ...]) -> str:
    """The cell id of one asv parameter combination: ampsuite's benchmarks take the cell id as their one
    parameter; an earlier version's took ``(workload, combination, batch)`` (``'toy'``, ``'fp32'``, ``32`` ->
    ``toy/fp32/bs32``)."""
    parts = [_param_value(p) for p in combo]
    if len(parts) == 3 and parts[2].isdigit():
        parts[2] = f"bs{parts[2]}"
    return "/".join(parts)


def _asv_metric(benchmark: str) -> str | None:
    name = benchmark.rsplit(".", 1)[-1]
    if name.endswith(SECONDS_PER_SAMPLE):
        return SECONDS_PER_SAMPLE
    if name.endswith(SAMPLES_PER_SECOND):
        return "throughput"
    if NOISE in name:
        return NOISE
    return None


def _asv_file_points(data: Mapping[str, Any], path: Path) -> Iterable[tuple[str, str, HistoryPoint]]:
    if data.get("version") != 2:
        raise ValueError(f"{path}: asv results version {data.get('version')!r} is not supported (expected 2)")
    columns = list(data.get("result_columns") or [])
    machine = str((data.get("params") or {}).get("machine") or path.parent.name)
    label = str(data.get("commit_hash") or path.stem.split("-")[0])[:12]
    date = _iso(data.get("date"))
    values: dict[str, dict[str, float]] = {}
    for benchmark, row in (data.get("results") or {}).items():
        metric = _asv_metric(str(benchmark))
        fields = dict(zip(columns, row or [], strict=False))
        results, params = fields.get("result"), fields.get("params") or []
        if metric is None or not isinstance(results, list) or not params:
            continue
        low, high = fields.get("stats_ci_99_a") or [], fields.get("stats_ci_99_b") or []
        for i, (combo, value) in enumerate(zip(itertools.product(*params), results, strict=False)):
            number = finite(value)
            if number is None:
                continue
            cell_id = _cell_id(combo)
            values.setdefault(cell_id, {})[metric] = number
            spread = _ci_noise(number, low[i] if i < len(low) else None, high[i] if i < len(high) else None)
            if spread is not None and metric != NOISE:
                values[cell_id].setdefault(NOISE, spread)
    for cell_id, found in values.items():
        per_sample = found.get(SECONDS_PER_SAMPLE)
        rate = found.get("throughput")
        if rate is None and per_sample is not None and per_sample > 0:
            rate = 1.0 / per_sample
        if rate is not None:
            yield machine, cell_id, HistoryPoint(label, date, rate, found.get(NOISE))


Z_99 = 2.5758
"""The normal quantile of a two-sided 99% interval."""


def _ci_noise(median: float, low: Any, high: Any) -> float | None:
    """ampsuite's noise (the relative standard error of the median) from asv's 99% interval of the median: its
    half-width over the normal quantile, relative to the median; None where asv kept no interval (one sample)."""
    a, b = finite(low), finite(high)
    if a is None or b is None or median <= 0 or b < a:
        return None
    return (b - a) / 2 / Z_99 / median


def _read_json(path: Path) -> Any:
    """A history source's JSON; a file that cannot be read as JSON is a one-line error naming it."""
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ResultsFileError(str(path), "no such file or folder") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ResultsFileError(str(path), f"cannot be read as JSON ({type(exc).__name__}: {exc})") from None


def _asv_points(root: Path) -> Iterable[tuple[str, str, HistoryPoint]]:
    for path in sorted(root.rglob("*.json")):
        if path.name in ("machine.json", "benchmarks.json"):
            continue
        data = _read_json(path)
        if isinstance(data, Mapping) and "commit_hash" in data and "results" in data:
            yield from _asv_file_points(data, path)


def _path_source(path: Path) -> AnyDocument | list[tuple[str, str, HistoryPoint]]:
    """A results file's document, or the points of an asv results file or folder."""
    if path.is_dir():
        return list(_asv_points(path))
    data = _read_json(path)
    if isinstance(data, Mapping) and data.get("format") == "ampsuite-results":
        return data
    if isinstance(data, Mapping) and "commit_hash" in data:
        return list(_asv_file_points(data, path))
    raise ResultsFileError(str(path), "neither an ampsuite results file nor an asv results file")


def history(sources: HistorySource | Iterable[HistorySource]) -> dict[str, list[HistoryPoint]]:
    """Throughput of each cell across commits, oldest first.

    ``sources`` is one or several of: a loaded ampsuite results document; a
    path to a results file; a path to an asv results directory (``results/``,
    or one machine's folder in it) or to one asv results file.

    From results documents: one point per passed cell, labelled by
    ``environment.workdir_commit`` (else ``run.id``), dated ``run.started``.

    From asv (results format version 2: ``result_columns`` naming the columns
    of each ``results[benchmark]`` row; ``params`` a list of parameter lists
    holding ``repr`` strings; ``result`` the values over their Cartesian product
    in ``itertools.product`` order; ``commit_hash``; ``date`` in ms since the
    epoch; ``params.machine``): benchmarks whose last dotted name part ends in
    ``seconds_per_sample`` give throughput ``1 / value``; ending in
    ``samples_per_second`` or ``throughput`` give it directly; containing
    ``noise`` give the relative noise, as does, otherwise, asv's 99% interval of
    the median (``stats_ci_99_a``/``_b``: its half-width over 2.576, relative to
    the median). The cell id comes from the parameters: ampsuite's asv benchmarks
    take the cell id as their one parameter; results of an earlier version took
    ``workload``, ``combination`` and ``batch`` (``'toy'``, ``'fp32'``, ``32``
    give ``toy/fp32/bs32``) and are read the same way.
    When several values were measured, asv's ``result`` is their median.
    Failed entries (null, NaN) and parameter combinations that are no cell
    (n/a) are left out.

    Keys are cell ids. When the points come from more than one machine (the
    asv machine name; for results files the machine's label of
    :func:`ampsuite.analysis.group_machines`: the GPU's name, else the CPU's,
    and the host, with the card's UUID where two cards read alike), each key is
    suffixed with ``" @ <machine>"`` so that no line mixes hardware: two hosts
    with the same GPU, and two cards of one model, are two lines.
    """
    items: list[HistorySource] = [sources] if isinstance(sources, Mapping | str | os.PathLike) else list(sources)
    found: list[tuple[str, str, HistoryPoint]] = []
    docs: list[AnyDocument] = []
    files: list[str] = []
    for item in items:
        read = item if isinstance(item, Mapping) else _path_source(Path(item))
        if isinstance(read, list):
            found.extend(read)
        else:
            docs.append(read)
            files.append("" if isinstance(item, Mapping) else str(item))
    # Results files name their machines as the machines page does, so two cards of one model are two series.
    for machine in group_machines(docs, files if all(files) else ()):
        for index in machine.docs:
            found.extend(_doc_points(docs[index], machine.label))
    several = len({source for source, _, _ in found}) > 1
    out: dict[str, list[HistoryPoint]] = {}
    for source, cell_id, point in found:
        out.setdefault(f"{cell_id} @ {source}" if several else cell_id, []).append(point)
    return {key: sorted(points, key=_sort_key) for key, points in sorted(out.items())}
