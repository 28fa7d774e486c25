"""``ampsuite report A --compare B`` in the terminal: asv compare's table, the regression gate, a run against itself.

The runs are the published H200 run (reports/example/results.json) and a later copy of it in which some cells
got slower, faster or failing, written as valid results files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from records import write_sealed

from ampsuite import results
from ampsuite.cli import main
from ampsuite.contract.errors import ExitCode

EXAMPLE = Path(__file__).resolve().parent.parent / "reports" / "example" / "results.json"
SLOWER, FASTER, FAILING, UNCHANGED = (
    "resnet50/fp32/bs256",
    "bert-base/amp-bf16/bs128",
    "vit-b16/fp32/bs256",
    "gemm-8193/fp32/bs1",
)


RUN_ID = json.loads(EXAMPLE.read_text(encoding="utf-8"))["run"]["id"]
LATER_ID = "20261206T090000Z"
DOC = EXAMPLE.parents[2] / "docs" / "report.md"


def _scale(record: dict[str, Any], factor: float) -> None:
    """The record as if every step had taken ``factor`` times as long."""
    step_time = record["metrics"]["step_time"]
    for key in ("median", "mean", "min", "max", "p10", "p90", "p99", "iqr"):
        if step_time.get(key) is not None:
            step_time[key] *= factor
    step_time["samples"] = [s * factor for s in step_time["samples"]]
    record["metrics"]["throughput"] /= factor


def _on(record: dict[str, Any], gpu_uuid: str) -> None:
    record["machine"] = {
        "host": "h200-box",
        "device": "cuda",
        "gpu_uuid": gpu_uuid,
        "driver": "580",
        "max_sm_mhz": 1980,
    }


def _later(tmp_path: Path, slower: float = 1.2, failing: bool = True) -> Path:
    """A later run of the example suite: SLOWER ``slower`` times slower, FASTER 0.8x, FAILING failed."""
    doc = copy.deepcopy(results.load(EXAMPLE))
    doc["run"].update(id=LATER_ID, started="2026-12-06T09:00:00+00:00")
    cells = {r["id"]: r for r in doc["cells"]}
    _scale(cells[SLOWER], slower)
    _scale(cells[FASTER], 0.8)
    if failing:
        cells[FAILING].update(status="failed", evidence={"type": "RuntimeError", "message": "boom"}, metrics={})
    return write_sealed(tmp_path / "later.json", doc)


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by cell id: [mark, before, after, ratio, note]."""
    found = {}
    for line in out.splitlines():
        cols = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cols) == 6 and "/" in cols[4]:
            found[cols[4]] = [*cols[:4], cols[5]]
    return found


def test_compare_prints_the_changed_cells_as_asv_compare_does(tmp_path: Path, capsys) -> None:
    later = _later(tmp_path)
    assert main(["report", str(later), "--compare", str(EXAMPLE)]) == ExitCode.OK
    out = capsys.readouterr().out
    rows = _rows(out)
    assert set(rows) == {SLOWER, FASTER, FAILING}  # only what changed, regressions first
    assert list(rows) == [SLOWER, FAILING, FASTER]
    assert rows[SLOWER][0] == "+" and rows[SLOWER][3] == "1.20" and rows[SLOWER][1] == "241 ms ±0.06%"
    assert rows[FASTER][0] == "-" and rows[FASTER][3] == "0.80"
    assert rows[FAILING][:4] == ["!", "651 ms ±0.01%", "failed", "n/a"]
    n = len(results.load(EXAMPLE)["cells"])
    assert f"{n} cells: 2 regressed, 1 improved, {n - 3} unchanged; {n - 3} unmarked or ~ rows left out" in out
    assert f"before: {EXAMPLE} (run {RUN_ID}" in out and f"after: {later} (run {LATER_ID}" in out

    assert main(["report", str(later), "--compare", str(EXAMPLE), "--compare-all"]) == ExitCode.OK
    every = _rows(capsys.readouterr().out)
    assert len(every) == n and every[UNCHANGED][0] == "" and every[UNCHANGED][3] == "1.00"


def test_fail_on_regression_exits_1_and_names_the_cells(tmp_path: Path, capsys) -> None:
    later = str(_later(tmp_path))
    assert main(["report", later, "--compare", str(EXAMPLE), "--fail-on-regression"]) == ExitCode.CELLS_FAILED
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        f"2 cells regressed against {EXAMPLE} beyond the noise: "
        f"{SLOWER} (+20.00%), {FAILING} (passed before, now failed)"
    )
    # A threshold raises the bar for step times; a cell that fails now fails the gate whatever it says.
    assert main(["report", later, "--compare", str(EXAMPLE), "--fail-on-regression=25"]) == ExitCode.CELLS_FAILED
    assert capsys.readouterr().out.splitlines()[-1].endswith(f": {FAILING} (passed before, now failed)")


@pytest.mark.parametrize(("pct", "code"), [("25", ExitCode.OK), ("15%", ExitCode.CELLS_FAILED)])
def test_a_threshold_decides_on_a_slowdown_beyond_the_noise(tmp_path: Path, capsys, pct: str, code: int) -> None:
    later = str(_later(tmp_path, slower=1.2, failing=False))
    assert main(["report", later, "--compare", str(EXAMPLE), f"--fail-on-regression={pct}"]) == code
    last = capsys.readouterr().out.splitlines()[-1]
    bar = f"the noise and {float(pct.rstrip('%')):.1f}%"
    assert last == (
        f"no regression against {EXAMPLE} (beyond {bar})"
        if code == 0
        else f"1 cell regressed against {EXAMPLE} beyond {bar}: {SLOWER} (+20.00%)"
    )


def test_a_run_compared_with_itself_says_so_and_cannot_gate(tmp_path: Path, capsys) -> None:
    copy_of = tmp_path / "copy.json"
    copy_of.write_bytes(EXAMPLE.read_bytes())
    assert main(["report", str(copy_of), "--compare", str(EXAMPLE)]) == ExitCode.OK
    assert capsys.readouterr().out == (f"no change: {copy_of} and {EXAMPLE} hold the same run ({RUN_ID})\n")
    assert main(["report", str(copy_of), "--compare", str(EXAMPLE), "--fail-on-regression"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert f"hold the same run ({RUN_ID}), so no cell can regress" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([str(EXAMPLE)], "give -o DIR for the HTML report, or --compare RESULTS"),
        ([str(EXAMPLE), "-o", "site", "--fail-on-regression"], "--fail-on-regression needs --compare RESULTS"),
        ([str(EXAMPLE), "--compare", str(EXAMPLE), "--fail-on-regression=0"], "expected a percentage > 0, got '0'"),
        ([str(EXAMPLE), "--compare", str(EXAMPLE), "--fail-on-regression=x"], "expected a percentage such as 5"),
    ],
)
def test_report_usage_errors_are_one_line(argv: list[str], message: str, capsys) -> None:
    assert main(["report", *argv]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1


def test_a_change_between_two_machines_says_so(tmp_path: Path, capsys) -> None:
    before = copy.deepcopy(results.load(EXAMPLE))
    for record in before["cells"]:
        _on(record, "GPU-a")
    after = json.loads(_later(tmp_path).read_text())
    for record in after["cells"]:
        _on(record, "GPU-b" if record["id"] == SLOWER else "GPU-a")
    argv = [
        "report",
        str(write_sealed(tmp_path / "b.json", after)),
        "--compare",
        str(write_sealed(tmp_path / "a.json", before)),
    ]
    assert main(argv) == ExitCode.OK
    rows = _rows(capsys.readouterr().out)
    assert rows[SLOWER][4] == "+20.00% (threshold 1.00%); measured on two machines"
    assert rows[FASTER][4] == "-20.00% (threshold 1.00%)"


def test_a_gate_over_runs_with_no_cell_in_common_is_refused(tmp_path: Path, capsys) -> None:
    doc = copy.deepcopy(results.load(EXAMPLE))
    doc["run"]["id"] = LATER_ID
    for record in doc["cells"]:
        record["id"] = "other-" + record["id"]
    other = write_sealed(tmp_path / "other.json", doc)
    assert main(["report", str(other), "--compare", str(EXAMPLE), "--fail-on-regression"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert "have no cell in common, so no cell can regress" in err and len(err.splitlines()) == 1


def test_markdown_without_a_site_is_written(tmp_path: Path, capsys) -> None:
    summary = tmp_path / "s.md"
    assert main(["report", str(_later(tmp_path)), "--compare", str(EXAMPLE), "--markdown", str(summary)]) == 0
    assert summary.read_text(encoding="utf-8").startswith("#") and f"markdown: {summary}" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["index.html", "results.json", "summary.md"])
def test_markdown_inside_the_site_is_refused_before_anything_is_written(tmp_path: Path, capsys, name: str) -> None:
    site = tmp_path / "site"
    assert main(["report", str(EXAMPLE), "-o", str(site), "--markdown", str(site / name)]) == ExitCode.USAGE_ERROR
    assert "is inside the report's folder" in capsys.readouterr().err and not site.exists()


@pytest.mark.parametrize("broken", ["missing", "not-json"])
def test_an_asv_results_folder_that_cannot_be_read_is_one_line(tmp_path: Path, capsys, broken: str) -> None:
    folder = tmp_path / "asv-results"
    if broken == "not-json":
        (folder / "machine").mkdir(parents=True)
        (folder / "machine" / "abc123-env.json").write_text("{ not json", encoding="utf-8")
    code = main(["report", str(EXAMPLE), "-o", str(tmp_path / "site"), "--asv-results", str(folder)])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE_ERROR and len(err.splitlines()) == 1
    assert ("no such file or folder" if broken == "missing" else "cannot be read as JSON") in err


def test_a_signal_while_the_site_is_written_is_said_once_it_is_whole(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    import ampsuite.report

    real = ampsuite.report.render_site

    def interrupted_midway(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, while the pages are being written
        return real(*args, **kwargs)

    monkeypatch.setattr(ampsuite.report, "render_site", interrupted_midway)
    assert main(["report", str(EXAMPLE), "-o", str(tmp_path / "site")]) == ExitCode.INTERRUPTED
    assert (tmp_path / "site" / "index.html").is_file()
    err = capsys.readouterr().err
    assert err == "ampsuite: interrupted (SIGTERM) after its output was written whole\n"


def test_the_documented_comparison_is_the_commands_output(tmp_path: Path, capsys, monkeypatch) -> None:
    """docs/report.md's example of ``--compare --fail-on-regression`` is what the command prints for this later run."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(EXAMPLE.parents[2])
    later = _later(tmp_path)
    before = "reports/example/results.json"
    assert main(["report", str(later), "--compare", before, "--fail-on-regression"]) == ExitCode.CELLS_FAILED
    printed = capsys.readouterr().out.replace(str(later), "later.json").splitlines()
    text = DOC.read_text(encoding="utf-8")
    command = f"    $ ampsuite report later.json --compare {before} --fail-on-regression\n"
    block = text[text.index(command) + len(command) :].split("\n\n", 1)[0]
    assert [line.removeprefix("    ") for line in block.splitlines()] == printed
