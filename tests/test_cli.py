"""The ``ampsuite`` command: version, list, dry run, show, and one-line errors with their exit codes.

Most tests call ``ampsuite.cli.main`` in this process; a few start the real
console script and ``python -m ampsuite`` to check that both entry points work.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import toy_suite

import ampsuite
from ampsuite import cli
from ampsuite.contract.errors import ExitCode

SUITE = toy_suite(
    "cli", toy={"batch_size": [8, 16]}, combinations={"fp32": [], "graphs": ["cuda-graphs"]}, measure=None
)
"""Four toy cells, two of which (CUDA graphs) a CPU skips."""


@pytest.fixture
def suite(write_suite) -> Path:
    return write_suite(SUITE, "cli.toml")


def _console_script() -> str:
    found = shutil.which("ampsuite", path=str(Path(sys.executable).parent)) or shutil.which("ampsuite")
    assert found, "the ampsuite console script is not installed (pip install -e .)"
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("entry", ["script", "module"])
def test_version(entry: str) -> None:
    argv = [_console_script()] if entry == "script" else [sys.executable, "-m", "ampsuite"]
    proc = _run([*argv, "--version"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"ampsuite {ampsuite.__version__}\n", "")


def test_list_shows_the_toy_workload_with_options_and_defaults(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # wide enough that no line wraps
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert (
        "workload toy (plugin toy) [unit: samples]: tiny MLP on random data; exercises the whole pipeline in seconds"
        in (out.splitlines())
    )
    for line in (
        "    features (int >= 1, default 32): input features",
        "    hidden (int >= 1, default 64): hidden width",
        "    layers (int >= 1, default 2): hidden layers",
        "    lr (float, default 0.01): SGD learning rate",
    ):
        assert line in out.splitlines()
    assert "technique noop (plugin noop) [order 50]" in out
    assert "technique cuda-graphs (plugin cuda_graphs) [order 90; requires cuda]" in out
    assert "technique channels-last (plugin channels_last) [order 20; workload traits conv]" in out
    kind = next(line for line in out.splitlines() if line.startswith("    kind ("))
    assert kind.startswith("    kind ('raise' | 'abort' | 'segfault' | ")
    assert ", default 'raise'): " in kind


@pytest.mark.parametrize("argv", [["-p", "no:noop", "list"], ["list", "-p", "no:noop"]])
def test_p_is_accepted_before_and_after_the_subcommand(capsys, argv: list[str]) -> None:
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "technique noop" not in out and "workload toy" in out


def test_list_keeps_one_record_per_line_when_piped() -> None:
    proc = _run([sys.executable, "-m", "ampsuite", "list"])
    assert proc.returncode == 0, proc.stderr
    expected = (
        "workload toy (plugin toy) [unit: samples]: tiny MLP on random data; exercises the whole pipeline in seconds"
    )
    assert expected in proc.stdout.splitlines()


def test_dry_run_lists_cells_with_skip_reasons_and_runs_nothing(suite: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "results.json"
    assert cli.main(["run", str(suite), "--dry-run", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    reason = "SKIP (cuda-graphs needs a CUDA device; this run is on cpu)"
    assert lines == [
        "toy/fp32/bs8  run",
        f"toy/graphs/bs8  {reason}",
        "toy/fp32/bs16  run",
        f"toy/graphs/bs16  {reason}",
        "4 cells: 2 to run, 2 skipped",
        "estimate: none (no earlier results of this suite to estimate from)",
    ]
    assert not out.exists()


def test_dry_run_honours_keyword(suite: Path, capsys) -> None:
    assert cli.main(["run", str(suite), "--dry-run", "-k", "fp32 and not bs16"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["toy/fp32/bs8  run", "1 cells: 1 to run, 0 skipped"]


@pytest.mark.slow
def test_show_prints_the_table_of_a_results_file(healthy_run, capsys) -> None:
    path, doc = healthy_run
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "healthy on CPU" in out
    for rec in doc["cells"]:
        row = next(line for line in out.splitlines() if rec["id"] in line)
        assert "passed" in row and "samples/s" in row
    assert re.fullmatch(r"2 passed in \d+ s", out.rstrip().splitlines()[-1])  # the counts, and how long it took


def test_show_of_a_corrupt_file_is_one_line_and_exit_4(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ampsuite-results", "version": 1, "cells": [')
    assert cli.main(["show", str(bad)]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"ampsuite: error: {bad}: corrupt results file (not strict JSON: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "{suite}", "-k", "(fp32"], "ampsuite: error: -k '(fp32': expression ends too early"),
        (["run", "{suite}", "-k", "fp32 bs8"], "ampsuite: error: -k 'fp32 bs8': unexpected 'bs8'"),
        (
            ["run", "{suite}", "--device", "tpu"],
            "ampsuite: error: run: argument --device: invalid choice: 'tpu'",
        ),
        (["frobnicate"], "ampsuite: error: argument command: invalid choice: 'frobnicate'"),
        (["run", "{dir}/missing.toml"], "ampsuite: error: {dir}/missing.toml: no such file"),
        (
            ["selfcheck", "--rounds", "0"],
            "ampsuite: error: selfcheck: argument --rounds: expected a whole number from 1 to 1,000, got '0'",
        ),
        (
            ["tune", "{suite}", "--budget", "1e9h"],
            "ampsuite: error: tune: argument --budget: the budget must be at most a week (604800 s), got '1e9h'",
        ),
    ],
    ids=["unclosed-paren", "two-words", "bad-device", "bad-command", "missing-suite", "no-rounds", "endless-budget"],
)
def test_usage_errors_are_one_line_and_exit_4(
    suite: Path, tmp_path: Path, capsys, argv: list[str], message: str
) -> None:
    argv = [a.format(suite=suite, dir=tmp_path) for a in argv]
    assert cli.main(argv) == ExitCode.USAGE_ERROR == 4
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(message.format(dir=tmp_path)), captured.err
    assert "Traceback" not in captured.out + captured.err


def test_bad_keyword_through_the_real_command(suite: Path) -> None:
    proc = _run([_console_script(), "run", str(suite), "-k", "and"])
    assert proc.returncode == 4
    assert proc.stderr == "ampsuite: error: -k 'and': unexpected 'and'\n"


def test_keyword_selecting_nothing_exits_5(suite: Path, capsys) -> None:
    assert cli.main(["run", str(suite), "--dry-run", "-k", "resnet"]) == ExitCode.NO_CELLS == 5
    assert capsys.readouterr().out.strip() == f"{suite}: no cells selected"


def test_a_run_whose_every_cell_is_skipped_exits_5_and_says_why(tmp_path: Path, write_suite, capsys) -> None:
    cuda_only = toy_suite("s", device=None, toy={"batch_size": 8}, measure=None, base_techniques=["cudnn-benchmark"])
    path = write_suite(cuda_only, "s.toml")
    out = tmp_path / "results.json"
    assert cli.main(["run", str(path), "--device", "cpu", "-o", str(out)]) == ExitCode.NO_CELLS
    text = " ".join(capsys.readouterr().out.split())
    assert "all 1 cells would be skipped, nothing to measure" in text and "cudnn-benchmark needs a CUDA device" in text
    assert not out.exists()


@pytest.mark.slow
def test_python_dash_m_suite_is_the_same_command(suite: Path) -> None:
    via_module = _run([sys.executable, "-m", "ampsuite", "run", str(suite), "--dry-run"])
    via_script = _run([_console_script(), "run", str(suite), "--dry-run"])
    assert via_module.returncode == via_script.returncode == 0
    assert via_module.stdout == via_script.stdout
    assert "4 cells: 2 to run, 2 skipped" in via_module.stdout


def test_exit_codes_are_stable() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "CELLS_FAILED": 1,
        "INTERRUPTED": 2,
        "INTERNAL_ERROR": 3,
        "USAGE_ERROR": 4,
        "NO_CELLS": 5,
        "OUTPUT_ERROR": 6,
    }


def test_results_are_readable_and_report_o_ships_them(healthy_run, tmp_path: Path, capsys) -> None:
    """results.json is written 0644 (not mkstemp's 0600), and ``report -o`` puts a copy in the site, linked."""
    path, _ = healthy_run
    assert path.stat().st_mode & 0o777 == 0o644
    site = tmp_path / "site"
    assert cli.main(["report", str(path), "-o", str(site)]) == 0
    assert (site / "results.json").read_bytes() == path.read_bytes()
    assert 'href="results.json"' in (site / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("missing", "code", "said"),
    [
        ("rich", ExitCode.USAGE_ERROR, "ampsuite: error: no module named 'rich': ampsuite requires 'rich<16,>=13'"),
        ("jinja2.sandbox", ExitCode.USAGE_ERROR, "ampsuite requires 'jinja2<4,>=3.1'"),
        ("scipy", ExitCode.INTERNAL_ERROR, "internal error"),  # an extra's: the code should have asked first
        ("ampsuite_no_such_module", ExitCode.INTERNAL_ERROR, "internal error"),
    ],
)
def test_a_requirement_missing_from_the_environment_is_one_line_not_a_bug(
    missing: str, code: ExitCode, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ampsuite import results

    def load(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    monkeypatch.setattr(results, "load", load)
    assert cli.main(["show", "reports/example/results.json"]) == code
    err = capsys.readouterr().err
    assert said in err
    if code == ExitCode.USAGE_ERROR:
        assert err.count("\n") == 1
