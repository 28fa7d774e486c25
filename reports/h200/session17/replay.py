"""Replay the resumed ResNet-50 tune on a CPU machine: the real search over the real records of
reports/h200/session17/tune-resnet50/results.json, with the device faked.

    python3 reports/h200/session17/replay.py [BUDGET_SECONDS [COMPILE_SECONDS]]

What a new cell measures here is a model, not a measurement, so this says what the search would measure, in which
order and at what cost, not what it would find:

* a candidate session 17's machine measured gets that figure; any other the figure the file holds for it (another
  machine) times MACHINE, and maxpool-offsets and stem-pad on the channels-last recipe the gains session 15 measured
  on one machine (x1.0143, x1.0063, both x1.0246; from the figure of a measured subset by the ratio of its gains);
  without channels-last session 17's own screens (maxpool-offsets x0.91);
* a first step: ~220 s for a graph the machine has not compiled in this run (265 s with channels-last, as in session
  17, whose cold compiles these are; COMPILE_SECONDS sets the first and scales the second), 12 s for one it has
  (fused-optimizer runs outside the graph; other technique options make another graph), 11 s eager; the rest of a
  cell 9 s for a screen and 10 s in full.

The replay writes nothing into the repository: it works on a copy of the file under a temporary folder.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from suite import results
from suite.contract.wire import Cell, Status
from suite.host import environment, session
from suite.run import measure, runner
from suite.spec.suitefile import SuiteSpec
from suite.tune import TuneConfig, tune

ROOT = Path(__file__).resolve().parents[3]
FILE = ROOT / "reports/h200/session17/tune-resnet50/results.json"
SUITE = ROOT / "tests/gpu/tune-resnet50.toml"
MACHINE = 0.975  # session 17's machine against session 13's: its selfcheck ran 3.9%, a selfcheck 1.6%, slower
BASE = frozenset({"cudnn-benchmark"})
STEM_GAINS = {frozenset({"maxpool-offsets"}): 1.0143, frozenset({"stem-pad"}): 1.0063}
BOTH = 1.0246


class Replay:
    def __init__(self, registry: Any, doc: dict[str, Any], compile_seconds: float) -> None:
        self.registry = registry
        self.compile_seconds = compile_seconds
        self.now = 0.0
        self.compiled: set[frozenset[tuple[str, str]]] = set()
        self.cells = 0
        self.compiles = 0
        # one figure a technique set, screen or full alike: session 17's, else the file's full record, else its screen
        self.figures: dict[frozenset[str], float] = {}
        rank: dict[frozenset[str], int] = {}
        for record in doc["cells"]:
            if record["status"] != Status.PASSED:
                continue
            names = frozenset(t["name"] for t in record["techniques"]) - BASE
            here = str(record.get("started", "")) >= "2026-12-02"
            order = 2 if here else 0 if record["id"].endswith("/screen") else 1
            if order >= rank.get(names, -1):
                value = record["metrics"]["throughput"]
                self.figures[names], rank[names] = (value if here else value * MACHINE), order

    def clock(self) -> float:
        return self.now

    def figure(self, names: frozenset[str]) -> float:
        if names in self.figures:
            return self.figures[names]
        extra = names - {"amp-bf16", "amp-fp16", "torch-compile", "fused-optimizer", "channels-last"}
        if "channels-last" not in names:  # session 17's screens without channels-last
            return self.figure(names - extra) * (0.91 if "maxpool-offsets" in extra else 1.0)
        # from a measured subset of the stem techniques, by session 15's gains between the two
        for part in sorted((frozenset(e) for e in (extra, *STEM_GAINS)), key=len):
            if part < extra and (names - extra) | part in self.figures:
                return self.figure((names - extra) | part) * self._gain(extra) / self._gain(part)
        return self.figure(names - extra) * self._gain(extra)

    @staticmethod
    def _gain(extra: frozenset[str]) -> float:
        return BOTH if len(extra) == 2 else STEM_GAINS.get(extra, 1.0)

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        names = frozenset(t for t, _ in cell.techniques) - BASE
        screen = cell.id.endswith("/screen")
        graph = frozenset((t, repr(sorted(o.items()))) for t, o in cell.techniques if t != "fused-optimizer")
        if "torch-compile" not in names:
            first = 11.0
        elif graph in self.compiled:
            first = 12.0
        else:
            first = self.compile_seconds * (265.0 / 220.0 if "channels-last" in names else 1.0)
            self.compiled.add(graph)
            self.compiles += 1
        wall = first + (9.0 if screen else 10.0)
        self.cells += 1
        record = runner.base_record(cell, self.registry)
        if wall > timeout:
            self.now += timeout
            record.update(status=Status.TIMEOUT, evidence={"timeout_seconds": timeout}, wall_seconds=timeout)
            return record
        self.now += wall
        value = self.figure(names)
        median = cell.batch_size / value
        spread = 0.006 if screen else 0.002  # noise ~0.3% screened, ~0.1% in full, as the H200's were
        samples = [median * (1 + spread * (i % 5 - 2) / 2) for i in range(30)]
        record.update(
            status=Status.PASSED,
            wall_seconds=wall,
            metrics={
                "throughput": value,
                "first_step_seconds": first,
                "step_time": measure.summarize(samples).as_dict(samples),
            },
            numerics={"losses": [7.0, 6.9, 6.8], "loss_at_n": 6.8, "nonfinite_step": None, "nonfinite_what": None},
        )
        print(f"  [{self.now:7.1f} s] {cell.id}: {value:,.0f} img/s, first step {first:.0f} s")
        return record


def main(budget: float, compile_seconds: float) -> None:
    # The device, as the H200 the file was measured on.
    environment.detect_device = lambda: "cuda"
    environment.gpu_count = lambda: 1
    doc = results.load(FILE)
    environment.collect = lambda device: dict(doc["environment"])
    results.check_comparable = lambda *args, **kwargs: None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        shutil.copy(FILE, out)
        plan = session.plan(SUITE)
        fake = Replay(plan.registry, doc, compile_seconds)
        config = TuneConfig(output=out, budget_seconds=budget, resume=True, clock=fake.clock)
        (result,) = tune(plan, config, lambda line: print(line), measure=fake)["workloads"]
        winner = result.get("winner") or {}
        print(
            f"replay, {budget:.0f} s budget: {fake.cells} cells, {fake.compiles} cold compiles, {fake.now:.0f} s;"
            f" winner {winner.get('combination')}"
        )


if __name__ == "__main__":
    main(
        float(sys.argv[1]) if len(sys.argv) > 1 else 1300.0,
        float(sys.argv[2]) if len(sys.argv) > 2 else 220.0,
    )
