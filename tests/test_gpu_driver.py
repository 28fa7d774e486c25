"""benchmarks/gpu/run.py, the lab driver: specs become ampsuite commands with the driver's outputs, run in order
within a budget, interrupted at their time limit, skipped once finished and resumed otherwise."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from conftest import toy_suite

from ampsuite import results

DRIVER = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu" / "run.py"


def _suite(name: str, **combinations: list[str]) -> str:
    """A toy suite named ``name`` of FP32 and ``combinations``."""
    return toy_suite(name, timeout=120, combinations={"fp32": [], **combinations})


@pytest.fixture(scope="module")
def gpu_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_run", DRIVER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_run"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def drive(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DRIVER), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_specs_become_commands_with_the_drivers_outputs(gpu_run: ModuleType, tmp_path: Path) -> None:
    specs = gpu_run.parse_specs(
        [
            "run tests/gpu/ddp.toml --no-peaks",
            "timeout=900 gpu=1 tune tests/gpu/tune-resnet50.toml --budget 1h",
            "selfcheck --device cuda --tuned @tune-resnet50",
            "name=fp32 max-batch tests/gpu/maxbatch.toml -k fp32",
        ]
    )
    assert [s.name for s in specs] == ["ddp", "tune-resnet50", "selfcheck-tune-resnet50", "fp32"]
    assert (specs[1].timeout, specs[1].gpu) == (900.0, "1")
    by_name = {s.name: s for s in specs}
    out = tmp_path / "lab"

    def line(i: int, seconds: float = 600.0) -> list[str]:
        return gpu_run.command_line(specs[i], out, by_name, "python", seconds)[3:]

    assert line(0) == [
        "run",
        "tests/gpu/ddp.toml",
        "--no-peaks",
        "-o",
        f"{out}/ddp/results.json",
        "--report-dir",
        f"{out}/ddp",
    ]
    # the tune's budget ends it before its time limit; a results file there is resumed
    (out / "tune-resnet50").mkdir(parents=True)
    (out / "tune-resnet50" / "results.json").write_text("{}")
    assert line(1) == [
        "tune",
        "tests/gpu/tune-resnet50.toml",
        "--budget",
        "570s",
        "--report-dir",
        f"{out}/tune-resnet50",
        "--resume",
    ]
    assert line(1, seconds=7200)[3] == "1h"  # a shorter budget of its own is kept
    assert line(2) == [
        "selfcheck",
        "--device",
        "cuda",
        "--tuned",
        f"{out}/tune-resnet50/results.json",
        "-o",
        f"{out}/selfcheck-tune-resnet50.json",
    ]
    assert line(3)[-2:] == ["-o", f"{out}/fp32.json"]
    seeded = gpu_run.parse_spec("from=old.json run a.toml")
    assert gpu_run.command_line(seeded, out, {}, "python", 60)[-1] == "--resume"


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["bench a.toml"], "COMMAND one of run, tune, selfcheck, max-batch"),
        (["run a.toml -o x.json"], "-o is the driver's"),
        (["tune a.toml --report-dir=x"], "--report-dir is the driver's"),
        (["run a.toml", "run b/a.toml"], "two specs are called 'a'"),
        (["selfcheck --tuned @tune-a"], "@tune-a names no earlier spec"),
        (["timeout=soon run a.toml"], "expected a duration"),
        (["from=x.json selfcheck"], "from= seeds the results file of run or tune"),
        (["name=../up run a.toml"], "is not a file name"),
    ],
)
def test_a_bad_spec_is_a_usage_error_in_one_line(
    gpu_run: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], specs: list[str], message: str
) -> None:
    assert gpu_run.main(["--out", str(tmp_path / "lab"), "--budget", "60", *specs]) == 4
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "lab").exists()


def test_a_dry_run_prints_the_commands_and_writes_nothing(
    gpu_run: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = gpu_run.main(
        ["--out", str(tmp_path / "lab"), "--budget", "15m", "--dry-run", "run a.toml", "selfcheck --cells @a"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"a: {sys.executable} -m ampsuite run a.toml -o {tmp_path}/lab/a/results.json" in printed
    assert f"selfcheck-a: {sys.executable} -m ampsuite selfcheck --cells {tmp_path}/lab/a/results.json" in printed
    assert not (tmp_path / "lab").exists()


@pytest.mark.slow
def test_a_cpu_suite_runs_into_the_folder_then_is_skipped_or_resumed(tmp_path: Path) -> None:
    (tmp_path / "toy.toml").write_text(_suite("toy", noop=["noop"]))
    # --no-again: a resumed run measures its untrusted fastest cell again, and which cell that is on a loaded
    # CPU is chance; what this test holds is that finished records are kept
    specs = [
        "run toy.toml --no-peaks --no-again",
        "selfcheck --device cpu --cells @toy -k fp32 --rounds 1 --min-ratio 0",
    ]
    args = ["--out", "lab", "--budget", "280", "--min-seconds", "5", "--grace", "10", *specs]
    proc = drive(tmp_path, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lab = tmp_path / "lab"
    doc = results.load(lab / "toy" / "results.json")
    assert [r["status"] for r in doc["cells"]] == ["passed", "passed"]
    assert (lab / "toy" / "index.html").exists()
    checks = json.loads((lab / "selfcheck-toy.json").read_text())["checks"]
    assert [c["name"] for c in checks] == ["cell toy/fp32/bs8"]
    assert "-m ampsuite run toy.toml --no-peaks --no-again -o" in (lab / "toy.log").read_text()
    assert "ratio" in (lab / "selfcheck-toy.log").read_text()
    (snapshot,) = json.loads((lab / "environment.json").read_text())["snapshots"]
    assert snapshot["python"]["python"] and snapshot["python"]["torch"] and snapshot["cpu_count"]
    assert "nvidia_smi" in snapshot
    state = json.loads((lab / "driver.json").read_text())["specs"]
    assert [(s["done"], [a["exit"] for a in s["attempts"]]) for s in state.values()] == [(True, [0]), (True, [0])]

    # the next call: what finished is skipped, and what runs again resumes from its results file
    proc = drive(tmp_path, *args, "--again", "toy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "selfcheck-toy  exit 0    finished in an earlier call" in proc.stdout
    log = (lab / "toy.log").read_text()
    assert log.count("== ") == 4 and " --resume (interrupted after" in log and "kept from the earlier run" in log
    assert [r["started"] for r in results.load(lab / "toy" / "results.json")["cells"]] == [
        r["started"] for r in doc["cells"]
    ]
    assert len(json.loads((lab / "environment.json").read_text())["snapshots"]) == 2


@pytest.mark.slow
def test_a_command_past_its_time_limit_is_interrupted_and_no_other_starts_late(tmp_path: Path) -> None:
    (tmp_path / "hang.toml").write_text(_suite("hang", hang=["fault-hang"], after=["noop"]))
    (tmp_path / "toy.toml").write_text(_suite("toy"))
    specs = ["timeout=25 run hang.toml --no-peaks -p ampsuite.plugins.faults", "run toy.toml --no-peaks"]
    proc = drive(
        tmp_path, "--out", "lab", "--budget", "60", "--reserve", "1", "--grace", "10", "--min-seconds", "30", *specs
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr  # INTERRUPTED: the worst, left for the next call
    assert "hang  exit 2    interrupted at its time limit" in proc.stdout
    assert "toy   exit 2    not started:" in proc.stdout
    lab = tmp_path / "lab"
    statuses = {r["id"]: r["status"] for r in results.load(lab / "hang" / "results.json")["cells"]}
    assert statuses == {"toy/fp32/bs8": "passed", "toy/hang/bs8": "interrupted", "toy/after/bs8": "interrupted"}
    assert "(time limit: interrupted)" in (lab / "hang.log").read_text()
    state = json.loads((lab / "driver.json").read_text())["specs"]
    assert state["hang"]["done"] is False and state["hang"]["attempts"][0]["timed_out"] is True
    assert state["toy"]["attempts"] == [] and not (lab / "toy").exists()


@pytest.mark.slow
def test_sigterm_to_the_driver_interrupts_the_command_once_and_starts_no_other(tmp_path: Path) -> None:
    (tmp_path / "hang.toml").write_text(_suite("hang", hang=["fault-hang"]))
    specs = ["run hang.toml --no-peaks -p ampsuite.plugins.faults", "run other.toml"]
    args = [sys.executable, str(DRIVER), "--out", "lab", "--budget", "300", "--grace", "20", *specs]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = tmp_path / "lab" / "hang.log"
    deadline = time.monotonic() + 120
    while "toy/fp32/bs8 PASSED" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None, "the first cell did not pass in 120 s"
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "SIGTERM: interrupting the running command" in out and "not started: the driver was stopped" in out
    assert "(driver stopped)" in log.read_text()
    statuses = [r["status"] for r in results.load(tmp_path / "lab" / "hang" / "results.json")["cells"]]
    assert statuses == ["passed", "interrupted"]
