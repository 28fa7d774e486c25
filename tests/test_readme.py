"""The README's suite file runs as written: a reader who copies it gets cells, not an error or an empty run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_suite() -> str:
    """The indented TOML block under the README's "A suite file" heading."""
    section = README.read_text().split("\n## A suite file\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line[4:] for line in section.splitlines() if line.startswith("    ")) + "\n"


def ampsuite(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampsuite", *args], cwd=cwd, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_the_readme_suite_expands_into_cells_that_run_on_a_cpu(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(readme_suite())
    done = ampsuite("run", "mine.toml", "--dry-run", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "7 cells: 6 to run, 1 skipped" in done.stdout


@pytest.mark.slow
def test_the_readme_suite_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(readme_suite())
    done = ampsuite("run", "mine.toml", "-o", "out/results.json", "--report-dir", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cells = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
    assert sorted(c["status"] for c in cells) == ["passed"] * 6 + ["skipped"]
    assert (tmp_path / "out" / "index.html").is_file()


@pytest.mark.slow
def test_the_main_job_on_a_cpu_is_the_default_suite_ending_in_a_report_within_a_minute(tmp_path: Path) -> None:
    """`ampsuite run` with no suite, as the README's set-up runs it: the miniature CPU suite, every cell it can
    run passed, the HTML report written, in under a minute of the run's own time (device peaks included)."""
    import datetime as dt

    done = ampsuite("run", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads((tmp_path / "reports" / "cpu-default" / "results.json").read_text())
    assert {c["status"] for c in doc["cells"]} == {"passed", "skipped"}
    assert sum(c["status"] == "passed" for c in doc["cells"]) >= 15
    run = doc["run"]
    seconds = (dt.datetime.fromisoformat(run["finished"]) - dt.datetime.fromisoformat(run["started"])).total_seconds()
    assert seconds < 60, f"the CPU default suite took {seconds:.0f} s"
    assert (tmp_path / "reports" / "cpu-default" / "index.html").is_file()
    assert "report: reports/cpu-default/index.html" in done.stdout
