"""``[measure] processes``: one cell measured in several fresh processes, samples pooled.

The pooling (:func:`ampsuite.run.runner.pool_outcomes`) and the choice of outcome
(:func:`ampsuite.run.runner.run_record` over fake attempts) are checked on hand-made
outcomes; real toy cells on a CPU check the whole path, through workers and
in-process.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_MEASURE, toy_suite

from ampsuite import cli, results
from ampsuite.host import session
from ampsuite.run import attempt, measure
from ampsuite.run.measure import summarize
from ampsuite.run.runner import CellJob, RunConfig, pool_outcomes, process_count, run_record

# Medians 1.0, 1.1, 1.2 (hand computation in tests/test_measure.py): pooled median 1.10, iqr 0.17,
# pooled noise 0.037073, between-process noise stdev / sqrt(3) / median = 0.1 / 1.73205 / 1.1 = 0.052486.
RUNS = [
    [0.98, 0.99, 1.00, 1.01, 1.02],
    [1.08, 1.09, 1.10, 1.11, 1.12],
    [1.18, 1.19, 1.20, 1.21, 1.22],
]
TARGET = 0.005  # below the first process's own noise (0.83%), so it has a noise warning of its own


def passed(samples: list[float], i: int) -> dict[str, Any]:
    """A passed worker outcome as measure_cell writes it, for one process."""
    stats = summarize(samples)
    return {
        "status": "passed",
        "metrics": {
            "step_time": stats,
            "samples_per_step": 8,
            "throughput": 8 / stats["median"],
            "flops_per_step": 2e12,
            "tflops": 2e12 / stats["median"] / 1e12,
            "build_seconds": 0.5 + i,
        },
        "numerics": {"final_loss": 1.0 + i},
        "diagnostics": {"process": i},
        "notes": {"process": i},
        "warnings": [
            "clocks fell",
            *measure.timing_warnings(stats, TARGET),
            f"non-finite loss at step {i}",
        ],
        "evidence": None,
    }


def test_pooled_outcome_takes_the_between_process_noise_and_rewrites_the_warnings() -> None:
    outcomes = [passed(r, i) for i, r in enumerate(RUNS, 1)]
    assert outcomes[0]["warnings"][1] == "noise 0.83% above the target 0.50% after 5 steps: figure not trusted"
    out = pool_outcomes(outcomes, TARGET)
    st = out["metrics"]["step_time"]
    assert st["samples"] == RUNS[0] + RUNS[1] + RUNS[2]
    assert st["n"] == 15
    assert st["median"] == pytest.approx(1.1)
    assert st["noise"] == pytest.approx(0.1 / math.sqrt(3) / 1.1) == pytest.approx(0.052486, rel=1e-4)
    assert st["noise"] > measure.relative_noise(st["samples"])
    assert {k: v for k, v in st.items() if k not in ("processes", "noise")} == {
        k: v for k, v in summarize(st["samples"]).items() if k != "noise"
    }
    assert st["processes"] == [
        {"median": pytest.approx(m), "noise": summarize(r)["noise"], "n": 5}
        for m, r in zip((1.0, 1.1, 1.2), RUNS, strict=True)
    ]
    assert out["metrics"]["throughput"] == pytest.approx(8 / 1.1)
    assert out["metrics"]["tflops"] == pytest.approx(2 / 1.1)
    # everything else is the first process's
    assert out["metrics"]["build_seconds"] == 1.5
    assert (out["numerics"], out["notes"], out["diagnostics"]) == ({"final_loss": 2.0}, {"process": 1}, {"process": 1})
    assert out["warnings"] == [
        "clocks fell",
        "noise 5.25% above the target 0.50% after 15 steps: figure not trusted",
        "unstable: interquartile range is 15% of the median",
        "non-finite loss at step 1",
    ]
    assert outcomes[0]["metrics"]["step_time"]["n"] == 5  # the outcomes given are left as they were


def test_pooled_outcome_without_flops_has_no_tflops_and_agreeing_processes_no_warning() -> None:
    runs = [[1.0, 1.0, 1.0, 1.0]] * 3
    outcomes = [passed(r, i) for i, r in enumerate(runs, 1)]
    for o in outcomes:
        del o["metrics"]["flops_per_step"], o["metrics"]["tflops"]
    out = pool_outcomes(outcomes, TARGET)
    assert "tflops" not in out["metrics"]
    assert out["metrics"]["step_time"]["noise"] == 0.0
    assert out["warnings"] == ["clocks fell", "non-finite loss at step 1"]


# ---------------------------------------------------------------------------
# which outcome becomes the record
# ---------------------------------------------------------------------------


SUITE = toy_suite(
    "processes",
    timeout=120,
    combinations={"fp32": [], "fault": ["inject-fault"]},
    techniques={"inject-fault": {"kind": "raise"}},
    measure={**FAST_MEASURE, "processes": 3},
)
"""A toy cell measured in three processes, and one whose every process raises."""


@pytest.fixture(scope="module")
def toy_plan(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("plan") / "suite.toml"
    path.write_text(SUITE)
    return session.plan(path, device="cpu")


def fake_attempts(monkeypatch: pytest.MonkeyPatch, attempts: list[Any]) -> list[Path]:
    """Make each worker attempt return (or raise) the given items in turn; returns the logs it was given."""
    logs: list[Path] = []
    items: Iterator[Any] = iter(attempts)

    def measure_once(job: CellJob) -> Any:
        logs.append(job.log)
        item = next(items)
        if isinstance(item, BaseException):
            raise item
        return item

    monkeypatch.setattr(attempt, "measure_once", measure_once)
    return logs


def record_of(plan: Any, tmp_path: Path, cell: Any = None) -> dict[str, Any]:
    config = RunConfig(output=tmp_path / "r.json", in_process=True)
    return run_record(
        CellJob(None, plan.spec, cell or plan.cells[0], config, tmp_path / "cell-0.log", 60.0, plan.registry)
    )


def test_a_failing_process_is_the_record_with_its_number(toy_plan, tmp_path: Path, monkeypatch) -> None:
    failed = {"status": "oom", "metrics": {"build_seconds": 9.0}, "evidence": {"type": "OutOfMemoryError"}}
    logs = fake_attempts(monkeypatch, [passed(RUNS[0], 1), failed, passed(RUNS[2], 3)])
    record = record_of(toy_plan, tmp_path)
    assert record["status"] == "oom"
    assert record["evidence"] == {"type": "OutOfMemoryError", "process": 2}
    assert record["metrics"] == {"build_seconds": 9.0}  # nothing of the passed first process
    assert record["warnings"] == []
    assert [p.name for p in logs] == ["cell-0.log", "cell-0-process2.log"]  # the third never ran


def test_an_interruption_names_its_process(toy_plan, tmp_path: Path, monkeypatch) -> None:
    fake_attempts(monkeypatch, [passed(RUNS[0], 1), KeyboardInterrupt()])
    record = record_of(toy_plan, tmp_path)
    assert record["status"] == "interrupted"
    assert record["evidence"]["process"] == 2


def test_a_crash_without_evidence_dict_is_kept_as_it_is(toy_plan, tmp_path: Path, monkeypatch) -> None:
    fake_attempts(monkeypatch, [{"status": "failed", "evidence": None}])
    assert (r := record_of(toy_plan, tmp_path))["status"] == "failed" and r["evidence"] is None


def test_every_process_passing_gives_the_pooled_record(toy_plan, tmp_path: Path, monkeypatch) -> None:
    fake_attempts(monkeypatch, [passed(r, i) for i, r in enumerate(RUNS, 1)])
    record = record_of(toy_plan, tmp_path)
    assert record["status"] == "passed" and record["evidence"] is None
    assert [p["n"] for p in record["metrics"]["step_time"]["processes"]] == [5, 5, 5]


def test_one_process_and_data_parallel_cells_run_once(toy_plan, tmp_path: Path, monkeypatch) -> None:
    spec = toy_plan.spec
    cell = toy_plan.cells[0]
    assert process_count(spec, cell) == 3
    assert process_count(spec, dataclasses.replace(cell, world_size=2)) == 1
    one = dataclasses.replace(spec, measure=dataclasses.replace(spec.measure, processes=1))
    assert process_count(one, cell) == 1
    fake_attempts(monkeypatch, [{"status": "failed", "evidence": {"type": "X"}}])
    record = run_record(
        CellJob(None, one, cell, RunConfig(output=tmp_path / "r.json"), tmp_path / "c.log", 60.0, toy_plan.registry)
    )
    assert record["evidence"] == {"type": "X"}  # no process number when there is one process


# ---------------------------------------------------------------------------
# real toy cells on a CPU
# ---------------------------------------------------------------------------


def run_cli(*args: str) -> int:
    # --no-again: these tests count the processes of the first measurement, not of a second pass.
    return cli.main(["run", *args, "--no-report", "--no-peaks", "--no-again"])


@pytest.mark.parametrize("mode", ["workers", "in-process"])
def test_a_toy_cell_in_three_processes_pools_their_samples(tmp_path: Path, write_suite, mode: str) -> None:
    out = tmp_path / "r.json"
    extra = ["--in-process"] if mode == "in-process" else []
    assert run_cli(str(write_suite(SUITE)), "-o", str(out), "-k", "fp32", *extra) == 0
    doc = results.load(out)
    assert doc["run"]["measure"]["processes"] == 3
    (record,) = doc["cells"]
    assert record["status"] == "passed", record["evidence"]
    st = record["metrics"]["step_time"]
    assert len(st["processes"]) == 3
    assert st["n"] == len(st["samples"]) == sum(p["n"] for p in st["processes"])
    assert all(3 <= p["n"] <= 5 for p in st["processes"])
    assert st["median"] == summarize(st["samples"])["median"]
    between = measure.between_process_noise([p["median"] for p in st["processes"]], st["median"])
    assert st["noise"] >= measure.relative_noise(st["samples"])
    assert st["noise"] >= between
    assert st["noise"] == max(measure.relative_noise(st["samples"]), between)
    assert record["metrics"]["throughput"] == pytest.approx(record["metrics"]["samples_per_step"] / st["median"])


def test_a_cell_that_always_fails_is_failed_in_its_first_process(tmp_path: Path, write_suite) -> None:
    out = tmp_path / "r.json"
    assert run_cli(str(write_suite(SUITE)), "-o", str(out), "-k", "fault") == 1
    (record,) = results.load(out)["cells"]
    assert record["status"] == "failed"
    assert (record["evidence"]["type"], record["evidence"]["process"]) == ("InjectedFault", 1)
