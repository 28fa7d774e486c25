"""Data-parallel cells (suite-file ``gpus``): ids, skips, a real 2-process gloo run, its efficiency, a failing rank.

The real run is one suite through the runner's isolated workers: a toy cell on
1 and 2 processes, and the same cell with ``fault-raise`` armed for rank 1
only (which never fires in the 1-process cell, whose only rank is 0). Each
2-process cell pays for starting two Python processes, so the file takes
about 20 seconds on two cores; the rank-hang timeout test is marked slow.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_MEASURE, TOY, alive, run_in_workers, toy_suite, wait_gone
from records import parallel_record

from ampsuite import analysis
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import SuiteFileError
from ampsuite.run import launcher
from ampsuite.spec import matrix, parallel, suitefile
from ampsuite.spec.keyword import select

# ---------------------------------------------------------------------------
# the suite file and the matrix
# ---------------------------------------------------------------------------


def _toy(combinations: dict[str, list[str]] | None = None, **toy: Any) -> str:
    """The toy workload with ``toy`` options beside TOY's, in FP32, no-op and ``combinations``."""
    return toy_suite("ddp", toy={**TOY, **toy}, combinations={"fp32": [], "noop": ["noop"], **(combinations or {})})


def _cells(registry: Any, device: str = "cpu", gpu_count: int = 0, **toy: Any) -> list[Cell]:
    return matrix.expand(suitefile.loads(_toy(**toy)), registry, device, gpu_count)


def test_gpus_axis_gives_world_sizes_and_keeps_one_process_ids(registry) -> None:
    plain = _cells(registry)
    cells = _cells(registry, gpus=[1, 2])
    assert [c.id for c in plain] == ["toy/fp32/bs8", "toy/noop/bs8"]
    assert [(c.id, c.world_size) for c in cells] == [
        ("toy/fp32/bs8", 1),
        ("toy/noop/bs8", 1),
        ("toy/fp32/x2/bs8", 2),
        ("toy/noop/x2/bs8", 2),
    ]
    assert all(c.skip_reason is None for c in cells)  # gloo processes: any number on a CPU
    assert cells[2].as_dict()["world_size"] == 2 and plain[0].as_dict()["world_size"] == 1
    assert "gpus" not in cells[2].options  # not a workload option
    assert select(cells, "x2") == cells[2:]


def test_single_gpus_value_and_default(registry) -> None:
    (cell, _) = _cells(registry, gpus=3)
    assert (cell.id, cell.world_size) == ("toy/fp32/x3/bs8", 3)
    spec = suitefile.loads(_toy())
    assert spec.workloads[0].gpus == (1,)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, r"expected an integer >= 1 or a list of them, got 0"),
        (-2, r"expected an integer >= 1 or a list of them, got -2"),
        ("2", r"expected an integer >= 1 or a list of them, got '2'"),
        (True, r"expected an integer >= 1 or a list of them, got True"),
        (1.5, r"expected an integer >= 1 or a list of them, got 1.5"),
        ([], r"expected an integer >= 1 or a non-empty list of them, got an empty list"),
        ([1, 2, 1], r"GPU counts repeat: \[1, 2, 1\]"),
    ],
)
def test_bad_gpus_values_are_refused(value: Any, message: str) -> None:
    with pytest.raises(SuiteFileError) as info:
        suitefile.loads(_toy(gpus=value), "s.toml")
    assert re.fullmatch(r"s\.toml: workloads\.toy\.gpus: " + message, str(info.value)), str(info.value)


def test_cuda_cells_beyond_the_device_count_are_skipped(registry) -> None:
    cells = {c.id: c.skip_reason for c in _cells(registry, "cuda", 2, gpus=[1, 2, 4])}
    assert cells["toy/fp32/bs8"] is None
    assert cells["toy/fp32/x2/bs8"] is None
    assert cells["toy/noop/x4/bs8"] == "needs 4 GPUs (gpus = 4); this machine has 2"
    cells = {c.id: c.skip_reason for c in _cells(registry, "cuda", 0, gpus=[1, 2])}
    assert cells["toy/fp32/bs8"] is None  # one process: the usual rules alone
    assert cells["toy/fp32/x2/bs8"] == "needs 2 GPUs (gpus = 2); this machine has 0"


def test_cuda_graphs_are_refused_under_data_parallelism(registry) -> None:
    spec = suitefile.loads(_toy({"graphs": ["cuda-graphs"]}, gpus=[1, 2]))
    cells = {c.id: c.skip_reason for c in matrix.expand(spec, registry, "cuda", 2)}
    assert cells["toy/graphs/bs8"] is None
    assert cells["toy/graphs/x2/bs8"] == parallel.UNSUPPORTED_TECHNIQUES["cuda-graphs"]
    assert cells["toy/fp32/x2/bs8"] is None


def test_skip_reason_needs_gpus_only_for_several_cuda_processes() -> None:
    assert parallel.skip_reason(1, "cuda", ["cuda-graphs"], 0) is None
    assert parallel.skip_reason(8, "cpu", ["amp-bf16"], 0) is None
    assert parallel.skip_reason(2, "cuda", ["amp-bf16"], 1) == "needs 2 GPUs (gpus = 2); this machine has 1"
    assert parallel.skip_reason(2, "cuda", ["amp-bf16"], 2) is None


# ---------------------------------------------------------------------------
# combining rank results, and the scaling efficiency (pure)
# ---------------------------------------------------------------------------


def _rank_result(rank: int, median: float, samples_per_step: int = 8) -> dict[str, Any]:
    return {
        "status": "passed",
        "metrics": {
            "step_time": {"median": median, "noise": 0.01, "n": 10},
            "samples_per_step": samples_per_step,
            "flops_per_step": 2e12,
            "peak_memory_bytes": 100 + rank,
        },
        "numerics": {"final_loss": 1.0},
        "diagnostics": {},
        "notes": {"amp": {"dtype": "bfloat16"}},
        "warnings": ["noise 3% above the target"] if rank == 1 else [],
        "rank_info": {"rank": rank, "backend": "gloo", "env": dict(launcher.NVLS_ENV)},
    }


def test_combine_times_the_job_by_its_slowest_rank() -> None:
    out = launcher.combine({0: _rank_result(0, 0.10), 1: _rank_result(1, 0.20)}, 2)
    m = out["metrics"]
    assert m["world_size"] == 2 and m["slowest_rank"] == 1
    assert m["step_time"]["median"] == 0.20
    assert m["samples_per_step"] == 16 and m["samples_per_step_per_gpu"] == 8
    assert m["throughput"] == pytest.approx(16 / 0.20)
    assert m["throughput_per_gpu"] == pytest.approx(8 / 0.20)
    assert [r["throughput"] for r in m["ranks"]] == pytest.approx([80.0, 40.0])
    assert m["tflops"] == pytest.approx(2e12 / 0.20 / 1e12)  # per GPU
    assert m["peak_memory_bytes"] == 101
    assert out["warnings"] == ["rank 1: noise 3% above the target"]
    assert out["notes"]["amp"] == {"dtype": "bfloat16"} and out["notes"]["distributed"]["world_size"] == 2


def test_scaling_efficiency_against_the_one_process_cell() -> None:
    doc = {
        "run": {},
        "cells": [
            parallel_record("r/fp32/bs8", 100.0, world=None),  # written before world_size existed: one process
            parallel_record("r/amp/bs8", 300.0, combination="amp"),
            parallel_record("r/fp32/x2/bs8", 190.0, world=2),
            parallel_record("r/amp/x2/bs8", 600.0, world=2, combination="amp"),
            parallel_record("r/fp32/x2/bs16", 400.0, world=2, batch=16),  # no one-process cell at batch 16
        ],
    }
    derived = analysis.derive(doc)
    assert derived["r/fp32/x2/bs8"].scaling_efficiency == pytest.approx(0.95)
    assert derived["r/fp32/x2/bs8"].single_id == "r/fp32/bs8"
    assert derived["r/amp/x2/bs8"].scaling_efficiency == pytest.approx(1.0)
    assert derived["r/amp/x2/bs8"].single_id == "r/amp/bs8"
    assert derived["r/fp32/x2/bs16"].scaling_efficiency is None
    assert derived["r/fp32/bs8"].scaling_efficiency is None
    # Speedups compare cells of one world size: the 2-process FP32 cell is the 2-process AMP cell's reference.
    assert derived["r/amp/x2/bs8"].fp32_id == "r/fp32/x2/bs8"
    assert derived["r/amp/bs8"].fp32_id == "r/fp32/bs8"


# ---------------------------------------------------------------------------
# a real run: two gloo processes per cell, through the runner's workers
# ---------------------------------------------------------------------------


def _ddp_suite(gpus: Any, combination: str, fault: str, timeout: float = 120) -> str:
    """FP32 and ``combination``, the fault technique ``fault`` armed for rank 1 only, on ``gpus`` processes."""
    return toy_suite(
        "ddp",
        timeout=timeout,
        toy={**TOY, "gpus": gpus},
        combinations={"fp32": [], combination: [fault]},
        techniques={fault: {"rank": 1}},
        # Warm-up seconds: each rank's clock would size its own chunks, and DDP hangs on a step one rank lacks.
        measure={**FAST_MEASURE, "warmup_seconds": 0.3},
    )


RUN_SUITE = _ddp_suite([1, 2], "rank1-raises", "fault-raise")


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    suite_path = tmp_path_factory.mktemp("ddp") / "ddp.toml"
    suite_path.write_text(RUN_SUITE, encoding="utf-8")
    return run_in_workers(suite_path)[1]


def _by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in doc["cells"]}


@pytest.mark.slow
def test_statuses_one_failure_among_passes(ddp_run) -> None:
    assert {i: r["status"] for i, r in _by_id(ddp_run).items()} == {
        "toy/fp32/bs8": "passed",
        "toy/rank1-raises/bs8": "passed",  # rank 1 does not exist in a one-process cell
        "toy/fp32/x2/bs8": "passed",
        "toy/rank1-raises/x2/bs8": "failed",
    }
    assert [r["world_size"] for r in ddp_run["cells"]] == [1, 1, 2, 2]


def test_two_process_cell_records_per_rank_and_total_throughput(ddp_run) -> None:
    rec = _by_id(ddp_run)["toy/fp32/x2/bs8"]
    m = rec["metrics"]
    assert m["world_size"] == 2 and m["samples_per_step_per_gpu"] == 8 and m["samples_per_step"] == 16
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    for r in m["ranks"]:
        assert r["n"] >= 3 and r["throughput"] == pytest.approx(8 / r["median"])
    # The ranks agreed on the number of warm-up and timed steps (DDP would hang otherwise).
    assert m["ranks"][0]["n"] == m["ranks"][1]["n"] == m["step_time"]["n"]
    # (Two gloo ranks step in lockstep, so their own clocks would mostly agree too: tests/test_measure.py's
    # test_ranks_warm_up_in_chunks_that_rank_0s_clock_sizes is what fails on chunks sized by each rank's clock.)
    assert m["ranks"][0]["warmup_steps"] == m["ranks"][1]["warmup_steps"] > FAST_MEASURE["warmup_steps"]
    slowest = max(r["median"] for r in m["ranks"])
    assert m["step_time"]["median"] == slowest
    assert m["throughput"] == pytest.approx(2 * 8 / slowest)
    assert m["throughput_per_gpu"] == pytest.approx(8 / slowest)
    assert rec["status"] == "passed" and rec["evidence"] is None


def test_every_rank_ran_with_nvlink_multicast_off_in_the_workers_process_group(ddp_run) -> None:
    notes = _by_id(ddp_run)["toy/fp32/x2/bs8"]["notes"]["distributed"]
    assert notes["backend"] == "gloo" and notes["world_size"] == 2
    ranks = notes["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["env"] == launcher.NVLS_ENV for r in ranks)
    launcher_pid = ranks[0]["launcher_pid"]
    # The worker called setsid(): its pid is its process group, which the runner kills on a timeout.
    assert all(r["pgid"] == launcher_pid and r["pid"] != launcher_pid for r in ranks)
    assert not any(alive(r["pid"]) for r in ranks)


def test_ranks_train_like_the_one_process_cell(ddp_run) -> None:
    cells = _by_id(ddp_run)
    one, two = cells["toy/fp32/bs8"]["numerics"], cells["toy/fp32/x2/bs8"]["numerics"]
    # Same seed and batches on every rank: averaging identical gradients keeps the trajectory.
    assert two["losses"] == one["losses"]
    ranks = cells["toy/fp32/x2/bs8"]["metrics"]["ranks"]
    assert ranks[0]["final_loss"] == ranks[1]["final_loss"]


def test_scaling_efficiency_of_the_real_run(ddp_run) -> None:
    cells = _by_id(ddp_run)
    derived = analysis.derive(ddp_run)
    d = derived["toy/fp32/x2/bs8"]
    expected = cells["toy/fp32/x2/bs8"]["metrics"]["throughput"] / (2 * cells["toy/fp32/bs8"]["metrics"]["throughput"])
    assert d.single_id == "toy/fp32/bs8"
    assert d.scaling_efficiency == pytest.approx(expected)
    assert d.fp32_id == "toy/fp32/x2/bs8"
    assert derived["toy/fp32/bs8"].scaling_efficiency is None
    assert derived["toy/rank1-raises/x2/bs8"].scaling_efficiency is None


def test_the_raising_rank_is_the_cells_evidence_and_no_rank_survives(ddp_run) -> None:
    rec = _by_id(ddp_run)["toy/rank1-raises/x2/bs8"]
    ev = rec["evidence"]
    assert (ev["type"], ev["message"], ev["rank"], ev["world_size"]) == ("InjectedFault", "injected fault", 1, 2)
    assert ev["phase"] == "numerics"
    assert "InjectedFault: injected fault" in ev["traceback"] and "faults.py" in ev["traceback"]
    ranks = {r["rank"]: r for r in ev["ranks"]}
    assert set(ranks) == {0, 1}
    assert ranks[1]["raised"] == "InjectedFault" and ranks[1]["exitcode"] == 1
    assert all(r["alive"] is False and not alive(r["pid"]) for r in ranks.values())


@pytest.mark.slow
def test_a_hanging_rank_times_out_and_takes_every_rank_with_it(tmp_path: Path) -> None:
    suite_path = tmp_path / "hang.toml"
    suite_path.write_text(_ddp_suite(2, "hang", "fault-hang", timeout=20), encoding="utf-8")
    _, doc = run_in_workers(suite_path, keyword="hang")
    (rec,) = doc["cells"]
    assert rec["status"] == "timeout"
    pids = [int(p) for p in re.findall(r"ampsuite: rank \d \(local \d\) pid (\d+)", rec["evidence"]["stderr_tail"])]
    assert len(pids) == 2 and os.getpid() not in pids
    # SIGKILL is delivered to the whole group at once; a process with many threads takes a moment to go.
    assert wait_gone(pids, 10) == []


def test_the_gpu_scaling_suite_runs_each_workload_on_one_to_eight_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/gpu/ddp-scaling.toml (run where a machine of 8 GPUs is lent) expands as its header says, and a
    machine of 2 GPUs skips the cells that need more, with the reason."""
    from ampsuite.host import environment, session

    suite = Path(__file__).parent / "gpu" / "ddp-scaling.toml"
    monkeypatch.setattr(session, "resolve_device", lambda spec_device, device: "cuda")
    monkeypatch.setattr(environment, "gpu_count", lambda: 8)
    ids = [c.id for c in session.plan(suite).cells if c.skip_reason is None]
    assert ids == [
        *(f"resnet50/bf16-cl/{x}bs256" for x in ("", "x2/", "x4/", "x8/")),
        *(f"bert-base/bf16/{x}bs128" for x in ("", "x2/", "x4/", "x8/")),
    ]
    monkeypatch.setattr(environment, "gpu_count", lambda: 2)
    skipped = {c.id: c.skip_reason for c in session.plan(suite).cells if c.skip_reason}
    assert sorted(skipped) == sorted(i for i in ids if "/x4/" in i or "/x8/" in i)
    assert skipped["bert-base/bf16/x8/bs128"] == "needs 8 GPUs (gpus = 8); this machine has 2"
