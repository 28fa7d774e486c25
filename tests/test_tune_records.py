"""The tune summary's records: typed decisions, JSON both ways, and the summaries earlier versions wrote.

The search's own behaviour is tests/test_tune.py's; here, what any reader of ``run.tune`` relies on: that a
summary of this version or an earlier one reads as the same records, that their words come from the records,
and that a summary no reader could use is refused by the results loader, naming its key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ampsuite import results
from ampsuite.contract.validate import WireError
from ampsuite.report.render import render_tune_page
from ampsuite.run import selfcheck
from ampsuite.tune import (
    AblationRow,
    Decision,
    Phase,
    RowKind,
    Step,
    TuneSummary,
    Verdict,
    recipe_toml,
    tune_markdown,
)

REPORTS = Path(__file__).resolve().parent.parent / "reports" / "h200"

H200_TUNES = ["tune-resnet50", "tune-bert-base", "tune-vit-b16"]


@pytest.mark.parametrize("name", H200_TUNES)
def test_an_earlier_versions_summary_reads_as_records_and_renders(name: str, tmp_path: Path) -> None:
    doc = results.load(REPORTS / f"{name}.json")
    written = doc["run"]["tune"]
    summary = TuneSummary.from_json(written)
    (workload,) = summary.workloads
    (old,) = written["workloads"]
    assert workload.winner is not None and workload.winner.cell_id == old["winner"]["cell_id"]
    for step, text in zip(workload.steps, [s["decision"] for s in old["steps"]], strict=True):
        # Every decision written as text is one of this version's, with its particulars as the detail; the words
        # of the cross-run rules an earlier version had are kept as they read.
        assert step.decision is not Decision.PENDING
        assert step.describe() == text.replace("kept: confirmed, ", "kept, confirmed: ").replace(
            "not faster", "not taken"
        )
        assert (step.decision is Decision.LEGACY) == text.startswith("not measured again")
    assert workload.ablation[0].kind is RowKind.FP32
    assert [r.label for r in workload.ablation if r.kind is RowKind.WINNER] == ["winner"]
    # Written again by this version, it reads as the same records.
    assert TuneSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
    page = render_tune_page(written, tmp_path).read_text(encoding="utf-8")
    assert f"<code>{workload.winner.combination}</code>" in page
    assert tune_markdown(written) == tune_markdown(summary)
    assert f"batch_size = {workload.winner.batch_size}" in recipe_toml(written)
    assert [c.name for c in selfcheck.tuned_checks(doc)] == [f"tuned {workload.winner.cell_id}"]


def test_a_confirmed_near_miss_of_an_earlier_file_keeps_its_figures() -> None:
    summary = TuneSummary.from_json(results.load(REPORTS / "tune-resnet50.json")["run"]["tune"])
    (confirmed,) = [s for s in summary.workloads[0].steps if s.decision is Decision.CONFIRMED]
    assert confirmed.phase is Phase.GREEDY and confirmed.decision.kept
    assert confirmed.detail == (
        "as decided on 2026-12-03 07:25 UTC (screens 7,660.6, 7,750.3, 7,683.2 against 7,634.8, 7,568.0, 7,592.4)"
    )
    (verdict,) = summary.confirmations
    assert verdict.confirmed and verdict.detail(earlier=True) == confirmed.detail


@pytest.mark.parametrize(
    ("text", "decision", "detail"),
    [
        ("kept", Decision.KEPT, ""),
        ("not faster", Decision.NOT_FASTER, ""),
        ("kept: the round's near misses together", Decision.KEPT_TOGETHER, ""),
        ("kept: the leading recipe's companions", Decision.HEAD_START, ""),
        ("trusted: a record at hand, for a finalist the budget left unmeasured", Decision.STOOD_IN, ""),
        ("not measured: the budget was spent", Decision.NOT_MEASURED, ""),
        ("screened to confirm a near miss", Decision.CONFIRMING, ""),
        ("not confirmed: screens 1.0 against 2.0", Decision.NOT_CONFIRMED, "screens 1.0 against 2.0"),
        ("not confirmed, as decided on D (screens F)", Decision.NOT_CONFIRMED, "as decided on D (screens F)"),
        ("kept: confirmed, each of its screens faster (F)", Decision.CONFIRMED, "each of its screens faster (F)"),
        ("measured again in this run", Decision.LEGACY, "measured again in this run"),
        ("", Decision.PENDING, ""),
    ],
)
def test_a_decision_an_earlier_version_wrote_as_text_is_converted_once_on_load(
    text: str, decision: Decision, detail: str
) -> None:
    step = Step.from_json(_step_data(decision=text))
    assert (step.decision, step.detail) == (decision, detail)


def _step_data(**fields: Any) -> Any:
    data = {
        "phase": "greedy",
        "combination": "amp-bf16+noop",
        "batch_size": 64,
        "cell_id": "toy/amp-bf16+noop/bs64/screen",
        "status": "passed",
        "throughput": 12800.0,
        "untrusted": None,
        "decision": "kept",
    }
    return {**data, **fields}


def test_every_decision_has_its_own_words_and_a_step_keeps_its_decision_through_json() -> None:
    labels = [d.label for d in Decision if d is not Decision.LEGACY]
    assert all(labels) and len(set(labels)) == len(labels)  # an earlier file's text names one decision
    for decision in Decision:
        step = Step.from_json(_step_data()).decided(decision, "the particulars")
        data = json.loads(json.dumps(step.to_json()))
        assert data["decision"] == decision.value and Step.from_json(data) == step
    step = Step.from_json(_step_data()).decided(Decision.NOT_CONFIRMED, "screens 1.0 against 2.0")
    assert step.describe() == "not confirmed: screens 1.0 against 2.0"
    # A decision of a newer version reads as it was written.
    newer = Step.from_json(_step_data(decision="kept-by-vote", detail="3 of 4"))
    assert (newer.decision, newer.describe()) == (Decision.LEGACY, "kept-by-vote: 3 of 4")


def test_a_damaged_verdict_decides_nothing_and_the_summary_still_reads() -> None:
    verdict = Verdict.reached(("toy", "a/bs8", "b/bs8"), True, [2.0, 2.1, 2.2], [1.0, 1.1, 1.2], "2026-12-03T07:25:31")
    assert verdict.decided == "on 2026-12-03 07:25 UTC" and verdict.screens == "2.0, 2.1, 2.2 against 1.0, 1.1, 1.2"
    damaged = [{**verdict.to_json(), "confirmed": "yes"}, 42, {"key": "toy"}]
    summary = TuneSummary.from_json({"confirmations": [verdict.to_json(), *damaged]})
    assert summary.confirmations == (verdict,) and summary.workloads == ()


def test_an_ablation_rows_label_and_note_come_from_the_row() -> None:
    assert AblationRow.label_of(RowKind.WINNER) == "winner"
    assert (
        AblationRow.label_of(RowKind.WITHOUT, "torch-compile", ["a"])
        == "without torch-compile (and a, which requires it)"
    )
    assert AblationRow.label_of(RowKind.WITHOUT, "x", ["a", "b"]) == "without x (and a, b, which require it)"


def test_from_json_refuses_a_summary_no_reader_could_use_naming_its_key() -> None:
    """As the results loader does (tests/test_results.py): the outputs take JSON from any caller."""
    with pytest.raises(WireError, match=r"run\.tune\.workloads\[1\]: expected an object, got str 'x'"):
        TuneSummary.from_json({"workloads": [_workload_data(), "x"]})


def _workload_data() -> Any:
    return {"key": "toy", "unit": "samples", "steps": [_step_data()], "winner": None, "ablation": []}
