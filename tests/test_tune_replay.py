"""The search replayed on the H200 tune results that reports/h200 keeps: each cell the search asks for is served from
the file, and the search must reach the winner the file's tune chose.

The ResNet-50, ViT-B/16 and BERT-base tunes ran under rules that compared figures across runs and machines; the
search now holds only one machine's figures against each other. Replayed, every figure is one machine's (the
file's), so a rule that decided differently would show as another winner here. A cell the file lacks fails: it was
never measured there, or the budget ran out first.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ampsuite import results
from ampsuite.contract.cell import Cell
from ampsuite.contract.wire import Status
from ampsuite.host import environment, session
from ampsuite.plugins.techniques import fp8
from ampsuite.spec.suitespec import SuiteSpec
from ampsuite.tune import TuneConfig, TuneSummary, tune_summary

REPORTS = Path(__file__).resolve().parent.parent / "reports" / "h200"

ALIASES = {"torch-compile.coordinate_descent=True": "torch-compile.inductor.coordinate_descent_tuning=True"}
"""Option settings the files name as an older ampsuite did (CHANGELOG.md: the inductor pass-through table)."""


def _current(cell_id: str) -> str:
    for old, new in ALIASES.items():
        cell_id = cell_id.replace(old, new)
    return cell_id


class Replay:
    """A worker that serves the file's record of each cell, as measured on this machine."""

    def __init__(self, doc: dict[str, Any], registry: Any) -> None:
        self.records = {_current(r["id"]): r for r in doc["cells"]}
        self.registry = registry
        self.missing: list[str] = []

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        fresh = results.base_record(cell, self.registry)
        record = self.records.get(cell.id)
        if record is None:
            self.missing.append(cell.id)
            fresh.update(status=Status.FAILED, evidence={"type": "NotInFile", "message": "not measured in the file"})
            return fresh
        return {**copy.deepcopy(record), "id": cell.id, "machine": fresh["machine"]}


WINNERS = {
    "tune-resnet50": ("amp-fp16+torch-compile+fused-optimizer+channels-last", 7651.2),
    "tune-bert-base": ("amp-bf16+torch-compile+fused-optimizer", 4406.7),
    "tune-vit-b16": (
        "amp-bf16+torch-compile+patch-gemm+fused-optimizer@torch-compile.inductor.coordinate_descent_tuning=True",
        3619.7,
    ),
    "tune-llm": ("amp-bf16+torch-compile+fp8+fused-optimizer@torch-compile.scope=model", 111806.8),
}
"""Each file's winner as docs/tune.md reports it: (combination, throughput)."""


@pytest.mark.parametrize("name", list(WINNERS))
def test_the_search_replayed_on_an_h200_tune_reaches_its_winner(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads((REPORTS / f"{name}.json").read_text(encoding="utf-8"))
    monkeypatch.setattr(environment, "detect_device", lambda: "cuda")  # the suite's device, on a CPU
    monkeypatch.setattr(fp8, "torchao_missing", lambda: False)  # the file's fp8 cells ran with torchao
    plan = session.plan(doc["run"]["suite"]["path"], device="cuda")
    replay = Replay(doc, plan.registry)
    ticks = iter(range(10**9))
    config = TuneConfig(output=tmp_path / "results.json", budget_seconds=1e9, clock=lambda: next(ticks) * 1e-3)
    summary = tune_summary(plan, config, lambda line: None, measure=replay)
    for new, old in zip(summary.workloads, TuneSummary.from_json(doc["run"]["tune"]).workloads, strict=True):
        assert new.winner is not None and old.winner is not None, (new.reason, replay.missing)
        assert new.winner.combination == _current(old.winner.combination), replay.missing
        assert new.winner.throughput == pytest.approx(old.winner.throughput)
        assert (new.winner.combination, round(new.winner.throughput, 1)) == WINNERS[name]
