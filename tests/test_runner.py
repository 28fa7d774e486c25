"""The runner: every expanded cell ends in exactly one record, whatever its worker does.

Faulty cells come from the built-in ``inject-fault`` technique. Technique
options are per suite, so each fault kind gets its own small suite (a healthy
baseline, the faulty cell, a healthy cell after it); all of them run once per
module through ``ampsuite run`` in this process, which keeps one fork server
for every run. Killing and interrupting need a real ``ampsuite`` process, so
those tests start one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import (
    FAST_MEASURE,
    SLOW_MEASURE,
    TOY,
    QuietObserver,
    children,
    cmdline,
    descendants,
    healthy_suite,
    reaped,
    run_ampsuite,
    start_foreground,
    toy_suite,
    wait_for,
    wait_gone,
)

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode
from ampsuite.host import session
from ampsuite.run import runner
from ampsuite.run.runner import RunConfig

HANG_TIMEOUT = 10.0


def _vm_gib() -> float:
    """Address space this process already maps (a CUDA build of torch maps several GiB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) / 2**20
    raise AssertionError("no VmSize in /proc/self/status")


def fault_suite(kind: str, *, timeout: float = 120.0, memory_limit_gb: float = 0.0, **fault: Any) -> str:
    """FP32, the fault ``kind`` (more ``fault`` options: ``at=...``) and a healthy cell after it."""
    return toy_suite(
        f"fault-{kind}",
        timeout=timeout,
        memory_limit_gb=memory_limit_gb,
        combinations={"fp32": [], "fault": ["inject-fault"], "noop": ["noop"]},
        techniques={"inject-fault": {"kind": kind, **fault}},
    )


def run_cli(*args: str) -> int:
    return cli.main(["run", *args, "--no-report", "--no-peaks"])


# ---------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------


def _live_workers() -> list[int]:
    """Children of this process's fork server(s): the cell workers still alive."""
    servers = [c for c in children(os.getpid()) if "forkserver" in cmdline(c)]
    return [w for s in servers for w in children(s)]


def _finished_records(path: Path) -> list[dict[str, Any]]:
    """Terminal records of a results file being written by another process (writes are atomic)."""
    try:
        doc = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [r for r in doc["cells"] if r["status"] in results.TERMINAL]


# ---------------------------------------------------------------------------
# faults: one run per kind, shared by the tests below
# ---------------------------------------------------------------------------

FAULT_KINDS = ("raise", "abort", "segfault", "exit", "hang", "oom")


@pytest.fixture(scope="module")
def fault_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, dict[str, Any], list[str]]]]:
    """kind -> (exit code, results document as loaded from disk, expanded cell ids)."""
    root = tmp_path_factory.mktemp("faults")
    runs = {}
    for kind in FAULT_KINDS:
        if kind == "hang":
            text = fault_suite(kind, timeout=HANG_TIMEOUT)
        elif kind == "oom":
            # Room on top of what the worker maps after its imports: small, and still no healthy cell fails.
            text = fault_suite(kind, memory_limit_gb=1.0)
        else:
            text = fault_suite(kind)
        suite_path = root / f"{kind}.toml"
        suite_path.write_text(text)
        out = root / f"{kind}.json"
        code = run_cli(str(suite_path), "-o", str(out), "--data-dir", str(root / "data"))
        expected = [c.id for c in session.plan(suite_path, device="cpu").cells]
        runs[kind] = (code, results.load(out), expected)
    yield runs


def _by_combination(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["combination"]: r for r in doc["cells"]}


@pytest.mark.slow
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_one_record_per_expanded_cell(fault_runs, kind: str) -> None:
    _, doc, expected = fault_runs[kind]
    assert [r["id"] for r in doc["cells"]] == expected == ["toy/fp32/bs8", "toy/fault/bs8", "toy/noop/bs8"]
    assert doc["run"]["finished"] is not None


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_healthy_cells_pass_around_a_faulty_one(fault_runs, kind: str) -> None:
    cells = _by_combination(fault_runs[kind][1])
    for combination in ("fp32", "noop"):
        record = cells[combination]
        assert record["status"] == "passed", record["evidence"]
        assert record["evidence"] is None
        assert record["metrics"]["step_time"]["n"] >= 3


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_failing_cell_makes_the_exit_code_1(fault_runs, kind: str) -> None:
    assert fault_runs[kind][0] == ExitCode.CELLS_FAILED == 1


def test_raise_is_failed_with_type_and_traceback(fault_runs) -> None:
    record = _by_combination(fault_runs["raise"][1])["fault"]
    assert record["status"] == "failed"
    ev = record["evidence"]
    assert (ev["type"], ev["message"], ev["phase"]) == ("InjectedFault", "injected fault", "numerics")
    tail = ev["traceback"].splitlines()
    assert tail[-1] == "ampsuite.plugins.faults.InjectedFault: injected fault"
    assert any("plugins/_faults.py" in line for line in tail)
    assert len(tail) <= 30


@pytest.mark.parametrize(("kind", "signame", "exitcode"), [("abort", "SIGABRT", -6), ("segfault", "SIGSEGV", -11)])
def test_killed_worker_is_crashed_with_its_signal(fault_runs, kind: str, signame: str, exitcode: int) -> None:
    record = _by_combination(fault_runs[kind][1])["fault"]
    assert record["status"] == "crashed"
    ev = record["evidence"]
    assert (ev["signal"], ev["exitcode"]) == (signame, exitcode)
    assert isinstance(ev["stderr_tail"], str)


@pytest.mark.parametrize("kind", ["abort", "segfault"])
def test_crash_evidence_shows_where_the_worker_died(fault_runs, kind: str) -> None:
    tail = _by_combination(fault_runs[kind][1])["fault"]["evidence"]["stderr_tail"]
    assert "plugins/_faults.py" in tail
    assert "Fatal Python error" in tail


def test_worker_exiting_without_a_result_is_crashed_with_its_exit_code(fault_runs) -> None:
    ev = _by_combination(fault_runs["exit"][1])["fault"]["evidence"]
    assert _by_combination(fault_runs["exit"][1])["fault"]["status"] == "crashed"
    assert (ev["exitcode"], ev["signal"]) == (3, None)


def test_hang_is_timeout_and_leaves_no_worker(fault_runs) -> None:
    record = _by_combination(fault_runs["hang"][1])["fault"]
    assert record["status"] == "timeout"
    assert record["evidence"]["timeout_seconds"] == HANG_TIMEOUT
    assert "stderr_tail" in record["evidence"]
    assert HANG_TIMEOUT <= record["wall_seconds"] < HANG_TIMEOUT + 30
    assert wait_gone(_live_workers(), 10) == []


def test_exhausted_memory_is_oom(fault_runs) -> None:
    record = _by_combination(fault_runs["oom"][1])["fault"]
    assert record["status"] == "oom", record["evidence"]
    ev = record["evidence"]
    assert "allocate" in ev["message"].lower()
    assert ev["memory"]["max_rss_bytes"] > 0


def test_fault_at_apply_is_failed_in_the_apply_phase(tmp_path: Path, write_suite) -> None:
    path = write_suite(fault_suite("raise", at="apply"))
    out = tmp_path / "r.json"
    assert run_cli(str(path), "-o", str(out), "-k", "fault") == 1
    (record,) = results.load(out)["cells"]
    assert (record["status"], record["evidence"]["phase"]) == ("failed", "apply inject-fault")


# ---------------------------------------------------------------------------
# skips, exit codes, in-process mode, existing files
# ---------------------------------------------------------------------------


def skipping_suite(**suite_keys: Any) -> str:
    """FP32, and CUDA graphs, which a CPU skips."""
    return toy_suite("skipping", combinations={"fp32": [], "graphs": ["cuda-graphs"]}, **suite_keys)


def graphs_only(name: str, *batch_sizes: int) -> str:
    """Only CUDA graphs, at ``batch_sizes``: every cell skipped on a CPU."""
    return toy_suite(
        name, toy={"batch_size": list(batch_sizes)}, combinations={"graphs": ["cuda-graphs"]}, measure=None
    )


SKIPPING_SUITE = skipping_suite()
ALL_SKIPPED_SUITE = graphs_only("all-skipped", 8, 16)


def test_skipped_cell_has_its_reason_and_exit_code_is_0(tmp_path: Path, write_suite) -> None:
    out = tmp_path / "r.json"
    assert run_cli(str(write_suite(SKIPPING_SUITE)), "-o", str(out)) == ExitCode.OK == 0
    passed, skipped = results.load(out)["cells"]
    assert (passed["id"], passed["status"]) == ("toy/fp32/bs8", "passed")
    assert (skipped["id"], skipped["status"]) == ("toy/graphs/bs8", "skipped")
    assert skipped["evidence"] == {"reason": "cuda-graphs needs a CUDA device; this run is on cpu"}
    assert skipped["metrics"] == {}


def test_keyword_selecting_nothing_exits_5(tmp_path: Path, write_suite, capsys) -> None:
    out = tmp_path / "r.json"
    assert run_cli(str(write_suite(SKIPPING_SUITE)), "-o", str(out), "-k", "no-such-cell") == ExitCode.NO_CELLS == 5
    assert "no cells selected" in capsys.readouterr().out
    assert not out.exists()


def test_in_process_mode_gives_passed_records(tmp_path: Path, write_suite) -> None:
    out = tmp_path / "r.json"
    path = write_suite(fault_suite("raise"))
    assert run_cli(str(path), "-o", str(out), "--in-process", "-k", "not fault") == 0
    doc = results.load(out)
    assert [(r["id"], r["status"]) for r in doc["cells"]] == [("toy/fp32/bs8", "passed"), ("toy/noop/bs8", "passed")]
    assert all(r["metrics"]["step_time"]["n"] >= 3 for r in doc["cells"])


def test_in_process_mode_records_a_raising_cell_as_failed(tmp_path: Path, write_suite) -> None:
    out = tmp_path / "r.json"
    assert run_cli(str(write_suite(fault_suite("raise"))), "-o", str(out), "--in-process", "-k", "fault") == 1
    (record,) = results.load(out)["cells"]
    assert (record["status"], record["evidence"]["type"]) == ("failed", "InjectedFault")


def test_existing_results_are_renamed_not_overwritten(tmp_path: Path, write_suite) -> None:
    suite_path = str(write_suite(fault_suite("raise")))
    out = tmp_path / "results.json"
    one_cell = ("--in-process", "-k", "toy/fp32")
    assert run_cli(suite_path, "-o", str(out), *one_cell) == 0
    first = results.load(out)
    os.utime(out, (1_700_000_000, 1_700_000_000))
    assert run_cli(suite_path, "-o", str(out), *one_cell) == 0
    backups = sorted(p.name for p in tmp_path.glob("results.*.json"))
    assert backups == ["results.20231114T221320Z.json"]
    assert results.load(tmp_path / backups[0]) == first


def test_two_backups_with_the_same_mtime_are_both_kept(tmp_path: Path, write_suite, observer) -> None:
    plan = session.plan(write_suite(ALL_SKIPPED_SUITE), device="cpu")
    out = tmp_path / "results.json"
    for i in range(4):
        if out.exists():
            os.utime(out, (1_700_000_000, 1_700_000_000))
        config = RunConfig(output=out, measure_peaks=False, argv=[f"run-{i}"])
        runner.run_plan(plan, config, observer)
    kept = sorted(results.load(p)["run"]["argv"][0] for p in tmp_path.glob("results*.json"))
    assert kept == ["run-0", "run-1", "run-2", "run-3"]
    assert sorted(p.name for p in tmp_path.glob("results.*.json")) == [
        "results.20231114T221320Z-1.json",
        "results.20231114T221320Z-2.json",
        "results.20231114T221320Z.json",
    ]


# ---------------------------------------------------------------------------
# Ctrl-C outside a worker's wait, unsendable results, the memory limit
# ---------------------------------------------------------------------------


class InterruptingObserver(QuietObserver):
    """Raises KeyboardInterrupt (as Ctrl-C would) once, from the observer call named ``at``."""

    def __init__(self, at: str, on_call: int = 1) -> None:
        super().__init__()
        self.at, self.on_call, self.calls = at, on_call, 0

    def _maybe(self, name: str) -> None:
        if name == self.at:
            self.calls += 1
            if self.calls == self.on_call:
                raise KeyboardInterrupt

    def run_started(self, total: int, path: Path) -> None:
        super().run_started(total, path)
        self._maybe("run_started")

    def cell_started(self, index: int, cell: Any) -> None:
        super().cell_started(index, cell)
        self._maybe("cell_started")

    def cell_finished(self, index: int, record: dict[str, Any]) -> None:
        super().cell_finished(index, record)
        self._maybe("cell_finished")


THREE_SKIPPED_SUITE = graphs_only("three-skipped", 8, 16, 32)
THREE_SKIPPED_IDS = ["toy/graphs/bs8", "toy/graphs/bs16", "toy/graphs/bs32"]
SKIP_REASON = "cuda-graphs needs a CUDA device; this run is on cpu"


def _run_interrupted(plan: Any, out: Path, observer: Any, **config: Any) -> tuple[dict[str, Any], bool]:
    try:
        return runner.run_plan(plan, RunConfig(output=out, argv=["test"], **config), observer)
    except KeyboardInterrupt:  # never let it reach pytest, which would stop the whole session
        pytest.fail("KeyboardInterrupt escaped run_cells")


def test_ctrl_c_between_cells_records_the_rest_as_interrupted(tmp_path: Path, write_suite) -> None:
    """Ctrl-C while the display shows a finished cell: that record stays, every later cell is interrupted."""
    plan = session.plan(write_suite(THREE_SKIPPED_SUITE), device="cpu")
    out = tmp_path / "results.json"
    observer = InterruptingObserver("cell_finished")
    doc, interrupted = _run_interrupted(plan, out, observer, measure_peaks=False)
    assert interrupted
    on_disk = results.load(out)
    assert [(r["id"], r["status"]) for r in on_disk["cells"]] == [
        (THREE_SKIPPED_IDS[0], "skipped"),
        (THREE_SKIPPED_IDS[1], "interrupted"),
        (THREE_SKIPPED_IDS[2], "interrupted"),
    ]
    assert on_disk["cells"][0]["evidence"] == {"reason": SKIP_REASON}
    for record in on_disk["cells"][1:]:
        assert record["evidence"] == {"reason": "not started: the run was interrupted before this cell"}
    assert on_disk["run"]["finished"] is not None
    assert on_disk["cells"] == doc["cells"]
    assert [status for _, status in observer.finished] == ["skipped", "interrupted", "interrupted"]


def test_ctrl_c_before_a_cell_starts_records_it_as_interrupted(tmp_path: Path, write_suite) -> None:
    """Ctrl-C while the display announces a cell: the cell never ran, so it and the rest are interrupted."""
    plan = session.plan(write_suite(SKIPPING_SUITE), device="cpu")
    out = tmp_path / "results.json"
    doc, interrupted = _run_interrupted(plan, out, InterruptingObserver("cell_started"), in_process=True)
    assert interrupted
    assert [(r["id"], r["status"]) for r in results.load(out)["cells"]] == [
        ("toy/fp32/bs8", "interrupted"),
        ("toy/graphs/bs8", "interrupted"),
    ]
    assert doc["cells"][0]["metrics"] == {}


def test_ctrl_c_while_peaks_are_measured_interrupts_every_cell(tmp_path: Path, write_suite, monkeypatch) -> None:
    """Ctrl-C during the peak measurement is not swallowed: no cell runs and the command exits 2 with a summary."""
    from ampsuite.run import runner

    def interrupted_peaks(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_measure_peaks", interrupted_peaks)
    out = tmp_path / "results.json"
    path = str(write_suite(SKIPPING_SUITE))
    try:
        code = cli.main(["run", path, "-o", str(out), "--no-report"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the command")
    assert code == ExitCode.INTERRUPTED == 2
    doc = results.load(out)
    assert [(r["id"], r["status"]) for r in doc["cells"]] == [
        ("toy/fp32/bs8", "interrupted"),
        ("toy/graphs/bs8", "interrupted"),
    ]
    assert all(r["metrics"] == {} for r in doc["cells"])
    assert doc["run"]["finished"] is not None


def test_ctrl_c_leaves_the_signal_handlers_as_they_were(tmp_path: Path, write_suite) -> None:
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    plan = session.plan(write_suite(THREE_SKIPPED_SUITE), device="cpu")
    _run_interrupted(plan, tmp_path / "r.json", InterruptingObserver("cell_finished"), measure_peaks=False)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (lambda: None, "notes.value: a function is not JSON data"),
        # A tensor pickles through torch's shared-memory reductions and was lost when the worker exited.
        (torch.ones(3), "notes.value: a Tensor is not JSON data"),
    ],
)
def test_a_result_that_is_not_json_is_refused_by_the_worker_itself(tmp_path: Path, monkeypatch, value, problem) -> None:
    """A plugin that leaves a non-JSON value in the result: the worker sends the failed MalformedResult outcome."""
    import multiprocessing as mp

    from ampsuite.run import worker
    from ampsuite.run.resultcheck import malformed

    def run_cell(payload: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        os.write(1, b"the plugin was here\n")  # fd 1: pytest replaced sys.stdout in this process
        return {"status": "passed", "metrics": {}, "notes": {"value": value}, "warnings": []}

    monkeypatch.setattr(worker, "run_cell", run_cell)  # inherited by the forked worker below
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    payload = {"log_path": str(tmp_path / "worker.log"), "cell": {"device": "cpu"}}
    proc = ctx.Process(target=worker.main, args=(payload, sender))
    proc.start()
    sender.close()
    try:
        assert receiver.poll(60), "the worker sent nothing"
        result = receiver.recv()
    finally:
        proc.join(30)
        receiver.close()
    assert proc.exitcode == 0
    assert malformed(result) is None
    assert result["status"] == "failed"
    ev = result["evidence"]
    assert (ev["type"], ev["message"]) == ("MalformedResult", f"malformed result from worker: {problem}")
    assert "the plugin was here" in ev["stderr_tail"]


def test_memory_limit_is_room_above_what_the_worker_already_maps(tmp_path: Path, write_suite) -> None:
    """A CUDA build of torch maps ~3 GiB at import: a limit below that must still leave the cell its room."""
    assert _vm_gib() > 0.25  # this test process maps more than the limit below (torch is imported)
    out = tmp_path / "r.json"
    assert run_cli(str(write_suite(skipping_suite(memory_limit_gb=0.25))), "-o", str(out)) == 0
    statuses = [(r["combination"], r["status"]) for r in results.load(out)["cells"]]
    assert statuses == [("fp32", "passed"), ("graphs", "skipped")]


LOCKING_PLUGIN = """
import multiprocessing

from ampsuite import Technique, hookimpl

LOCKS = []


def apply(step, options):
    # Kept alive as tqdm keeps its one lock a process on a class attribute (made for the bar torch.fx's
    # interpreter shows while torch.compile traces).
    LOCKS.append(multiprocessing.RLock())
    step.notes["start_method"] = multiprocessing.get_start_method()
    return step


@hookimpl
def ampsuite_techniques():
    return [Technique(name="mp-lock", summary="a multiprocessing lock of the default context", apply=apply)]
"""


@pytest.mark.slow
def test_a_cell_runs_with_the_platforms_start_method_and_leaks_no_semaphore(tmp_path: Path) -> None:
    """A cell's own processes start as a plain script's would (fork on Linux before Python 3.14), and there a library
    lock the cell makes is not reported leaked when its worker leaves without the interpreter's teardown."""
    (tmp_path / "locking.py").write_text(LOCKING_PLUGIN, encoding="utf-8")
    (tmp_path / "suite.toml").write_text(
        toy_suite("locks", combinations={"locked": ["mp-lock"]}, measure=FAST_MEASURE), encoding="utf-8"
    )
    args = ["run", "suite.toml", "-p", "locking", "-o", "r.json", "--no-report", "--no-peaks", "--no-again"]
    run = run_ampsuite(*args, cwd=tmp_path, pythonpath=tmp_path)
    assert run.returncode == 0, run.stderr
    (record,) = results.load(tmp_path / "r.json")["cells"]
    platform = multiprocessing.get_all_start_methods()[0]
    assert record["notes"]["start_method"] == platform
    if platform == "fork":  # a lock of a fork context is unlinked as it is made; forkserver's (Python 3.14) is not
        assert "leaked semaphore" not in run.stderr


FORKED_CALLER = """
import os
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.run.forkserver import worker_context


def main():
    registry = load_registry(PluginSettings(autoload=False))
    print("runner", worker_context(registry).get_start_method(), flush=True)
    pid = os.fork()
    if pid == 0:  # a fork-based process pool's task: it inherits the server it may not use
        ctx = worker_context(registry)
        cell = ctx.Process(target=os.getpid)
        cell.start()
        cell.join(60)
        print("fork", ctx.get_start_method(), "cell exit", cell.exitcode, flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("runner", worker_context(registry).get_start_method(), "fork status", status, flush=True)


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_a_fork_of_the_runner_starts_its_cells_by_spawn_and_the_runner_keeps_its_fork_server(tmp_path: Path) -> None:
    """The fork server's owner is remembered: a forked child (whatever the executor's pool does) gets spawn."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED_CALLER, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    if not sys.platform.startswith("linux"):
        pytest.skip("the fork server is used on Linux only")
    lines = done.stdout.splitlines()
    assert lines == ["runner forkserver", "fork spawn cell exit 0", "runner forkserver fork status 0"], done.stderr


def test_limit_memory_adds_to_the_mapped_size(tmp_path: Path) -> None:
    """What the worker sets, checked in a fork so that this process keeps its own limit."""
    import multiprocessing as mp
    import resource

    from ampsuite.run import worker

    def child(conn: Any) -> None:
        before = worker.mapped_bytes()
        limit = worker.limit_memory(2**28)
        conn.send((before, limit, resource.getrlimit(resource.RLIMIT_AS)[0]))
        os._exit(0)

    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child, args=(sender,))
    proc.start()
    sender.close()
    assert receiver.poll(60)
    before, limit, soft = receiver.recv()
    proc.join(30)
    assert before is not None and before > 2**28
    assert soft == limit
    assert before + 2**28 <= limit <= before + 2**28 + 2**26  # VmSize may grow a little between the two reads


# ---------------------------------------------------------------------------
# SIGKILL and SIGINT on a real ampsuite process
# ---------------------------------------------------------------------------

SLOW_SUITE = toy_suite("slow", timeout=120, toy={**TOY, "hidden": [16, 17, 18]}, measure=SLOW_MEASURE)
SLOW_IDS = ["toy[hidden=16]/fp32/bs8", "toy[hidden=17]/fp32/bs8", "toy[hidden=18]/fp32/bs8"]


def _start(suite_path: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    return start_foreground(["run", str(suite_path), "-o", str(out), "--no-report", "--no-peaks", *extra], out.parent)


def _resume(suite_path: Path, out: Path) -> tuple[int, dict[str, Any], str]:
    # --no-again: these tests hold the resumed run to the records it kept; the second pass of a workload's
    # untrusted fastest cell (which a resumed run also makes) would measure a kept one again.
    proc = _start(suite_path, out, "--resume", "--no-again")
    with reaped(proc):
        stdout, stderr = proc.communicate(timeout=240)
    return proc.returncode, results.load(out), stdout + stderr


@pytest.mark.slow
def test_sigkill_keeps_finished_records_and_resume_completes(tmp_path: Path, write_suite) -> None:
    suite_path = write_suite(SLOW_SUITE)
    out = tmp_path / "results.json"
    with reaped(_start(suite_path, out)) as proc:
        wait_for(lambda: _finished_records(out), 240, "a finished record")
        before = _finished_records(out)
        family = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL

    doc = results.load(out)  # a complete, valid file: every write was atomic
    assert doc["run"]["finished"] is None
    kept = {r["id"]: r for r in doc["cells"]}
    for record in before:
        assert kept[record["id"]] == record
    assert len(doc["cells"]) < len(SLOW_IDS)
    assert family, "the killed run had no worker or fork server"
    assert wait_gone(family) == [], "processes of the killed run are still alive"

    code, resumed, output = _resume(suite_path, out)
    assert code == 0, output
    assert [r["id"] for r in resumed["cells"]] == SLOW_IDS
    assert all(r["status"] == "passed" for r in resumed["cells"])
    for record in before:
        assert next(r for r in resumed["cells"] if r["id"] == record["id"]) == record
    assert resumed["run"]["id"] == doc["run"]["id"]
    assert resumed["run"]["finished"] is not None


@pytest.mark.slow
def test_sigint_interrupts_records_the_rest_and_resume_reruns_only_them(tmp_path: Path, write_suite) -> None:
    suite_path = write_suite(SLOW_SUITE)
    out = tmp_path / "results.json"
    with reaped(_start(suite_path, out)) as proc:
        first_workers: set[int] = set()

        def second_cell_running() -> bool:
            grandchildren = {g for c in children(proc.pid) for g in children(c)}
            if not _finished_records(out):
                first_workers.update(grandchildren)
                return False
            return bool(grandchildren - first_workers)

        wait_for(second_cell_running, 240, "the second cell's worker")
        family = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED == 2, stderr
    assert "Traceback" not in stderr

    doc = results.load(out)
    assert [(r["id"], r["status"]) for r in doc["cells"]] == [
        (SLOW_IDS[0], "passed"),
        (SLOW_IDS[1], "interrupted"),
        (SLOW_IDS[2], "interrupted"),
    ]
    assert doc["cells"][1]["evidence"]["reason"] == "interrupted while running"
    # where the worker was when it was stopped: in the measuring worker's code, not only the parent's
    assert re.search(r'File ".*suite/run/worker\.py", line \d+ in ', doc["cells"][1]["evidence"]["stacks"])
    assert doc["cells"][2]["evidence"]["reason"] == "not started: the run was interrupted before this cell"
    assert "1 passed, 2 interrupted" in stdout  # the summary is still printed
    assert doc["run"]["finished"] is not None
    assert wait_gone(family) == [], "the interrupted cell's worker is still alive"

    code, resumed, output = _resume(suite_path, out)
    assert code == 0, output
    assert [(r["id"], r["status"]) for r in resumed["cells"]] == [(i, "passed") for i in SLOW_IDS]
    assert resumed["cells"][0] == doc["cells"][0]  # not run again
    for old, new in zip(doc["cells"][1:], resumed["cells"][1:], strict=True):
        assert new["started"] >= old["started"] and new["metrics"]["step_time"]["n"] >= 3


# ---------------------------------------------------------------------------
# an untrusted headline is measured again in more processes
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("again", [True, False])
def test_a_noisy_fastest_cell_and_its_reference_are_measured_again_in_three_processes(
    write_suite, tmp_path: Path, again: bool
) -> None:
    out = tmp_path / "r.json"
    suite = write_suite(healthy_suite(measure={**FAST_MEASURE, "noise_target": 1e-9}))
    argv = ["run", str(suite), "-o", str(out), "--no-peaks", "--no-report"]
    assert cli.main(argv if again else [*argv, "--no-again"]) == 0
    doc = results.load(out)
    remeasured = {r["id"]: r.get("remeasured") for r in doc["cells"]}
    if not again:
        assert remeasured == {"toy/fp32/bs8": None, "toy/noop/bs8": None}
        return
    # A 1e-9 noise target leaves every figure untrusted: the fastest one and FP32 are measured again
    # (one cell when FP32 itself was the faster of the two).
    assert remeasured["toy/fp32/bs8"] is not None
    for record in doc["cells"]:
        info = record.get("remeasured")
        if info is None:
            continue
        assert info["processes"] == 3 and info["reason"].startswith("noise")
        assert len(record["metrics"]["step_time"]["processes"]) == 3  # the new figure pools three processes
    assert not list(tmp_path.glob(".r.json.again*"))  # the scratch file is gone
