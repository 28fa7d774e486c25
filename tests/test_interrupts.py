"""Signals and processes: one policy for SIGINT, SIGTERM and SIGHUP in every command, an interrupted run that
says in one line how to continue and exits at once, and no process of a cell left behind."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    FAST_MEASURE,
    REPO,
    SLOW_MEASURE,
    TOY,
    alive,
    children,
    cmdline,
    reaped,
    start_foreground,
    toy_suite,
    wait_for,
    wait_gone,
)
from rich.console import Console

from ampsuite import results
from ampsuite.contract.errors import ExitCode
from ampsuite.display import Display
from ampsuite.interrupted import resume_command
from ampsuite.run import devicepeaks, procs, signals
from ampsuite.summary import print_summary

# --- the policy ---------------------------------------------------------------------------------------------------


def test_the_first_signal_interrupts_and_every_later_one_is_ignored() -> None:
    before = {sig: signal.getsignal(sig) for sig in signals.SIGNALS}
    with signals.interrupts() as policy:
        with pytest.raises(KeyboardInterrupt, match="received SIGTERM"):
            signal.raise_signal(signal.SIGTERM)
            time.sleep(1)  # the handler runs here
        signal.raise_signal(signal.SIGINT)  # a second one: nothing stops the writing the first one started
        signal.raise_signal(signal.SIGTERM)
        time.sleep(0.01)
        assert policy.received == "SIGTERM"
    assert {sig: signal.getsignal(sig) for sig in signals.SIGNALS} == before


def test_a_signal_while_outputs_are_written_ends_the_command_after_them() -> None:
    with signals.interrupts() as policy:
        with signals.deferred():
            signal.raise_signal(signal.SIGTERM)
            time.sleep(0.01)
            written = True  # reached: the signal did not cut the block short
        assert written and policy.received == "SIGTERM"


def test_nested_policies_are_one() -> None:
    with signals.interrupts() as outer, signals.interrupts() as inner:
        assert inner is outer


# --- what an interrupted run says -------------------------------------------------------------------------------


def _interrupted_doc(healthy_run: Any, argv: list[str]) -> dict[str, Any]:
    """The healthy run as if Ctrl-C had stopped its second cell and twelve more had never started."""
    doc = results.load(healthy_run[0])
    doc["run"]["argv"] = argv
    stopped = doc["cells"][1]
    stopped.update(status="interrupted", evidence={"reason": "interrupted while running", "stderr_tail": ""})
    for n in range(12):
        waiting = dict(stopped, id=f"toy/later{n}/bs8")
        waiting["evidence"] = {"reason": "not started: the run was interrupted before this cell"}
        doc["cells"].append(waiting)
    return doc


def test_an_interrupted_run_ends_in_one_line_with_the_command_that_continues_it(healthy_run: Any) -> None:
    doc = _interrupted_doc(healthy_run, ["/venv/bin/ampsuite", "run", "my suite.toml", "-o", "r.json"])
    out = io.StringIO()
    print_summary(doc, Console(file=out, width=200, color_system=None, force_terminal=False))
    text = out.getvalue()
    assert "not started" not in text and "later" not in text
    (line,) = [line for line in text.splitlines() if line.startswith("interrupted:")]
    command = "ampsuite run 'my suite.toml' -o r.json --resume"
    assert line == f"interrupted: 1 cell stopped, 12 cells not run; continue with: {command}"


def test_progress_lines_leave_out_the_cells_an_interruption_never_started(
    healthy_run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _interrupted_doc(healthy_run, ["ampsuite", "tune", "s.toml", "--resume"])
    display = Display(Console(file=io.StringIO(), width=200), live=False)
    display.run_started(len(doc["cells"]), Path("r.json"))
    for i, record in enumerate(doc["cells"]):
        display.cell_finished(i, record)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and " INTERRUPTED " in lines[1] and lines[1].endswith(" interrupted while running")
    assert display.not_run == 12
    assert resume_command(doc) == "ampsuite tune s.toml --resume"
    assert resume_command({"run": {"argv": ["ampsuite", "show", "r.json"]}}) is None


@pytest.mark.parametrize("cached", [True, False])
def test_the_run_says_whether_the_device_peaks_came_from_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cached: bool
) -> None:
    cache = "/home/u/.cache/ampsuite/peaks-cpu.json"
    peaks = {"matmul_tflops": {"float32": 1.0}, "copy_gbps": 10.0, "cached": cached}
    monkeypatch.setattr(devicepeaks, "in_worker", lambda *args: ("result", {"peaks": peaks, "cache": cache}))
    said: list[str] = []
    assert devicepeaks.measure_peaks(None, "cpu", False, tmp_path / "log", said.append) == peaks  # type: ignore[arg-type]
    if cached:
        assert said == [f"device peaks: from the cache, {cache} (--refresh-peaks measures them again)"]
    else:
        assert said[0].startswith("device peaks: measured in ") and said[0].endswith(f" s, cached in {cache}")


# --- a cell's processes end with it -----------------------------------------------------------------------------


def test_kill_tree_ends_children_in_other_sessions_and_double_forks() -> None:
    """A process that starts a child in a session of its own and a double-forked grandchild, then waits."""
    script = textwrap.dedent(
        """\
        import os, subprocess, sys, time
        from ampsuite.run import procs
        procs.become_subreaper()
        a = subprocess.Popen(["sleep", "300"], start_new_session=True)
        if os.fork() == 0:
            if os.fork() == 0:
                os.setsid()
                os.execvp("sleep", ["sleep", "301"])
            os._exit(0)
        time.sleep(0.5)
        print(" ".join(str(p) for p in procs.descendants(os.getpid())), flush=True)
        time.sleep(300)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    root = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    with reaped(root):  # type: ignore[type-var]
        assert root.stdout is not None
        below = [int(p) for p in root.stdout.readline().split()]
        assert len(below) == 2 and all(alive(p) for p in below)  # both in its tree though neither is in its group
        killed = procs.kill_tree(root.pid)
        assert set(killed) == {root.pid, *below}
        root.wait(10)
        assert wait_gone(below, 10) == []


_PLUGIN = '''
import os
import subprocess
import time

from ampsuite import ReportSection, Technique, hookimpl


def _children(step):
    """A child as a build might start one, one in a session of its own, and a double-forked grandchild."""
    pids = [subprocess.Popen(["sleep", "300"]).pid, subprocess.Popen(["sleep", "301"], start_new_session=True).pid]
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", "302"])
        os._exit(0)
    with open(os.environ["CHILD_PIDS"], "a") as f:
        for pid in pids:
            f.write(f"{pid}\\n")
    return step


def leave(step, options):
    return _children(step)


def leave_and_hang(step, options):
    _children(step)
    time.sleep(600)


@hookimpl
def ampsuite_techniques():
    return [
        Technique(name="leaves-children", summary="starts processes", apply=leave),
        Technique(name="leaves-children-and-hangs", summary="starts processes, then hangs", apply=leave_and_hang),
    ]


@hookimpl
def ampsuite_report_sections(results):
    marker = os.environ.get("REPORT_MARKER")
    if marker:  # lets a test signal the command while its report is being written
        open(marker, "w").close()
        time.sleep(3)
    return [ReportSection(title="slow section", html="<p>slow</p>")]
'''


def _suite(
    name: str, combinations: dict[str, list[str]], measure: dict[str, Any] = FAST_MEASURE, timeout: float = 120
) -> str:
    """Three toy cells a combination (hidden 16, 17 and 18)."""
    return toy_suite(
        name, timeout=timeout, toy={**TOY, "hidden": [16, 17, 18]}, combinations=combinations, measure=measure
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "leaky.py").write_text(_PLUGIN)
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", **extra}


@pytest.mark.slow
def test_no_process_a_cell_started_outlives_it(tmp_path: Path) -> None:
    """Passed and timed out alike: a plain child, one in a new session and a double-forked one are all gone."""
    pids = tmp_path / "pids"
    (tmp_path / "s.toml").write_text(
        _suite("leaky", {"leaves": ["leaves-children"], "hangs": ["leaves-children-and-hangs"]}, timeout=8)
    )
    argv = ["run", "s.toml", "-p", "leaky", "-k", "hidden=16", "-o", "r.json", "--no-peaks", "--no-report"]
    argv.append("--no-again")  # one measurement a cell: two children each, counted below
    try:
        with (tmp_path / "out.txt").open("w") as out:  # a file: a child left holding a pipe would hang the test
            code = subprocess.call(
                [sys.executable, "-m", "ampsuite", *argv], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                timeout=300, env=_env(tmp_path, CHILD_PIDS=str(pids)),
            )  # fmt: skip
        assert code == ExitCode.CELLS_FAILED, (tmp_path / "out.txt").read_text()
        statuses = {r["combination"]: r["status"] for r in results.load(tmp_path / "r.json")["cells"]}
        assert statuses == {"leaves": "passed", "hangs": "timeout"}
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 4  # two children per cell; the double fork's grandchild is found by its environment
        assert wait_gone(started, 10) == []
        assert [cmdline(p) for p in _left_behind(tmp_path)] == []
    finally:
        for p in _left_behind(tmp_path):
            os.kill(p, signal.SIGKILL)


def _left_behind(tmp_path: Path) -> list[int]:
    """The test's sleep processes still alive."""
    pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    return [p for p in pids if cmdline(p).startswith("sleep 30") and alive(p) and _ours(p, tmp_path)]


def _ours(pid: int, tmp_path: Path) -> bool:
    """Whether ``pid`` has this test's environment (CHILD_PIDS under tmp_path)."""
    try:
        return str(tmp_path).encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


# --- real signals on a real run ----------------------------------------------------------------------------------


def _workers(proc: subprocess.Popen[str]) -> set[int]:
    servers = [c for c in children(proc.pid) if "forkserver" in cmdline(c)]
    return {w for s in servers for w in children(s)}


def _running_cell(proc: subprocess.Popen[str]) -> bool:
    """Whether a cell's worker runs under ``proc``'s fork server: one alive now and half a second later (the
    process that starts the fork server lives a few milliseconds)."""
    first = _workers(proc)
    if not first:
        return False
    time.sleep(0.5)
    return bool(first & _workers(proc))


def _stopped(proc: subprocess.Popen[str], at: float) -> tuple[str, str, float]:
    """stdout, stderr and the seconds from ``at`` to the end of ``proc``."""
    stdout, stderr = proc.communicate(timeout=120)
    return stdout, stderr, time.monotonic() - at


ABANDONED_START = """
import multiprocessing as mp, multiprocessing.forkserver as fs, os, sys
mp.get_context("forkserver").set_forkserver_preload(sys.argv[1:])
status, data = fs.connect_to_new_process([])
os.close(data)  # what a Ctrl-C between the request and the process data leaves: nothing written
print("child", fs.read_signed(status), "exit", fs.read_signed(status))
"""


@pytest.mark.parametrize("preload", [["ampsuite.run.abandoned_start"], []], ids=["preloaded", "cpython-alone"])
def test_a_start_abandoned_by_a_ctrl_c_leaves_the_fork_server_quiet(tmp_path: Path, preload: list[str]) -> None:
    """The race of a Ctrl-C inside ``Process.start()``, made certain: the fork server's child reads an empty pipe."""
    script = tmp_path / "abandon.py"
    script.write_text(ABANDONED_START)
    done = subprocess.run([sys.executable, str(script), *preload], capture_output=True, text=True, timeout=60)
    assert " exit 1" in done.stdout, done.stderr
    if preload:
        assert done.stderr == ""
    else:  # CPython's own behaviour, which the preloaded module changes
        assert "EOFError: Ran out of input" in done.stderr


def test_the_fork_server_hook_passes_every_other_exception_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing.spawn

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test: the import replaces it
    from ampsuite.run import abandoned_start

    assert sys.excepthook is abandoned_start.hook
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(abandoned_start, "_previous", lambda kind, value, tb: seen.append(kind))
    read, write = os.pipe()
    os.close(write)
    sentinel = os.dup(read)
    try:
        multiprocessing.spawn._main(read, sentinel)  # closes ``read``
    except EOFError:
        abandoned = sys.exc_info()
    finally:
        os.close(sentinel)
    try:
        raise EOFError("a worker's own read")
    except EOFError:
        elsewhere = sys.exc_info()
    for info in (abandoned, elsewhere, (ValueError, ValueError(), None)):
        abandoned_start.hook(*info)
    assert seen == [EOFError, ValueError]


@pytest.mark.slow
def test_ctrl_c_while_the_fork_server_starts_records_every_cell_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(_suite("startup", {"fp32": []}))
    with reaped(start_foreground(["run", "s.toml", "-o", "r.json", "--no-peaks", "--no-report"], tmp_path)) as proc:
        wait_for(lambda: any("forkserver" in cmdline(c) for c in children(proc.pid)), 120, "the fork server")
        os.killpg(proc.pid, signal.SIGINT)  # while it imports torch
        stdout, stderr, _ = _stopped(proc, time.monotonic())
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    doc = results.load(tmp_path / "r.json")
    assert {r["status"] for r in doc["cells"]} == {"interrupted"} and len(doc["cells"]) == 3
    assert doc["run"]["finished"] is not None
    assert "continue with: ampsuite run s.toml -o r.json --no-peaks --no-report --resume" in stdout


@pytest.mark.slow
def test_two_ctrl_c_end_the_run_once_with_one_line_and_at_once(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(_suite("twice", {"fp32": [], "noop": ["noop"]}, SLOW_MEASURE))
    with reaped(start_foreground(["run", "s.toml", "-o", "r.json", "--no-peaks", "--no-report"], tmp_path)) as proc:
        wait_for(lambda: _running_cell(proc), 120, "a running cell")
        at = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)  # an impatient second Ctrl-C, while the first one's records are written
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr, seconds = _stopped(proc, at)
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert stderr == "", stderr
    assert seconds < 10, f"{seconds:.1f} s from Ctrl-C to exit"
    doc = results.load(tmp_path / "r.json")
    assert len(doc["cells"]) == 6 and doc["run"]["finished"] is not None
    assert "not started" not in stdout
    (line,) = [line for line in stdout.splitlines() if line.startswith("interrupted:")]
    assert line.endswith("cells not run; continue with: ampsuite run s.toml -o r.json --no-peaks --no-report --resume")


@pytest.mark.slow
def test_sighup_interrupts_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(_suite("hup", {"fp32": []}, SLOW_MEASURE))
    with reaped(start_foreground(["run", "s.toml", "-o", "r.json", "--no-peaks", "--no-report"], tmp_path)) as proc:
        wait_for(lambda: _running_cell(proc), 120, "a running cell")
        os.kill(proc.pid, signal.SIGHUP)  # the terminal closed
        _, stderr, _ = _stopped(proc, time.monotonic())
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    doc = results.load(tmp_path / "r.json")
    assert doc["cells"][0]["status"] == "interrupted"
    assert doc["cells"][0]["evidence"]["reason"] == "interrupted while running"
    assert doc["run"]["finished"] is not None


@pytest.mark.slow
def test_sigterm_while_the_report_is_written_finishes_it_and_exits_2(tmp_path: Path) -> None:
    marker = tmp_path / "writing"
    (tmp_path / "s.toml").write_text(_suite("term", {"fp32": []}))
    argv = ["run", "s.toml", "-k", "hidden=16", "-p", "leaky", "-o", "r.json", "--no-peaks"]
    with reaped(start_foreground(argv, tmp_path, _env(tmp_path, REPORT_MARKER=str(marker)))) as proc:
        wait_for(marker.exists, 120, "the report being written")
        os.kill(proc.pid, signal.SIGTERM)
        stdout, stderr, _ = _stopped(proc, time.monotonic())
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert (tmp_path / "reports" / "term" / "index.html").exists()
    assert "report: reports/term/index.html" in stdout
    assert results.load(tmp_path / "r.json")["cells"][0]["status"] == "passed"


@pytest.mark.slow
def test_two_ctrl_c_during_a_tune_start_no_worker_and_print_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(_suite("tune2", {"fp32": [], "noop": ["noop"]}, SLOW_MEASURE))
    argv = ["tune", "s.toml", "-k", "hidden=16", "--budget", "120s", "--report-dir", "out"]
    with reaped(start_foreground(argv, tmp_path)) as proc:
        wait_for(lambda: _running_cell(proc), 120, "a running candidate")
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr, _ = _stopped(proc, time.monotonic())
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert stderr == "ampsuite: interrupted\n", stderr
    assert "interrupted: the search so far" in stdout
    doc = results.load(tmp_path / "out" / "results.json")
    assert doc["run"]["tune"]["incomplete"] is True


# --- on a GPU: compile workers, CUDA contexts -------------------------------------------------------------------

CUDA_SUITE = toy_suite(
    "cuda-lifetimes",
    device="cuda",
    timeout=600,
    toy={"batch_size": 64, "hidden": 256},
    combinations={"fp32": [], "leaves": ["amp-bf16", "leaves-children"], "compiled": ["amp-bf16", "torch-compile"]},
    measure={"warmup_steps": 2, "min_steps": 10, "max_steps": 50, "max_seconds": 1.0, "numerics_steps": 3},
)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
def test_a_cuda_run_leaves_no_process_and_ctrl_c_in_a_compile_ends_at_once(tmp_path: Path) -> None:
    """torch.compile's worker pool and a plugin's children end with their cells; Ctrl-C during a compile stops the
    run with the compiling cell's stacks, exit 2, no traceback, and nothing of the run left running."""
    (tmp_path / "s.toml").write_text(CUDA_SUITE)
    env = _env(tmp_path, CHILD_PIDS=str(tmp_path / "pids"))
    argv = ["run", "s.toml", "-p", "leaky", "-o", "r.json", "--no-peaks", "--no-report", "--no-again"]
    try:
        with reaped(start_foreground(argv, tmp_path, env)) as proc:
            stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == ExitCode.OK, stdout + stderr
        assert [cmdline(p) for p in _left_behind(tmp_path)] == []
        (tmp_path / "r.json").unlink()
        with reaped(start_foreground(argv, tmp_path, env)) as proc:
            wait_for(lambda: _records(tmp_path / "r.json") == 2 and _running_cell(proc), 600, "the compiling cell")
            family = [p for c in children(proc.pid) for p in [c, *children(c)]]
            at = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            _, stderr, seconds = _stopped(proc, at)
        assert proc.returncode == ExitCode.INTERRUPTED and "Traceback" not in stderr, stderr
        assert seconds < 30, f"{seconds:.1f} s from Ctrl-C to exit"
        assert wait_gone(family, 20) == [] and _left_behind(tmp_path) == []
        compiled = next(r for r in results.load(tmp_path / "r.json")["cells"] if r["combination"] == "compiled")
        assert compiled["status"] == "interrupted" and compiled["evidence"]["stacks"]
    finally:
        for p in _left_behind(tmp_path):
            os.kill(p, signal.SIGKILL)


def _records(path: Path) -> int:
    """How many records the results file being written holds (every write is atomic)."""
    try:
        return len(json.loads(path.read_text())["cells"])
    except (OSError, ValueError):
        return 0
