"""Replay the next resume of the ResNet-50 tune from session 20's file with session 25's rule for near misses (a
gain under the 1% floor kept when three screens of it each beat three of the path's, taken one after another): does
the search now reach session 24's `stack` recipe, and at what device time? Session 24's replay (its model, its
file), the device faked; a repeated screen (``.../screen-N``) is timed and figured as a screen.

    PYTHONPATH=. python3 reports/h200/session25/replay.py [BUDGET_SECONDS [COMPILE_SECONDS [RESULTS]]]

RESULTS: the file to resume (default session 20's); reports/h200/session25/tune-resnet50/results.json replays the
resume after this session's run, whose records (2026-12-03) the model takes as they are and whose verdict it takes
from the file.

The model's figures are one per technique set, repeat or not: each gain it holds holds up when screened again, as
persistent-batch-norm's did on one machine (+0.47% in session 22, +0.41% and +0.49% in session 24). It says what the
search would measure, in which order and at what cost; whether a gain holds up is the machine's to say.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

from suite.contract.wire import Cell, screened_cell
from suite.spec.suitefile import SuiteSpec

HERE = Path(__file__).resolve().parent


_spec = importlib.util.spec_from_file_location("replay24", HERE.parent / "session24/replay.py")
assert _spec is not None and _spec.loader is not None
replay24 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay24)
replay17 = replay24.replay17


class Replay(replay24.Replay):  # type: ignore[misc,name-defined]
    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        base = screened_cell(cell.id)
        as_screen = cell if base is None else dataclasses.replace(cell, id=base + "/screen")
        record: dict[str, Any] = super().__call__(as_screen, spec, timeout)
        record["id"] = cell.id
        return record


if __name__ == "__main__":
    if len(sys.argv) > 3:
        replay17.FILE = Path(sys.argv[3]).resolve()
    replay17.Replay = Replay
    replay17.tune = replay24._tune_and_say
    replay17.main(
        float(sys.argv[1]) if len(sys.argv) > 1 else 3600.0,
        float(sys.argv[2]) if len(sys.argv) > 2 else 208.0,
    )
