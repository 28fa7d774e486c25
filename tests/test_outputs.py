"""Nothing measured is lost: an output never replaces an input or an earlier run without a backup, one oversized
record never makes a results file unreadable, and ``--resume`` keeps to its own suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_ampsuite, toy_suite

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode, UsageError
from ampsuite.results import store
from ampsuite.run.resultcheck import malformed


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _another_run(source: Path, out: Path) -> bytes:
    """A results file at ``out`` of another run than ``source``'s (its id and a figure changed); its bytes."""
    doc = results.load(source)
    doc["run"]["id"] += "-b"
    doc["cells"][0]["metrics"]["throughput"] *= 2
    results.ResultsWriter(out, doc)
    return out.read_bytes()


@pytest.fixture
def two_runs(healthy_run: Any, tmp_path: Path) -> tuple[Path, Path]:
    """Two results files of different runs, ``a.json`` and ``b.json``."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(healthy_run[0], a)
    _another_run(a, b)
    return a, b


# --- outputs never replace inputs -------------------------------------------------------------------------------


def test_a_report_into_the_folder_of_one_of_its_inputs_is_refused_and_both_runs_stay(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_runs
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(b, site / "results.json")
    held = (site / "results.json").read_bytes()
    code = cli.main(["report", str(a), str(site / "results.json"), "-o", str(site)])
    assert code == ExitCode.USAGE_ERROR
    assert "would replace this input" in _one_error(capsys)
    assert (site / "results.json").read_bytes() == held and results.load(a)["run"]["id"] != held
    assert not (site / "index.html").exists()


@pytest.mark.parametrize("which", ["--markdown", "--compare"])
def test_a_report_never_writes_over_a_file_it_reads(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    a, b = two_runs
    site = tmp_path / "site"
    if which == "--markdown":
        argv = ["report", str(a), str(b), "-o", str(site), "--markdown", str(b)]
    else:  # the comparison's reference lies where the site writes its summary
        site.mkdir()
        shutil.copy(b, site / "summary.md")
        argv = ["report", str(a), "-o", str(site), "--compare", str(site / "summary.md")]
    before = {p: p.read_bytes() for p in (a, b, site / "summary.md") if p.exists()}
    assert cli.main(argv) == ExitCode.USAGE_ERROR
    assert "would replace this input" in _one_error(capsys)
    assert {p: p.read_bytes() for p in before} == before


def test_a_report_keeps_the_earlier_run_its_folder_held_and_names_the_backup(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``ampsuite run -o elsewhere.json`` did to reports/NAME/results.json: the site's copy of the new run
    replaced the earlier run that file held, with no backup."""
    a, b = two_runs
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(b, site / "results.json")
    assert cli.main(["report", str(a), "-o", str(site)]) == ExitCode.OK
    assert (site / "results.json").read_bytes() == a.read_bytes()
    kept = [p for p in site.glob("results.*.json")]
    assert [p.read_bytes() for p in kept] == [b.read_bytes()]
    assert f"kept as {kept[0]}" in capsys.readouterr().out
    # rendered again from the same file: nothing new is set aside
    assert cli.main(["report", str(a), "-o", str(site)]) == ExitCode.OK
    assert len(list(site.glob("results.*.json"))) == 1


def test_a_report_rendered_from_its_own_copy_keeps_working(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """``ampsuite report reports/NAME/results.json -o reports/NAME``: the site's copy is the input itself."""
    a, b = two_runs
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(a, site / "results.json")
    assert cli.main(["report", str(site / "results.json"), str(b), "-o", str(site)]) == ExitCode.OK
    assert (site / "results.json").read_bytes() == a.read_bytes()
    assert (site / "results-2.json").read_bytes() == b.read_bytes()
    assert not list(site.glob("results.*.json"))


def test_selfcheck_output_over_the_file_it_checks_is_refused_before_checking(
    two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = two_runs
    before = a.read_bytes()
    assert cli.main(["selfcheck", "--cells", str(a), "-o", str(a)]) == ExitCode.USAGE_ERROR
    assert "would replace this input" in _one_error(capsys)
    assert a.read_bytes() == before


def test_a_run_whose_results_file_is_its_suite_file_is_refused(
    tmp_path: Path, write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(toy_suite("self", toy={"batch_size": 4}))
    text = suite.read_text()
    assert cli.main(["run", str(suite), "-o", str(suite), "--no-peaks", "--no-report"]) == ExitCode.USAGE_ERROR
    assert "would replace this input" in _one_error(capsys)
    assert suite.read_text() == text and not list(tmp_path.glob("suite.*.toml"))


def test_claim_refuses_a_link_to_an_input_and_sets_only_runs_aside(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = two_runs
    held = run.read_bytes()
    link = tmp_path / "link.json"
    link.symlink_to(run)
    with pytest.raises(UsageError):
        results.claim(link, [run])
    page = tmp_path / "summary.md"
    page.write_text("# an earlier summary\n")
    assert results.claim(page, [run]) is None and page.exists()  # derived: replaced in place
    kept = results.claim(run, [])
    assert kept is not None and not run.exists() and kept.read_bytes() == held


@pytest.mark.slow
def test_a_run_with_its_results_elsewhere_keeps_the_earlier_run_of_its_report_folder(
    healthy_run: Any, tmp_path: Path
) -> None:
    suite = tmp_path / "mine.toml"
    suite.write_text(_suite("mine"))
    earlier = tmp_path / "reports" / "mine" / "results.json"
    earlier.parent.mkdir(parents=True)
    held = _another_run(healthy_run[0], earlier)
    proc = run_ampsuite("run", "mine.toml", "-o", "int/results.json", "--no-peaks", cwd=tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert earlier.read_bytes() == (tmp_path / "int" / "results.json").read_bytes()
    kept = list(earlier.parent.glob("results.*.json"))
    assert [p.read_bytes() for p in kept] == [held]
    assert f"kept as {kept[0].relative_to(tmp_path)}" in proc.stdout


# --- a record is bounded where it enters ------------------------------------------------------------------------


def _suite(name: str, **combinations: list[str]) -> str:
    """Toy cells of batch 4 in FP32, no-op and ``combinations``."""
    return toy_suite(
        name, timeout=120, toy={"batch_size": 4}, combinations={"fp32": [], "noop": ["noop"], **combinations}
    )


_HUGE_NOTES = """
from ampsuite import Technique, hookimpl


def apply(step, options):
    step.notes["trace"] = "x" * 100_000_000
    return step


@hookimpl
def ampsuite_techniques():
    return [Technique(name="huge-notes", summary="writes 100 MB of notes", apply=apply)]
"""


def test_a_result_larger_than_a_record_may_be_is_refused_naming_its_part() -> None:
    result = {"status": "passed", "metrics": {"n": 1}, "notes": {"small": 1, "trace": "x" * (5 * 2**20)}}
    problem = malformed(result)
    assert problem is not None and "more than a record may hold (4,194,304)" in problem
    assert problem.endswith("notes.trace holds 5,242,882")


def test_a_record_that_would_make_the_file_unreadable_is_failed_and_the_others_stay(
    healthy_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = results.load(healthy_run[0])
    doc.pop("integrity")
    size = len(json.dumps(doc, indent=1))
    monkeypatch.setattr(store, "MAX_BYTES", size + 20_000)  # room for the records there are, not for a huge one
    out = tmp_path / "results.json"
    writer = results.ResultsWriter(out, doc)
    huge = dict(doc["cells"][0], id="toy/huge/bs8", notes={"trace": "x" * 50_000})
    assert doc["cells"][0]["status"] == "passed"
    writer.add(huge)
    loaded = results.load(out)
    assert len(loaded["cells"]) == len(doc["cells"]) and loaded["cells"][:-1] == doc["cells"][:-1]
    record = loaded["cells"][-1]
    assert (record["id"], record["status"], record["notes"]) == ("toy/huge/bs8", "failed", {})
    assert record["evidence"]["type"] == "OversizedRecord"
    assert "more than any results file may hold" in record["evidence"]["message"]


@pytest.mark.slow
def test_a_technique_with_100_mb_of_notes_fails_its_cell_and_the_file_stays_readable(tmp_path: Path) -> None:
    (tmp_path / "huge_notes.py").write_text(_HUGE_NOTES)
    (tmp_path / "big.toml").write_text(_suite("big", huge=["huge-notes"]))
    proc = run_ampsuite(
        "run", "big.toml", "-p", "huge_notes", "-o", "r.json", "--no-peaks", "--no-report", cwd=tmp_path,
        pythonpath=str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == ExitCode.CELLS_FAILED, proc.stderr
    doc = results.load(tmp_path / "r.json")  # show, --resume and report read it
    statuses = {r["combination"]: r["status"] for r in doc["cells"]}
    assert statuses == {"fp32": "passed", "noop": "passed", "huge": "failed"}
    huge = next(r for r in doc["cells"] if r["combination"] == "huge")
    assert "notes.trace holds 100,000,002" in huge["evidence"]["message"]
    assert (tmp_path / "r.json").stat().st_size < 1_000_000


# --- --resume keeps to its suite --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "tune"])
def test_resume_refuses_the_file_of_another_suite(
    healthy_run: Any, tmp_path: Path, write_suite: Any, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    other = write_suite(toy_suite("another", measure=None))
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "results.json"
    shutil.copy(healthy_run[0], out)
    before = out.read_bytes()
    if command == "run":
        argv = ["run", str(other), "-o", str(out), "--resume", "--no-peaks", "--no-report"]
    else:
        argv = ["tune", str(other), "--resume", "--report-dir", str(folder), "--budget", "30s"]
    assert cli.main(argv) == ExitCode.USAGE_ERROR
    err = _one_error(capsys)
    assert f"{out}: holds a run of suite 'healthy', not of 'another'" in err
    assert out.read_bytes() == before
