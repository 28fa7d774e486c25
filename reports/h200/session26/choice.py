"""Step 4's choice of session 26's resumed ResNet-50 tune made again from its results file, with and without
:func:`suite.tune.search._one_machine` (finalists of an earlier run the budget left unmeasured on this run's machine
do not take part, unless faster than all of this run's by more than machines differ):

    PYTHONPATH=. python3 reports/h200/session26/choice.py [RESULTS]

The finalists are the "final" steps the run logged as trusted (its stood-in records included); a record is this
run's when it started after the run began (``run.resumed``'s last entry). No measurement, no device: the tune run
itself chose with the rule of its commit (bded7eb's code, before _one_machine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from suite.tune import search
from suite.tune.space import Candidate

HERE = Path(__file__).resolve().parent


class _Run:
    """What _one_machine asks of a Tuner: which records this run measured, and where its notes go."""

    def __init__(self, began: str) -> None:
        self.began = began

    def here(self, record: dict[str, Any]) -> bool:
        return str(record.get("started") or "") >= self.began

    def untrusted(self, record: dict[str, Any], phase: str) -> str | None:
        return None  # every finalist here is one the run logged as trusted

    def note(self, text: str) -> None:
        print("  note:", text)


class _Config:
    key = "resnet50"


def main(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    began = (doc["run"].get("resumed") or [doc["run"]["started"]])[-1]
    records = {r["id"]: r for r in doc["cells"]}
    (workload,) = doc["run"]["tune"]["workloads"]
    finalists: dict[str, search.Measured] = {}
    for step in workload["steps"]:
        if step["phase"] == "final" and str(step["decision"]).startswith("trusted") and step["cell_id"]:
            record = records[step["cell_id"]]
            candidate = Candidate(tuple(step["combination"].split("+")), int(step["batch_size"]))
            finalists[step["cell_id"]] = (candidate, record)
    measured = list(finalists.values())
    run = _Run(began)
    print(f"this run began {began}; finalists:")
    for candidate, record in measured:
        mark = "this run" if run.here(record) else f"earlier run, {record['started'][:16]}"
        print(f"  {search._value(record):9,.1f}  {candidate.combination}  ({mark})")
    before = search._choose(measured)
    steps: list[dict[str, Any]] = []
    after = search._choose(search._one_machine(run, _Config(), measured, steps))  # type: ignore[arg-type]
    for label, choice in (("chosen as the run did", before), ("chosen among one machine's figures", after)):
        assert choice is not None
        print(f"{label}: {choice[0].combination}, {search._value(choice[1]):,.1f} ({choice[1]['started'][:16]})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "tune-resnet50/results.json")
