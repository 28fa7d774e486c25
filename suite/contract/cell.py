"""A cell: one point of the matrix (workload x combination x batch size), frozen.

What ``ampsuite_modify_cells`` and probes see (the same object), and what the runner hands a worker as
``Cell.as_dict()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Cell"]


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: a workload configuration, a technique combination, a batch size.

    Frozen: a plugin changes a cell by replacing it in the list it was given
    (``cells[i] = cell.skipped("why")`` or ``dataclasses.replace``).

    Attributes:
        id: unique and stable, ``WORKLOAD[axis=value,...]/COMBINATION[/xN or /nMxN]/bsN``.
        workload_id: the suite file's name for the workload entry.
        workload: the workload plugin's registered name.
        options: the workload's options, every field filled in.
        axes: the options that are axes in the suite file, with this cell's values.
        combination: the suite file's name for the technique combination.
        techniques: ``(name, options)`` pairs in the order they are applied.
        batch_size: samples per step (per process when ``world_size`` > 1).
        device: ``cpu`` or ``cuda``.
        baseline: the combination this cell is compared with.
        skip_reason: why the cell will not run, or None.
        world_size: processes the cell runs data-parallel on (1 = one process); with ``nodes`` > 1,
            ``nodes`` x the processes per node.
        nodes: the nodes (hosts) those processes are spread over, each running ``world_size // nodes``
            (suite-file ``nodes``; 1 = every process on this host, the usual case).
    """

    id: str
    workload_id: str
    workload: str
    options: dict[str, Any]
    axes: dict[str, Any]
    combination: str
    techniques: tuple[tuple[str, dict[str, Any]], ...]
    batch_size: int
    device: str
    baseline: str
    skip_reason: str | None = None
    world_size: int = 1
    nodes: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form data a plugin attaches in ``ampsuite_modify_cells``; travels to the worker."""

    def __post_init__(self) -> None:
        # Lists from callers become tuples: a frozen cell's technique order cannot change under it.
        object.__setattr__(self, "techniques", tuple((str(n), dict(o)) for n, o in self.techniques))

    def skipped(self, reason: str) -> Cell:
        """This cell, to be recorded as skipped with ``reason`` instead of run."""
        return dataclasses.replace(self, skip_reason=reason)

    @property
    def technique_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.techniques)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (what a worker payload carries)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["techniques"] = [{"name": n, "options": o} for n, o in self.techniques]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cell:
        """The inverse of :meth:`as_dict`."""
        return cls(
            id=data["id"],
            workload_id=data["workload_id"],
            workload=data["workload"],
            options=dict(data["options"]),
            axes=dict(data["axes"]),
            combination=data["combination"],
            techniques=tuple((t["name"], dict(t["options"])) for t in data["techniques"]),
            batch_size=int(data["batch_size"]),
            device=data["device"],
            baseline=data["baseline"],
            skip_reason=data.get("skip_reason"),
            extra=dict(data.get("extra") or {}),
            world_size=int(data.get("world_size", 1)),
            nodes=int(data.get("nodes", 1)),
        )
