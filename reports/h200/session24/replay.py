"""Replay the next resume of the ResNet-50 tune from session 20's file, on a CPU machine: does the search reach
session 24's `stack` recipe, and in how much device time? The real search over the real records of
reports/h200/session20/tune-resnet50/results.json, the device faked (session 17's and 18's replays, whose model
this extends). Its answer (docs/tune.md "Session 24"): in ~3,300 s it reaches the O2 recipe with stem-pad, and
turns persistent-batch-norm (+0.47%) and combo_kernels (+0.3%) down, each under the search's 1% floor.

    python3 reports/h200/session24/replay.py [BUDGET_SECONDS [COMPILE_SECONDS]]

Model, on top of session 18's (half-weights x1.0042 over autocast, combo_kernels x1.0030; session 15's gains for
maxpool-offsets and stem-pad on the channels-last recipe): persistent-batch-norm on a compiled channels-last step
x1.0047 (session 22, the same in session 24 on the O2 path: x1.0041-1.0049); without channels-last the matrix prunes
it (it requires channels-last), so no worker is faked for it. By this model `stack` runs x1.0175 over `tuned-bn`,
where session 24 measured x1.0232-1.0234 on one machine: the model is the cautious side. A cold compile 208 s
(x265/220 with channels-last: 250 s, as session 24's were, 239-257 s). Like the earlier replays it says what the
search would measure, in which order and at what cost, not what it would find.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


replay18 = _load("replay18", HERE.parent / "session18/replay.py")
replay17 = replay18.replay17  # the module session 18's replay extends: its main, its FILE
replay17.FILE = HERE.parent / "session20/tune-resnet50/results.json"
BN = 1.0047


class Replay(replay18.Replay):  # type: ignore[misc,name-defined]
    def figure(self, names: frozenset[str]) -> float:
        if "persistent-batch-norm" in names and names not in self.figures:
            return float(self.figure(names - {"persistent-batch-norm"})) * BN
        return float(super().figure(names))


def _tune_and_say(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The search, then each greedy and option step's decision: why the path ended where it did."""
    summary: dict[str, Any] = _tune(*args, **kwargs)
    for result in summary["workloads"]:
        for step in result["steps"]:
            if step["phase"] in ("greedy", "option") and step["throughput"]:
                print(f"  {step['phase']:6} {step['combination']}: {step['throughput']:,.0f}, {step['decision']}")
    return summary


_tune = replay17.tune

if __name__ == "__main__":
    replay17.Replay = Replay
    replay17.tune = _tune_and_say
    replay17.main(
        float(sys.argv[1]) if len(sys.argv) > 1 else 1500.0,
        float(sys.argv[2]) if len(sys.argv) > 2 else 208.0,
    )
