"""The time a run has left: earlier wall times per cell, else this run's cells of the same kind."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from conftest import toy_suite
from rich.console import Console

from ampsuite.analysis.estimate import Estimate, duration_text, earlier_walls
from ampsuite.contract.cell import Cell
from ampsuite.display import Display


def _cell(name: str, techniques: tuple[str, ...] = (), skip: str | None = None) -> Cell:
    return Cell(
        id=name,
        workload_id="w",
        workload="toy",
        options={},
        axes={},
        combination="c",
        techniques=tuple((t, {}) for t in techniques),
        batch_size=8,
        device="cpu",
        baseline="fp32",
        skip_reason=skip,
    )


def _record(cell: Cell, wall: float, status: str = "passed") -> dict[str, Any]:
    return {
        "id": cell.id,
        "status": status,
        "wall_seconds": wall,
        "techniques": [{"name": n, "options": {}} for n in cell.technique_names],
    }


def test_earlier_wall_times_of_the_same_cells_are_the_estimate() -> None:
    a, b, skipped = _cell("a"), _cell("b", ("torch-compile",)), _cell("s", skip="no GPU")
    earlier = earlier_walls({"cells": [_record(a, 2.0), _record(b, 60.0), _record(skipped, 5.0, "skipped")]})
    estimate = Estimate([a, b, skipped], earlier, "old.json")
    assert estimate.remaining() == (62.0, 0)
    estimate.finished(_record(a, 3.0))
    assert estimate.remaining() == (60.0, 0)
    assert estimate.describe() == "estimate: 1 min 0 s from old.json (2 of 2 cells measured there)"


def test_new_cells_are_estimated_from_this_runs_cells_of_their_kind() -> None:
    eager, compiled, new_eager, new_compiled = (
        _cell("e"),
        _cell("c", ("amp-bf16", "torch-compile")),
        _cell("e2"),
        _cell("c2", ("torch-compile",)),
    )
    estimate = Estimate([eager, compiled, new_eager, new_compiled])
    assert estimate.remaining() == (0.0, 4)  # nothing measured yet: no number is made up
    estimate.finished(_record(eager, 4.0))
    assert estimate.remaining() == (4.0, 2)  # e2 like e; neither compiled cell has a kind to go by
    estimate.finished(_record(compiled, 90.0))
    assert estimate.remaining() == (94.0, 0)


def test_a_dry_run_without_earlier_results_says_it_has_no_estimate() -> None:
    estimate = Estimate([_cell("a")])
    assert estimate.describe() == "estimate: none (no earlier results of this suite to estimate from)"
    assert duration_text(3725) == "1 h 2 min" and duration_text(59.6) == "1 min 0 s" and duration_text(7) == "7 s"


def test_progress_lines_give_the_elapsed_time_and_the_time_left(capsys) -> None:
    cells = [_cell("a"), _cell("b"), _cell("c", ("torch-compile",))]
    earlier = earlier_walls({"cells": [_record(c, w) for c, w in zip(cells, (10.0, 20.0, 300.0), strict=True)]})
    out = io.StringIO()
    display = Display(Console(file=out, width=200), live=False, estimate=Estimate(cells, earlier, "r.json"))
    display.run_started(3, Path("r.json"))
    display.cell_finished(0, _record(cells[0], 11.0, "failed"))
    display.cell_started(2, cells[2])
    text = capsys.readouterr().out
    assert "[1/3 0 s, ~5 min 20 s left] a FAILED" in text
    assert "[3/3 0 s, ~5 min 20 s left] c (its first step compiles)" in text  # the long phase is named


def test_ampsuite_run_dry_run_estimates_from_the_results_file_it_would_replace(
    healthy_run: tuple[Path, dict[str, Any]], capsys
) -> None:
    from ampsuite import cli

    out, doc = healthy_run
    suite = out.parent / "healthy.toml"
    assert cli.main(["run", str(suite), "--dry-run", "-o", str(out)]) == 0
    total = sum(r["wall_seconds"] for r in doc["cells"])
    assert f"estimate: {duration_text(total)} from {out} (2 of 2 cells measured there)" in capsys.readouterr().out


def test_a_file_that_is_no_results_file_gives_no_estimate_and_no_error(write_suite, capsys) -> None:
    from ampsuite import cli

    suite = write_suite(toy_suite("s"))  # one cell, toy/fp32/bs8
    out = suite.parent / "r.json"
    out.write_text(json.dumps({"cells": [{"id": "toy/fp32/bs8", "wall_seconds": 125.0}]}), encoding="utf-8")
    assert cli.main(["run", str(suite), "--dry-run", "-o", str(out)]) == 0
    assert "estimate: none" in capsys.readouterr().out
