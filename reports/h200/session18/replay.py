"""Replay the next resume of the ResNet-50 tune, with session 18's space (half-weights a precision start of its
own, combo_kernels a variant of the winner), on a CPU machine: session 17's replay (../session17/replay.py: the
real search over session 17's file, the device faked) with session 18's figures in its model.

    python3 reports/h200/session18/replay.py [BUDGET_SECONDS [COMPILE_SECONDS]]

Model, on top of session 17's: a candidate with half-weights runs as the same one with amp-fp16, times 1.0042 (o2
against o1 on one machine, session 18: 33.094-33.106 against 33.234-33.251 ms); with torch-compile's combo_kernels,
times 1.0030 more (32.972-33.012 against 33.094-33.106 ms). Like session 17's, this says what the search would
measure, in which order and at what cost, not what it would find: session 18 measured neither gain eager nor on
the search's shorter paths.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from suite.contract.wire import Cell
from suite.spec.suitefile import SuiteSpec

_spec = importlib.util.spec_from_file_location("replay17", Path(__file__).resolve().parents[1] / "session17/replay.py")
assert _spec is not None and _spec.loader is not None
replay17 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay17)

O2, COMBO = 1.0042, 1.0030


class Replay(replay17.Replay):  # type: ignore[misc,name-defined]
    def figure(self, names: frozenset[str]) -> float:
        if "half-weights" in names:
            return float(super().figure((names - {"half-weights"}) | {"amp-fp16"})) * O2
        return float(super().figure(names))

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record: dict[str, Any] = super().__call__(cell, spec, timeout)
        combo = any(t == "torch-compile" and o.get("combo_kernels") for t, o in cell.techniques)
        if combo and "throughput" in record.get("metrics", {}):
            metrics = record["metrics"]
            metrics["throughput"] *= COMBO
            samples = [s / COMBO for s in metrics["step_time"]["samples"]]
            metrics["step_time"] = replay17.measure.summarize(samples).as_dict(samples)
        return record


if __name__ == "__main__":
    replay17.Replay = Replay
    replay17.main(
        float(sys.argv[1]) if len(sys.argv) > 1 else 1300.0,
        float(sys.argv[2]) if len(sys.argv) > 2 else 220.0,
    )
