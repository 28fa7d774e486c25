"""Whether a record in a results file measured the cell a resumed run would measure under the same id.

A cell id names the workload entry, the combination and the batch size, not the options: a suite file
edited between two runs (``[techniques.X]``, ``[combination_options]``, a workload's options) gives a cell
the id of a record it does not describe. ``--resume`` (run and tune alike) keeps a record only when its
definition is the cell's; the others are measured again.

Options are compared through the plugin's options type, so a record written before a plugin gained an
option with a default still matches a cell with that default; an option the type no longer knows, or a
plugin that is gone, is a difference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.host.manager import Registry
from ampsuite.spec.options import OptionError, build_options, options_as_dict


def _normal(value: Any) -> Any:
    """JSON's view of ``value`` (tuples are lists, keys are strings), as a record stores it."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _options(options_type: type | None, values: Any) -> Any:
    """``values`` with every field filled in by ``options_type``; the values themselves when they do not build."""
    if options_type is None or not isinstance(values, Mapping):
        return _normal(values)
    try:
        return _normal(options_as_dict(build_options(options_type, dict(values))))
    except (OptionError, TypeError, ValueError):
        return _normal(values)


def _techniques(registry: Registry, techniques: Any) -> Any:
    out = []
    for entry in techniques or []:
        name = entry.get("name") if isinstance(entry, Mapping) else None
        record = registry.techniques.get(str(name))
        out.append([name, _options(getattr(record, "options", None), entry.get("options") or {})])
    return out


def difference(record: Mapping[str, Any], cell: Cell, registry: Registry) -> str | None:
    """What ``record`` measured that ``cell`` would not (``"technique options"``, ...), or None when it is ``cell``."""
    workload = record.get("workload") if isinstance(record.get("workload"), Mapping) else {}
    assert isinstance(workload, Mapping)
    plugin = registry.workloads.get(cell.workload)
    options_type = getattr(plugin, "options", None)
    differs = []
    if workload.get("plugin") != cell.workload:
        differs.append(f"workload plugin {workload.get('plugin')!r}")
    elif _options(options_type, workload.get("options") or {}) != _options(options_type, cell.options):
        differs.append("workload options")
    mine = _techniques(registry, [{"name": n, "options": o} for n, o in cell.techniques])
    theirs = _techniques(registry, record.get("techniques"))
    if [n for n, _ in theirs] != [n for n, _ in mine]:
        differs.append("techniques " + "+".join(str(n) for n, _ in theirs))
    elif theirs != mine:
        differs.append("technique options")
    for key in ("device", "batch_size", "world_size"):
        if record.get(key) != getattr(cell, key):
            differs.append(f"{key} {record.get(key)!r}")
    if int(record.get("nodes") or 1) != cell.nodes:
        differs.append(f"nodes {record.get('nodes')!r}")
    return ", ".join(differs) or None
