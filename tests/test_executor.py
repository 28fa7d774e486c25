"""Executors: the slurm executor through submitit's LocalExecutor (``cluster = "local"``), end to end on a CPU.

Each cell is a job (a process of its own that starts its own fork server), so
these runs cost seconds each; the suites are as small as the behaviour allows.
A killed job, an interrupted parent and ``--resume`` share one run.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import TOY, QuietObserver, alive, cmdline, descendants, toy_suite, wait_for

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode, SuiteFileError, UsageError
from ampsuite.contract.wire import Status
from ampsuite.host import executors
from ampsuite.spec.suitefile import loads

REPO = Path(__file__).resolve().parents[1]


def _suite(
    executor: dict[str, Any] | None,
    combinations: dict[str, list[str]] | None = None,
    techniques: dict[str, dict[str, Any]] | None = None,
    **toy: Any,
) -> str:
    """The toy workload (``toy`` options beside TOY's) in ``combinations`` (FP32 alone unless given), run by the
    ``executor`` table (None: none)."""
    return toy_suite(
        "executor",
        timeout=120,
        toy={**TOY, **toy},
        combinations=combinations,
        techniques=techniques,
        tables={"executor": executor} if executor is not None else None,
    )


def _slurm_local(folder: Path) -> dict[str, Any]:
    return {"name": "slurm", "cluster": "local", "poll_seconds": 0.2, "folder": f"{folder}/%j"}


def run_cli(*args: str) -> int:
    # --no-again: these tests count the jobs of the first measurement; a second pass would submit more.
    return cli.main(["run", *args, "--no-report", "--no-peaks", "--no-again"])


# ---------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_slurm_local_cluster_gives_the_records_of_a_local_run(tmp_path: Path, write_suite) -> None:
    combinations = {"fp32": [], "fault": ["inject-fault"], "graphs": ["cuda-graphs"]}
    suite_path = write_suite(_suite(_slurm_local(tmp_path / "jobs"), combinations, {"inject-fault": {"kind": "raise"}}))
    data = str(tmp_path / "data")
    local, slurm = tmp_path / "local.json", tmp_path / "slurm.json"
    assert run_cli(str(suite_path), "-o", str(local), "--data-dir", data, "--executor", "local") == 1
    assert run_cli(str(suite_path), "-o", str(slurm), "--data-dir", data) == 1  # the suite's [executor]

    by_local, by_slurm = results.load(local)["cells"], results.load(slurm)["cells"]
    assert (
        [(r["id"], r["status"]) for r in by_slurm]
        == [(r["id"], r["status"]) for r in by_local]
        == [
            ("toy/fp32/bs8", "passed"),
            ("toy/fault/bs8", "failed"),
            ("toy/graphs/bs8", "skipped"),
        ]
    )
    passed, failed, _ = by_slurm
    assert passed["metrics"]["step_time"]["n"] >= 3 and passed["evidence"] is None
    assert failed["evidence"]["type"] == "InjectedFault"  # the worker's own evidence, from the node
    jobs = sorted(p.name for p in (tmp_path / "jobs").iterdir() if p.name.isdigit())
    assert len(jobs) == 2, jobs  # one job per cell that ran; the skipped one was never submitted


# ---------------------------------------------------------------------------
# a killed job, an interrupted parent, --resume
# ---------------------------------------------------------------------------


def _finished(path: Path) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {r["id"]: r for r in doc["cells"] if r["status"] in results.TERMINAL}


def _job_of(jobs: Path, cell_id: str) -> int:
    """The local job (its controller's pid) that runs ``cell_id``, read from submitit's submission pickle."""
    for path in jobs.glob("*/*_submitted.pkl"):
        with contextlib.suppress(Exception), path.open("rb") as f:
            if pickle.load(f).function.cell.id == cell_id:
                return int(path.parent.name)
    return 0


@contextlib.contextmanager
def _parent(*argv: str, cwd: Path) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ampsuite", "run", *argv, "--no-report", "--no-peaks", "--no-again"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=cwd,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for pid in [*descendants(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait(30)


def _cell_worker_running(job: int) -> bool:
    """Whether the job's cell has its worker: a child of the fork server the job started."""
    servers = [p for p in descendants(job) if "forkserver" in cmdline(p)]
    return any(descendants(s) for s in servers)


@pytest.mark.slow
def test_killed_job_interrupted_parent_and_resume(tmp_path: Path, write_suite, capsys) -> None:
    jobs = tmp_path / "jobs"
    combinations = {"killed": ["fault-hang"], "stopped": ["inject-fault"]}
    suite_path = write_suite(_suite(_slurm_local(jobs), combinations, {"inject-fault": {"kind": "hang"}}))
    out = tmp_path / "results.json"
    with _parent(str(suite_path), "-o", str(out), cwd=tmp_path) as proc:
        killed = wait_for(lambda: _job_of(jobs, "toy/killed/bs8"), 60, "the job of the first cell")
        wait_for(lambda: _cell_worker_running(killed), 60, "the first cell's worker")
        # One host: one job at a time, so cells are not measured side by side.
        assert not _job_of(jobs, "toy/stopped/bs8")
        # The scheduler kills a job (node failure, scancel -s KILL): the job and every process it started.
        started = descendants(killed)
        os.kill(killed, signal.SIGKILL)
        for pid in started:
            with contextlib.suppress(ProcessLookupError):  # it may end with its parent before it is reached
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "toy/killed/bs8" in _finished(out), 30, "the killed job's record")
        stopped = wait_for(lambda: _job_of(jobs, "toy/stopped/bs8"), 30, "the job of the second cell")
        wait_for(lambda: _cell_worker_running(stopped), 60, "the second cell's worker")
        family = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGTERM)  # the parent alone: it must cancel its jobs itself
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "Traceback" not in stderr
    assert "1 crashed, 1 interrupted" in stdout  # the summary is still printed
    wait_for(lambda: not any(alive(p) for p in family), 30, "the cancelled job to end")

    doc = results.load(out)
    cells = {r["id"]: r for r in doc["cells"]}
    assert [(r["id"], r["status"]) for r in doc["cells"]] == [
        ("toy/killed/bs8", "crashed"),
        ("toy/stopped/bs8", "interrupted"),
    ]
    evidence = cells["toy/killed/bs8"]["evidence"]
    assert evidence["executor"] == "slurm" and evidence["job_id"] == str(killed)
    assert evidence["state"] == "INTERRUPTED"  # what submitit says of a local job killed by a signal
    assert "stderr_tail" in evidence and str(killed) in evidence["reason"]
    assert cells["toy/stopped/bs8"]["evidence"]["reason"].startswith("not finished: the run was interrupted")

    # --resume submits only the interrupted cell; a short timeout ends its hang inside its job.
    capsys.readouterr()
    again = run_cli(str(suite_path), "-o", str(out), "--data-dir", str(tmp_path / "data"), "--resume", "--timeout", "2")
    assert again == ExitCode.CELLS_FAILED
    assert "slurm executor (local): 1 cells," in capsys.readouterr().out
    resumed = {r["id"]: r for r in results.load(out)["cells"]}
    assert resumed["toy/killed/bs8"] == cells["toy/killed/bs8"]
    assert resumed["toy/stopped/bs8"]["status"] == "timeout"
    assert resumed["toy/stopped/bs8"]["evidence"]["timeout_seconds"] == 2


# ---------------------------------------------------------------------------
# jobs survive the parent: --resume reattaches
# ---------------------------------------------------------------------------


def _remembered(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return dict(doc["run"].get("executor", {}).get("jobs", {}))


@pytest.mark.slow
def test_a_killed_parent_s_job_is_reattached_by_resume(tmp_path: Path, write_suite, capsys) -> None:
    """SIGKILL of the parent (a login node's reboot) leaves its job running; --resume collects that job's
    record instead of submitting the cell a second time."""
    jobs = tmp_path / "jobs"
    delayed = {"fault-delay": {"at": "apply", "seconds": 8}}
    suite_path = write_suite(_suite(_slurm_local(jobs), {"slow": ["fault-delay"]}, delayed))
    out = tmp_path / "results.json"
    cell = "toy/slow/bs8"
    with _parent(str(suite_path), "-o", str(out), cwd=tmp_path) as proc:
        job = wait_for(lambda: _job_of(jobs, cell), 60, "the cell's job")
        remembered = wait_for(lambda: _remembered(out).get(cell), 30, "the job in the results file")
        assert remembered["job_id"] == str(job) and remembered["cluster"] == "local"
        assert remembered["folder"] == str(jobs / str(job)) and remembered["tasks"] == 1
        wait_for(lambda: _cell_worker_running(job), 60, "the cell's worker")
        os.kill(proc.pid, signal.SIGKILL)  # the parent alone, with no chance to cancel anything
        proc.wait(30)
    assert alive(job) and cell not in _finished(out)  # the job outlives its parent

    capsys.readouterr()
    assert run_cli(str(suite_path), "-o", str(out), "--data-dir", str(tmp_path / "data"), "--resume") == 0
    printed = capsys.readouterr().out
    assert f"slurm executor: reattached job {job} of {cell} (RUNNING)" in printed, printed
    doc = results.load(out)
    (record,) = doc["cells"]
    assert record["id"] == cell and record["status"] == Status.PASSED, record["evidence"]
    assert "executor" not in doc["run"]  # collected: nothing left to reattach
    assert [p.name for p in jobs.iterdir() if p.name.isdigit()] == [str(job)]  # no second job


class _Cancelled:
    """A remembered job that the scheduler cancelled (scancel) while no parent was watching."""

    job_id = "4242"
    state = "CANCELLED by 1000"

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        raise RuntimeError("Job 4242 has not produced any output (state: CANCELLED by 1000)")

    def stderr(self) -> str:
        return "slurmstepd: error: *** JOB 4242 CANCELLED ***"


def test_a_remembered_job_that_was_cancelled_is_recorded_then_forgotten(
    tmp_path: Path, write_suite, capsys, monkeypatch
) -> None:
    from ampsuite.host import session
    from ampsuite.plugins.executors import _slurm
    from ampsuite.run import runner

    suite_path = write_suite(_suite(_slurm_local(tmp_path / "jobs")))
    out = tmp_path / "results.json"
    plan = session.plan(suite_path)
    cell = plan.cells[0].id
    # The file a killed parent leaves: no record yet, the cell's job remembered.
    config = runner.RunConfig(output=out, measure_peaks=False)
    writer = results.open_results(plan.spec, config, plan.device, plan.registry, {cell})
    job = {"job_id": "4242", "folder": str(tmp_path / "jobs" / "4242"), "cluster": "local", "tasks": 1}
    writer.doc["run"]["executor"] = {"name": "slurm", "jobs": {cell: job}}
    writer.flush()
    asked: list[Any] = []

    def reattach(data: Any, cluster: str) -> Any:
        asked.append(dict(data))
        return _Cancelled()

    monkeypatch.setattr(_slurm, "reattach", reattach)
    capsys.readouterr()
    assert run_cli(str(suite_path), "-o", str(out), "--resume") == ExitCode.OK  # no cell failed
    assert asked == [job]
    assert "slurm executor: reattached job 4242 of toy/fp32/bs8 (CANCELLED by 1000)" in capsys.readouterr().out
    doc = results.load(out)
    (record,) = doc["cells"]
    assert record["status"] == Status.INTERRUPTED  # the next --resume runs it again
    evidence = record["evidence"]
    assert (evidence["job_id"], evidence["state"], evidence["cluster"]) == ("4242", "CANCELLED by 1000", "local")
    assert "CANCELLED" in evidence["stderr_tail"]
    assert "executor" not in doc["run"]  # used once: forgotten with its record


# ---------------------------------------------------------------------------
# scheduler states
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("TIMEOUT", Status.TIMEOUT),
        ("PREEMPTED", Status.INTERRUPTED),
        ("CANCELLED by 1234", Status.INTERRUPTED),
        ("OUT_OF_MEMORY", Status.OOM),
        ("NODE_FAIL", Status.CRASHED),
        ("FAILED", Status.CRASHED),
        ("INTERRUPTED", Status.CRASHED),
        ("", Status.CRASHED),
    ],
)
def test_scheduler_states_map_to_statuses(state: str, status: Status) -> None:
    from ampsuite.plugins.executors import _slurm

    assert _slurm.status_of(state) == status


# ---------------------------------------------------------------------------
# the [executor] table and the command line
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"name": "slurm", "partiton": "gpu"}, r"executor\.partiton: unknown option; did you mean 'partition'\?"),
        ({"name": "slurm", "time_limit": "30"}, r"executor\.time_limit: expected an integer, got '30'"),
        ({"name": "slurm", "cluster": "pbs"}, r"executor\.cluster: expected one of 'slurm', 'local', 'debug'"),
        ({"name": "slurm", "gpus_per_node": -1}, r"executor\.gpus_per_node: expected an integer >= 0, got -1"),
        ({"name": "slurm", "folder": ""}, r"executor\.folder: expected a non-empty string, got ''"),
        ({"name": "slurmm"}, r"executor\.name: unknown executor 'slurmm'; did you mean 'slurm'\?"),
        ({"partition": 3}, r"executor\.partition: unknown option; it takes no options"),
    ],
)
def test_bad_executor_tables_are_one_line_errors(registry: Any, table: dict[str, Any], message: str) -> None:
    spec = loads(_suite(table), "s.toml")
    with pytest.raises(SuiteFileError, match=rf"^s\.toml: {message}") as info:
        executors.resolve(spec, registry.executors)
    assert "\n" not in str(info.value)


def test_executor_name_must_be_a_string() -> None:
    with pytest.raises(SuiteFileError, match=r"^s\.toml: executor\.name: expected an executor name"):
        loads(_suite({"name": 3}), "s.toml")


def test_command_line_overrides_the_suite_table(registry: Any) -> None:
    spec = loads(_suite({"name": "slurm", "partition": "a", "time_limit": 5}), "s.toml")
    key, value = executors.parse_option("time_limit=30")
    chosen = executors.resolve(spec, registry.executors, None, {key: value, "account": "me"})
    assert (chosen.options.partition, chosen.options.time_limit, chosen.options.account) == ("a", 30, "me")
    assert executors.resolve(spec, registry.executors, "local").executor.name == "local"  # suite options not applied
    assert executors.resolve(loads(_suite(None), "s.toml"), registry.executors).executor.name == executors.DEFAULT
    with pytest.raises(UsageError, match=r"^--executor-option time_limit: expected an integer, got 'soon'"):
        executors.resolve(spec, registry.executors, None, {"time_limit": "soon"})
    with pytest.raises(UsageError, match=r"^--executor: unknown executor 'pbs'"):
        executors.resolve(spec, registry.executors, "pbs")


def test_bad_executor_option_through_the_command_is_one_line(tmp_path: Path, write_suite, capsys) -> None:
    suite_path = write_suite(_suite(_slurm_local(tmp_path / "jobs")))
    code = run_cli(str(suite_path), "-o", str(tmp_path / "r.json"), "--executor-option", "partiton=gpu")
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE_ERROR
    assert err == (
        "ampsuite: error: --executor-option partiton: unknown option; did you mean 'partition'? (executor 'slurm')"
    )
    assert not (tmp_path / "r.json").exists()


def test_missing_submitit_is_one_line_with_the_install_hint(tmp_path: Path, write_suite, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit now fails, as when it is not installed
    suite_path = write_suite(_suite(_slurm_local(tmp_path / "jobs")))
    code = run_cli(str(suite_path), "-o", str(tmp_path / "r.json"))
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE_ERROR
    assert len(err.splitlines()) == 1 and "pip install 'ampsuite[slurm]'" in err
    assert not (tmp_path / "r.json").exists()


def test_slurm_without_a_cluster_is_one_line(tmp_path: Path, write_suite, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sbatch, no srun
    suite_path = write_suite(_suite({"name": "slurm"}))
    code = run_cli(str(suite_path), "-o", str(tmp_path / "r.json"))
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.USAGE_ERROR
    assert err.startswith("ampsuite: error: plugin 'slurm': no sbatch/srun on this machine") and "\n" not in err


def test_the_executor_table_becomes_the_sbatch_script(tmp_path: Path, monkeypatch) -> None:
    from ampsuite.plugins.executors import _slurm
    from ampsuite.plugins.executors.slurm import SlurmOptions

    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("srun", "sbatch"):
        (fake / tool).write_text("#!/bin/sh\nexit 1\n")
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    options = SlurmOptions(
        partition="gpu", account="me", setup=["module load cuda"], array_parallelism=4, folder=f"{tmp_path}/%j"
    )
    script = _slurm._executor(options, 30, 2, "h100")._executor._make_submission_file_text("CMD", "uid")
    for line in ("--partition=gpu", "--account=me", "--constraint=h100", "--gpus-per-node=2", "--time=30"):
        assert f"#SBATCH {line}\n" in script, script
    assert "module load cuda\n" in script and "--job-name=ampsuite" in script
    cpu = _slurm._executor(SlurmOptions(folder=f"{tmp_path}/%j"), 11, 0, "")._executor
    script = cpu._make_submission_file_text("CMD", "uid")
    assert "gpus" not in script and "--constraint" not in script and "--partition" not in script


# ---------------------------------------------------------------------------
# a third-party executor
# ---------------------------------------------------------------------------


class _HalfDone:
    """An executor plugin that runs the first cell here and then fails (a scheduler that went away)."""

    @staticmethod
    def ampsuite_executors() -> list[Any]:
        from ampsuite import Executor

        def run(ctx: Any) -> Iterator[Any]:
            tasks = iter(ctx.tasks)
            first = next(tasks)
            yield first, first()
            raise RuntimeError("the scheduler went away")

        return [Executor(name="half", summary="runs one cell, then fails", run=run)]


def test_an_executor_that_fails_leaves_a_complete_file_and_one_line(tmp_path: Path, write_suite) -> None:
    from ampsuite.contract.errors import PluginError
    from ampsuite.host import session
    from ampsuite.run import runner

    plan = session.plan(
        write_suite(_suite({"name": "half"}, {"fp32": [], "noop": ["noop"]})), objects=[("half", _HalfDone)]
    )
    out = tmp_path / "results.json"
    config = runner.RunConfig(output=out, in_process=True, measure_peaks=False, data_dir=tmp_path / "data")
    with pytest.raises(
        PluginError, match=r"^plugin 'half': executor 'half' raised RuntimeError: the scheduler went away$"
    ):
        runner.run_plan(plan, config, QuietObserver())
    doc = results.load(out)
    assert [(r["id"], r["status"]) for r in doc["cells"]] == [
        ("toy/fp32/bs8", "passed"),
        ("toy/noop/bs8", "interrupted"),
    ]
    assert "the scheduler went away" in doc["cells"][1]["evidence"]["reason"]
    assert doc["run"]["finished"] is not None


class _Remembering:
    """An executor plugin that remembers a job per task before running it here, and notes what it saw."""

    seen: ClassVar[list[Any]] = []

    @staticmethod
    def ampsuite_executors() -> list[Any]:
        from ampsuite import Executor

        def run(ctx: Any) -> Iterator[Any]:
            for task in ctx.tasks:
                with pytest.raises(ValueError, match=r"data\.job: a set is not JSON data"):
                    ctx.remember(task, {"job": {1, 2}})
                _Remembering.seen.append(ctx.remembered(task))
                ctx.remember(task, {"job_id": f"job-of-{task.cell.id}"})
                out = Path(_Remembering.out)
                _Remembering.seen.append(json.loads(out.read_text())["run"]["executor"])  # on disk at once
                record = task()
                yield task, record
                with pytest.raises(ValueError, match="already has its record"):
                    ctx.remember(task, {"job_id": "late"})

        return [Executor(name="remembering", summary="remembers a job per cell", run=run)]

    out: ClassVar[str] = ""


def test_remember_writes_at_once_and_the_record_forgets(tmp_path: Path, write_suite) -> None:
    from ampsuite.host import session
    from ampsuite.run import runner

    plan = session.plan(write_suite(_suite({"name": "remembering"})), objects=[("r", _Remembering)])
    out = tmp_path / "results.json"
    _Remembering.out, _Remembering.seen = str(out), []
    # A killed slurm run's file: its jobs are not this executor's, so they are dropped, in one line.
    config = runner.RunConfig(output=out, in_process=True, measure_peaks=False, data_dir=tmp_path / "data")
    writer = results.open_results(plan.spec, config, plan.device, plan.registry, {"toy/fp32/bs8"})
    writer.doc["run"]["executor"] = {"name": "slurm", "jobs": {"toy/fp32/bs8": {"job_id": "1"}}}
    writer.flush()
    config.resume = True
    observer = QuietObserver()
    doc, interrupted = runner.run_plan(plan, config, observer)
    assert not interrupted and [r["status"] for r in doc["cells"]] == ["passed"]
    assert observer.messages == [
        "1 job(s) remembered by executor 'slurm' are not reattached by executor 'remembering' "
        "(they may still be running); their cells run again"
    ]
    assert _Remembering.seen == [
        None,
        {"name": "remembering", "jobs": {"toy/fp32/bs8": {"job_id": "job-of-toy/fp32/bs8"}}},
    ]
    assert "executor" not in results.load(out)["run"]


# ---------------------------------------------------------------------------
# a multi-node data-parallel cell through the executor
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_two_node_gloo_cell_runs_through_the_slurm_executor(tmp_path: Path, write_suite) -> None:
    """nodes = 2: one job whose two tasks stand in for two nodes (submitit's local cluster has one host);
    each task runs one node through CellTask.node, torch's c10d rendezvous joins them, and the node that
    held global rank 0 returns the record."""
    text = _suite(_slurm_local(tmp_path / "jobs"), gpus=1, nodes=2)
    out = tmp_path / "nodes.json"
    assert run_cli(str(write_suite(text)), "-o", str(out), "--data-dir", str(tmp_path / "data")) == 0
    (record,) = results.load(out)["cells"]
    assert record["id"] == "toy/fp32/n2x1/bs8" and record["status"] == Status.PASSED, record.get("evidence")
    assert record["world_size"] == 2 and record["nodes"] == 2
    assert record["notes"]["distributed"]["nodes"] == 2
    jobs = [p for p in (tmp_path / "jobs").iterdir() if p.name.isdigit()]
    assert len(jobs) == 1  # one job of two tasks, not two jobs
