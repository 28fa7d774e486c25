"""The terminal: the final table at 80 columns and the progress lines of a run."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ampsuite.display import Display, line_for
from ampsuite.summary import print_summary

FIXTURE = Path(__file__).parent / "fixtures" / "results_a.json"
LONG_ID = "resnet[depth=152,width=48]/amp-bf16+channels-last/bs1024"
LONG_REASON = (
    "channels-last needs a workload with trait 'conv'; 'bert' has none, and this sentence goes on "
    "well past sixty characters so that any cut would show"
)


def _doc() -> dict[str, Any]:
    """results_a with one long id on a passed cell, one on a skipped cell with a long reason, one untrusted cell."""
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    passed = [r for r in doc["cells"] if r["status"] == "passed"]
    skipped = next(r for r in doc["cells"] if r["status"] == "skipped")
    passed[0]["id"] = LONG_ID
    skipped["id"] = LONG_ID.replace("bs1024", "bs2048")
    skipped["evidence"] = {"reason": LONG_REASON}
    passed[1]["metrics"]["step_time"]["noise"] = 1.0796  # +-107.96%: far above the 1% target
    return doc


def _render(doc: dict[str, Any], width: int = 80) -> str:
    out = io.StringIO()
    print_summary(doc, Console(file=out, width=width, color_system=None, force_terminal=False))
    return out.getvalue()


def test_80_columns_show_every_id_whole_and_every_reason_uncut() -> None:
    doc = _doc()
    text = _render(doc)
    lines = text.splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("└")) + 1]
    assert max(len(line) for line in table) <= 80, text
    for record in doc["cells"]:
        assert any(record["id"] in line for line in lines), (record["id"], text)
    # The reason is printed under the table on one line, for the terminal to wrap and grep to find: never cut.
    assert any(LONG_REASON in line for line in lines), text
    assert "left out at this width" in text  # the caption says which columns did not fit


def test_untrusted_figures_are_marked_in_the_table_and_explained() -> None:
    doc = _doc()
    untrusted = [r for r in doc["cells"] if r["status"] == "passed"][1]
    text = _render(doc, width=160)
    row = next(line for line in text.splitlines() if f" {untrusted['id']} " in line)
    assert "108.0%!" in row
    assert f"! {untrusted['id']}: untrusted, noise above the 1.0% target" in text


def test_the_last_line_says_how_long_the_run_took_and_since_when() -> None:
    doc = _doc()
    doc["run"].update(started="2026-01-01T10:00:00+00:00", finished="2026-01-01T10:10:00+00:00")
    doc["run"].pop("resumed", None)
    counts = next(line for line in _render(doc, width=200).splitlines() if line.startswith("16 passed"))
    assert counts.endswith(" interrupted in 10 min 0 s")
    doc["run"]["resumed"] = ["2026-01-01T10:08:30+00:00"]  # only the last invocation's time is known whole
    counts = next(line for line in _render(doc, width=200).splitlines() if line.startswith("16 passed"))
    assert counts.endswith(" interrupted in 1 min 30 s since its last --resume")


def test_a_wide_console_keeps_every_column() -> None:
    text = _render(_doc(), width=200)
    assert "left out" not in text
    for header in ("throughput", "vs FP32", "peak mem", "numerics"):
        assert header in text


@pytest.mark.parametrize("live", [False, True])
def test_progress_lines_mark_untrusted_nonfinite_and_resumed_cells(capsys, live: bool) -> None:
    doc = _doc()
    out = io.StringIO()
    display = Display(
        Console(file=out, width=200, color_system=None), live=live, noise_target=0.01, measures_peaks=True
    )
    display.run_started(3, Path("results.json"))
    kept = copy.deepcopy([r for r in doc["cells"] if r["status"] == "passed"][2])  # started in 2025: a resumed cell
    untrusted = [r for r in doc["cells"] if r["status"] == "passed"][1]
    new = copy.deepcopy(untrusted)
    new["started"] = "2999-01-01T00:00:00+00:00"
    new["numerics"]["nonfinite_step"] = 3
    display.cell_finished(0, kept)
    display.cell_finished(1, new)
    display.stop()
    text = out.getvalue() + capsys.readouterr().out
    lines = {line.split()[1]: line for line in text.splitlines() if line.startswith("[")}
    assert "(kept from the earlier run)" in lines[kept["id"]]
    assert "kept" not in lines[new["id"]]
    assert "+-107.96%" in lines[new["id"]] and "UNTRUSTED: noise above the 1.0% target" in lines[new["id"]]
    assert "LOSS NON-FINITE AT STEP 3" in lines[new["id"]]
    assert "device peak rates: from the cache, else measured" in text or live  # piped: what the first seconds are


def test_a_failure_says_in_which_phase_it_raised() -> None:
    # With several techniques in a combination, the phase names the one whose code raised.
    record = {"status": "failed", "evidence": {"type": "RuntimeError", "message": "boom", "phase": "apply fp8"}}
    assert line_for(record) == "RuntimeError in apply fp8: boom"
    assert (
        line_for({"status": "failed", "evidence": {"type": "RuntimeError", "message": "boom"}}) == "RuntimeError: boom"
    )


def test_a_log_keeps_each_line_whole(capsys: pytest.CaptureFixture[str]) -> None:
    # Piped into a log, "continue with: ampsuite run ... --resume" must stay one line to be copied whole.
    from ampsuite.display import make_console

    command = "continue with: ampsuite run " + "/a/long/path" * 20 + " --resume"
    make_console().print(command, markup=False)
    assert capsys.readouterr().out == command + "\n"
