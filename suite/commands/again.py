"""A run's untrusted headlines measured again, with more processes, before the report crowns anything.

When a workload's fastest cell is untrusted for its timing alone (noise above
target, an unstable spread), its headline would fall to a slower cell, or read
"no recipe beats FP32", because of one noisy measurement. Such a cell and its
FP32 reference (:func:`ampsuite.analysis.measure_again`) are measured again in
fresh processes whose samples are pooled (``[measure] processes``: the noise of
a pooled figure also counts how far the processes disagree), into a scratch
file beside the results file. A passed new record replaces the first one in the
results file, saying it was measured again and what the first figure was; a
cell that fails the second time keeps its first record, and a record that was
measured again already (kept by ``--resume``) is not measured a third time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ampsuite.contract.cell import Cell
from ampsuite.contract.wire import Status

__all__ = ["PROCESSES", "REFERENCE", "measure_again"]

REFERENCE = "the FP32 reference of a workload's untrusted fastest cell"
"""Why a cell whose own first figure was trusted was measured again."""

PROCESSES = 3
"""Processes a cell is measured in again (at least this many, and two more than the suite's own)."""


class _Again:
    """The run's display for the second pass: its lines, without a second run header."""

    def __init__(self, display: Any, positions: list[int]) -> None:
        self.display = display
        self.positions = positions  # each cell's place in the run's matrix, as its first line gave it

    def run_started(self, total: int, path: Path) -> None:
        pass

    def cell_started(self, index: int, cell: Cell) -> None:
        self.display.cell_started(self.positions[index], cell)

    def cell_finished(self, index: int, record: dict[str, Any]) -> None:
        self.display.cell_finished(self.positions[index], record)

    def message(self, text: str) -> None:
        self.display.message(text)


def measure_again(plan: Any, config: Any, display: Any, doc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Measure ``doc``'s untrusted headlines again (see the module docstring); returns (document, interrupted)."""
    from ampsuite import analysis, results
    from ampsuite.run import runner

    # A record measured again already (kept by --resume) stands: measuring it a third time decides nothing new.
    done = {r["id"] for r in doc["cells"] if r.get("remeasured")}
    ids = set(analysis.measure_again(doc)) - done
    cells = [c for c in plan.cells if c.id in ids]
    if not cells:
        return doc, False
    processes = max(PROCESSES, plan.spec.measure.processes + 2)
    display.message(
        f"measuring again in {processes} processes, the fastest figure of a workload being untrusted: "
        + ", ".join(c.id for c in cells)
    )
    # Timing only: the first record's quality runs stay (training them again would change no verdict's rule).
    measure = dataclasses.replace(plan.spec.measure, processes=processes)
    spec = dataclasses.replace(plan.spec, measure=measure, quality=None)
    scratch = config.output.with_name(f".{config.output.name}.again.json")
    again = dataclasses.replace(config, output=scratch, resume=False, measure_peaks=False)
    try:
        observer = _Again(display, [plan.cells.index(c) for c in cells])
        second, interrupted = runner.run_cells(spec, cells, plan.registry, plan.device, again, observer)
    finally:
        for leftover in scratch.parent.glob(f"{scratch.name}*"):
            leftover.unlink(missing_ok=True)
    first = {r["id"]: r for r in doc["cells"]}
    writer = results.ResultsWriter(config.output, doc)
    for record in second["cells"]:
        earlier = first.get(record["id"])
        if record["status"] != Status.PASSED or earlier is None or earlier["status"] != Status.PASSED:
            continue
        step = earlier["metrics"]["step_time"]
        record["remeasured"] = {
            "processes": processes,
            "first_median": step["median"],
            "first_noise": step["noise"],
            "reason": analysis.untrusted_reason(earlier, doc) or REFERENCE,
        }
        if "quality" in earlier:
            record["quality"] = earlier["quality"]
        writer.add(record)
    return writer.doc, interrupted
