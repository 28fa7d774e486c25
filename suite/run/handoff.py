"""What the runner keeps between it and the run's executor: the data the executor remembers per cell, and the
checks on what it yields (a task it was handed, once, with that cell's record)."""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ampsuite import results
from ampsuite.contract import wire
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import AmpsuiteError, PluginError
from ampsuite.contract.plugin import REMEMBER_BYTES
from ampsuite.host.manager import Registry

__all__ = ["ExecutorMemory", "check_yield", "close", "next_yield"]


class ExecutorMemory:
    """``run.executor``: what the run's executor remembered per cell (:class:`ampsuite.ExecutorContext`'s
    ``remember``), kept in the results file until the cell's record is written.

    Under ``--resume`` the data of the killed run's executor is given back to the same executor
    (``remembered``) for the cells that are still without a record; another executor's is dropped,
    with one line saying so. The runner stays the file's only writer: ``remember`` writes through
    the run's :class:`results.ResultsWriter`.
    """

    def __init__(self, writer: results.ResultsWriter, name: str, ids: set[str], message: Callable[[str], None]) -> None:
        self.writer, self.name = writer, name
        run = writer.doc["run"]
        old = run.pop("executor", None)
        jobs: dict[str, dict[str, Any]] = {}
        if isinstance(old, dict) and isinstance(old.get("jobs"), dict):
            if old.get("name") == name:
                jobs = {k: dict(v) for k, v in old["jobs"].items() if k in ids and not writer.has(k)}
            elif old["jobs"]:
                message(
                    f"{len(old['jobs'])} job(s) remembered by executor {old.get('name')!r} are not reattached by "
                    f"executor {name!r} (they may still be running); their cells run again"
                )
        if jobs:
            run["executor"] = {"name": name, "jobs": jobs}

    def _jobs(self) -> dict[str, dict[str, Any]]:
        state = self.writer.doc["run"].setdefault("executor", {"name": self.name, "jobs": {}})
        return typing.cast(dict[str, dict[str, Any]], state["jobs"])

    def remembered(self, task: Any) -> Mapping[str, Any] | None:
        state = self.writer.doc["run"].get("executor")
        data = state["jobs"].get(task.cell.id) if state else None
        return copy.deepcopy(data) if data is not None else None

    def remember(self, task: Any, data: Mapping[str, Any], handed: set[int]) -> None:
        index = getattr(task, "index", None)
        if not isinstance(index, int) or index not in handed:
            raise ValueError(f"remember({task!r}, ...): not one of the tasks the executor was handed")
        if self.writer.has(task.cell.id):
            raise ValueError(f"remember: {task.cell.id} already has its record")
        if not isinstance(data, Mapping):
            raise TypeError(f"remember: expected a mapping of JSON data, got {type(data).__name__}")
        value = dict(data)
        problem = wire.json_problem(value, "data")
        if problem:
            raise ValueError(f"remember: {problem}")
        size = len(json.dumps(value))
        if size > REMEMBER_BYTES:
            raise ValueError(f"remember: {size:,} bytes of JSON; at most {REMEMBER_BYTES:,}")
        self._jobs()[task.cell.id] = copy.deepcopy(value)
        self.writer.flush()

    def forget(self, cell_id: str) -> None:
        """Drop a cell's data (its record is being written; the caller flushes)."""
        state = self.writer.doc["run"].get("executor")
        if state is not None:
            state["jobs"].pop(cell_id, None)
            if not state["jobs"]:
                del self.writer.doc["run"]["executor"]

    def prune(self) -> None:
        """Forget the data of every cell that has a record (the run's end)."""
        state = self.writer.doc["run"].get("executor")
        for cell_id in list(state["jobs"] if state else ()):
            if self.writer.has(cell_id):
                self.forget(cell_id)


def next_yield(produced: Iterator[Any], registry: Registry, name: str) -> Any:
    """The executor's next (task, record), None at its end; an exception of the executor is its plugin's error."""
    try:
        return next(produced)
    except StopIteration:
        return None
    except (KeyboardInterrupt, AmpsuiteError):
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        owner = registry.owner[("executor", name)]
        raise PluginError(owner, f"executor {name!r} raised {type(exc).__name__}: {message}") from exc


def close(produced: Iterator[Any]) -> None:
    """Close an executor's iterator (its ``finally`` cancels what it submitted); Ctrl-C is deferred by then."""
    close = getattr(produced, "close", None)
    if close is not None:
        close()


def check_yield(
    registry: Registry,
    name: str,
    task: Any,
    record: Any,
    cells: Sequence[Cell],
    handed: set[int],
    writer: results.ResultsWriter,
) -> None:
    """An executor yields (task, record) for a task it was handed, once, with that cell's record."""
    owner = registry.owner[("executor", name)]
    index = getattr(task, "index", None)
    if not isinstance(index, int) or index not in handed or not 0 <= index < len(cells):
        raise PluginError(owner, f"executor {name!r} yielded {task!r}, not one of the tasks it was handed")
    if not isinstance(record, Mapping) or record.get("id") != cells[index].id:
        raise PluginError(owner, f"executor {name!r} yielded a record that is not the one of {cells[index].id}")
    if writer.has(cells[index].id):
        raise PluginError(owner, f"executor {name!r} yielded {cells[index].id} twice")
