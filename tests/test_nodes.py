"""Multi-node data-parallel cells (suite-file ``nodes``): ids, validation, and real runs of two "nodes" on this machine.

The real run is one ``ampsuite run`` of a toy cell on two nodes x one gloo
process, healthy, with rank 1 raising, and with rank 1 killing its node's
process (``fault-kill-launcher``); the tests share it. Each cell starts two node
processes that each spawn a rank, so the run takes about 40 seconds on two cores.
"""

from __future__ import annotations

import json
import re
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import TOY, toy_suite, wait_gone
from records import parallel_record

from ampsuite import cli
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import ExitCode, SuiteFileError
from ampsuite.contract.wire import Status, outcome
from ampsuite.run import launcher, nodes, procs
from ampsuite.spec import matrix, parallel, suitefile
from ampsuite.spec.keyword import select


def _toy(**layout: Any) -> str:
    """The toy workload in FP32 laid out as ``layout`` says (nodes, gpus)."""
    return toy_suite("nodes", toy={**TOY, **layout})


def _cells(registry: Any, device: str = "cpu", gpu_count: int = 0, **layout: Any) -> list[Cell]:
    return matrix.expand(suitefile.loads(_toy(**layout)), registry, device, gpu_count)


# ---------------------------------------------------------------------------
# the suite file and the matrix
# ---------------------------------------------------------------------------


def test_nodes_times_gpus_is_the_world_size_and_ids_name_both(registry) -> None:
    cells = _cells(registry, gpus=[1, 2], nodes=[1, 2])
    assert [(c.id, c.world_size, c.nodes) for c in cells] == [
        ("toy/fp32/bs8", 1, 1),
        ("toy/fp32/n2x1/bs8", 2, 2),
        ("toy/fp32/x2/bs8", 2, 1),
        ("toy/fp32/n2x2/bs8", 4, 2),
    ]
    assert cells[1].as_dict()["nodes"] == 2 and Cell.from_dict(cells[1].as_dict()) == cells[1]
    assert "nodes" not in cells[1].options  # not a workload option
    assert select(cells, "x2") == [cells[2], cells[3]]  # two processes per node, on one node or two
    assert [c.id for c in select(cells, "n2x1 or n2x2")] == ["toy/fp32/n2x1/bs8", "toy/fp32/n2x2/bs8"]


def test_nodes_default_to_one_and_a_single_value_is_one_layout(registry) -> None:
    assert suitefile.loads(_toy()).workloads[0].nodes == (1,)
    (cell,) = _cells(registry, nodes=3)
    assert (cell.id, cell.world_size, cell.nodes) == ("toy/fp32/n3x1/bs8", 3, 3)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"nodes": 0}, r"expected an integer >= 1 or a list of them, got 0"),
        ({"nodes": "2"}, r"expected an integer >= 1 or a list of them, got '2'"),
        ({"nodes": True}, r"expected an integer >= 1 or a list of them, got True"),
        ({"nodes": 2.0}, r"expected an integer >= 1 or a list of them, got 2.0"),
        ({"nodes": []}, r"expected an integer >= 1 or a non-empty list of them, got an empty list"),
        ({"nodes": [2, 1, 2]}, r"node counts repeat: \[2, 1, 2\]"),
        ({"nodes": [1, 64], "gpus": 32}, r"nodes x gpus makes a world of 2,048 processes, more than 1,024"),
    ],
)
def test_bad_nodes_values_are_refused_in_one_line(layout: dict[str, Any], message: str) -> None:
    with pytest.raises(SuiteFileError) as info:
        suitefile.loads(_toy(**layout), "s.toml")
    assert re.fullmatch(r"s\.toml: workloads\.toy\.nodes: " + message, str(info.value)), str(info.value)


def test_cuda_multi_node_cells_need_every_nodes_gpus_here(registry) -> None:
    cells = {c.id: c.skip_reason for c in _cells(registry, "cuda", 2, gpus=2, nodes=[1, 2])}
    assert cells["toy/fp32/x2/bs8"] is None
    assert cells["toy/fp32/n2x2/bs8"] == "needs 4 GPUs (nodes = 2 x gpus = 2, all here); this machine has 2"
    assert parallel.skip_reason(4, "cuda", [], 4, nodes=2) is None
    assert parallel.skip_reason(2, "cpu", [], 0, nodes=2) is None


def test_each_local_node_sees_its_own_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [nodes.visible_devices(k, 2) for k in range(3)] == ["0,1", "2,3", "4,5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    assert [nodes.visible_devices(k, 2) for k in range(2)] == ["3,5", "6,7"]


def test_analysis_keeps_layouts_of_one_world_size_apart() -> None:
    from ampsuite import analysis

    doc = {
        "run": {},
        "cells": [
            parallel_record("toy/fp32/bs8", 100.0),
            parallel_record("toy/fp32/x2/bs8", 190.0, world=2),
            parallel_record("toy/fp32/n2x1/bs8", 160.0, world=2, nodes=2),
            parallel_record("toy/noop/n2x1/bs8", 180.0, world=2, nodes=2, combination="noop"),
        ],
    }
    derived = analysis.derive(doc)
    assert derived["toy/noop/n2x1/bs8"].fp32_id == "toy/fp32/n2x1/bs8"  # not the one-node x2 cell
    assert derived["toy/fp32/n2x1/bs8"].single_id == "toy/fp32/bs8"
    assert derived["toy/fp32/n2x1/bs8"].scaling_efficiency == pytest.approx(0.8)
    assert derived["toy/fp32/x2/bs8"].scaling_efficiency == pytest.approx(0.95)


def test_report_labels_tell_the_layouts_apart() -> None:
    from ampsuite.report import views

    labels = {
        views.setup_label(parallel_record("toy/fp32/x2/bs8", 1.0, world=2)),
        views.setup_label(parallel_record("toy/fp32/n2x1/bs8", 1.0, world=2, nodes=2)),
    }
    assert labels == {"fp32 \u00b7 2 GPUs", "fp32 \u00b7 2 nodes \u00d7 1 GPUs"}


def test_run_node_refuses_a_payload_of_another_layout() -> None:
    payload: dict[str, Any] = {"cell": {"id": "toy/fp32/n2x1/bs8", "world_size": 2, "nodes": 2}}
    with pytest.raises(ValueError, match="spans 2 node"):
        launcher.run_node(payload, {}, node_rank=0, nnodes=3, endpoint="127.0.0.1:0", run_id="r")
    with pytest.raises(ValueError, match="only node 0 may be given port 0"):
        launcher.run_node(payload, {}, node_rank=1, nnodes=2, endpoint="127.0.0.1:0", run_id="r")


# ---------------------------------------------------------------------------
# which node's failure is the cell's (pure: nodes as they ended, no processes)
# ---------------------------------------------------------------------------


def _ended(rank: int, at: float, ending: str, result: Any = None, exitcode: int | None = None) -> Any:
    return nodes._Node(rank, SimpleNamespace(pid=1000 + rank), None, result, ending, exitcode, at)


def _failed(kind: str, rank: int, raised_at: float | None = None) -> dict[str, Any]:
    evidence: dict[str, Any] = {"type": kind, "message": kind, "rank": rank, "world_size": 2}
    if raised_at is not None:
        evidence["raised_at"] = raised_at
    return dict(outcome(Status.FAILED, evidence, metrics={}, numerics=None, diagnostics={}, notes={}, warnings=[]))


def _job(tmp_path: Any) -> Any:
    return SimpleNamespace(log=tmp_path / "cell.log", timeout=30.0, cell=SimpleNamespace(world_size=2, nodes=2))


# Two ranks' start lines as a run on this machine wrote them with print: each rank wrote its text, then its newline,
# and the other's text came in between (the pids of the nodes are the _ended ones).
GLUED_LOG = (
    "ampsuite: node 0 of 2 pid 1000\nampsuite: node 1 of 2 pid 1001\n"
    "ampsuite: rank 1 (local 0) pid 2001 launcher 1001ampsuite: rank 0 (local 0) pid 2000 launcher 1000\n\n"
)


def test_each_node_lists_its_ranks_from_start_lines_another_process_wrote_into(tmp_path) -> None:
    job = _job(tmp_path)
    job.log.write_text(GLUED_LOG, encoding="utf-8")
    stopped = [_ended(k, 30.0, "stopped", exitcode=-9) for k in (0, 1)]
    out = nodes._outcome(stopped, job, "stacks")
    assert out["status"] == "timeout"
    assert [n["ranks"] for n in out["evidence"]["nodes"]] == [[{"rank": 0, "pid": 2000}], [{"rank": 1, "pid": 2001}]]


def test_a_start_line_is_one_write_so_no_other_process_writes_into_it(monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[str] = []
    monkeypatch.setattr(sys, "stderr", SimpleNamespace(write=writes.append, flush=lambda: None))
    procs.log_line("ampsuite: rank 0 (local 0) pid 2000 launcher 1000")
    assert writes == ["ampsuite: rank 0 (local 0) pid 2000 launcher 1000\n"]
    print("what print does", file=sys.stderr)
    assert writes[1:] == ["what print does", "\n"]


def test_the_earliest_raise_is_the_cause_whichever_node_reported_first(tmp_path) -> None:
    first = _ended(0, 1.0, "result", _failed("RuntimeError", 0, raised_at=50.0))  # lost its peer
    second = _ended(1, 2.0, "result", _failed("InjectedFault", 1, raised_at=49.0))
    out = nodes._outcome([first, second], _job(tmp_path), None)
    assert out["status"] == "failed"
    assert (out["evidence"]["type"], out["evidence"]["node"]) == ("InjectedFault", 1)
    assert [n["node"] for n in out["evidence"]["nodes"]] == [0, 1]


def test_a_rank_that_died_without_raising_comes_before_any_raise(tmp_path) -> None:
    raised = _ended(0, 1.0, "result", _failed("RuntimeError", 0, raised_at=1.0))
    crashed = _ended(1, 2.0, "result", _failed("RankCrashed", 1))
    out = nodes._outcome([raised, crashed], _job(tmp_path), None)
    assert (out["evidence"]["type"], out["evidence"]["node"]) == ("RankCrashed", 1)


def test_a_dead_node_comes_before_reported_failures_and_a_timeout(tmp_path) -> None:
    raised = _ended(0, 1.0, "result", _failed("RuntimeError", 0, raised_at=1.0))
    dead = _ended(1, 2.0, "died", exitcode=-9)
    out = nodes._outcome([raised, dead], _job(tmp_path), "stacks")
    assert out["status"] == "crashed"
    assert out["evidence"]["message"] == "node 1 of 2 (pid 1001) was killed by SIGKILL before its result"


def test_every_node_done_but_none_with_rank_zero_is_malformed(tmp_path) -> None:
    done = [_ended(k, 1.0, "result", {"node_done": {"node_rank": k, "pid": 1, "ranks": [k]}}) for k in (0, 1)]
    out = nodes._outcome(done, _job(tmp_path), None)
    assert (out["status"], out["evidence"]["type"]) == ("failed", "MalformedResult")


# ---------------------------------------------------------------------------
# a real run through `ampsuite run`: two nodes x one gloo process per cell
# ---------------------------------------------------------------------------

RUN_SUITE = toy_suite(
    "nodes",
    timeout=60,
    toy={**TOY, "nodes": 2},
    combinations={"fp32": [], "rank1-raises": ["fault-raise"], "node-killed": ["fault-kill-launcher"]},
    techniques={"fault-raise": {"rank": 1}, "fault-kill-launcher": {"rank": 1}},
)


@pytest.fixture(scope="module")
def nodes_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("nodes")
    suite_path = root / "nodes.toml"
    suite_path.write_text(RUN_SUITE, encoding="utf-8")
    out = root / "results.json"
    argv = ["run", str(suite_path), "-o", str(out), "--no-report", "--no-peaks", "--data-dir", str(root / "data")]
    t0 = time.monotonic()
    code = cli.main(argv)
    doc = json.loads(out.read_text(encoding="utf-8"))
    return {"code": code, "doc": doc, "seconds": time.monotonic() - t0}


def _by_id(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in run["doc"]["cells"]}


@pytest.mark.slow
def test_statuses_and_the_exit_code(nodes_run) -> None:
    assert {i: (r["status"], r["world_size"]) for i, r in _by_id(nodes_run).items()} == {
        "toy/fp32/n2x1/bs8": ("passed", 2),
        "toy/rank1-raises/n2x1/bs8": ("failed", 2),
        "toy/node-killed/n2x1/bs8": ("crashed", 2),
    }
    assert nodes_run["code"] == ExitCode.CELLS_FAILED


def test_two_nodes_pass_with_every_rank_combined_on_node_zero(nodes_run) -> None:
    rec = _by_id(nodes_run)["toy/fp32/n2x1/bs8"]
    m = rec["metrics"]
    assert rec["evidence"] is None and rec["nodes"] == 2
    assert m["world_size"] == 2 and m["samples_per_step"] == 16 and m["samples_per_step_per_gpu"] == 8
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert m["ranks"][0]["n"] == m["ranks"][1]["n"] == m["step_time"]["n"]  # the step agreement held across nodes
    assert m["throughput"] == pytest.approx(16 / m["step_time"]["median"])
    # Same seed, same batches, gradients averaged across the nodes: both ranks end at the same loss.
    assert m["ranks"][0]["final_loss"] == m["ranks"][1]["final_loss"]


def test_notes_show_two_nodes_each_its_own_process_group(nodes_run) -> None:
    dist = _by_id(nodes_run)["toy/fp32/n2x1/bs8"]["notes"]["distributed"]
    assert (dist["nodes"], dist["nproc_per_node"], dist["world_size"], dist["backend"]) == (2, 1, 2, "gloo")
    assert dist["rendezvous"]["backend"] == "c10d"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", dist["rendezvous"]["endpoint"]) and not dist["rendezvous"][
        "endpoint"
    ].endswith(":0")
    ranks = dist["ranks"]
    assert sorted(r["node"] for r in ranks) == [0, 1]
    procs = {p["node"]: p for p in dist["node_processes"]}
    assert set(procs) == {0, 1} and all(p["ended"] == "result" for p in procs.values())
    # Each node is a process group of its own (it called setsid), holding its ranks.
    assert procs[0]["pid"] != procs[1]["pid"]
    for r in ranks:
        assert r["launcher_pid"] == procs[r["node"]]["pid"] == r["pgid"]
        assert r["rank"] in procs[r["node"]]["ranks"]
    assert wait_gone([r["pid"] for r in ranks] + [p["pid"] for p in procs.values()], 10) == []


def test_a_raising_rank_on_one_node_is_the_cells_evidence(nodes_run) -> None:
    ev = _by_id(nodes_run)["toy/rank1-raises/n2x1/bs8"]["evidence"]
    assert (ev["type"], ev["message"], ev["rank"], ev["world_size"]) == ("InjectedFault", "injected fault", 1, 2)
    assert ev["node"] in (0, 1) and {n["node"] for n in ev["nodes"]} == {0, 1}
    assert [r["rank"] for r in ev["ranks"]] == [1]  # the ranks of the node that reported it
    assert wait_gone([n["pid"] for n in ev["nodes"]], 10) == []


def test_a_killed_node_crashes_the_cell_with_its_ranks_and_nothing_hangs(nodes_run) -> None:
    rec = _by_id(nodes_run)["toy/node-killed/n2x1/bs8"]
    ev = rec["evidence"]
    node = ev["node"]
    assert ev["signal"] == "SIGKILL" and ev["exitcode"] == -9
    assert re.fullmatch(rf"node {node} of 2 \(pid \d+\) was killed by SIGKILL before its result", ev["message"])
    assert [r["rank"] for r in ev["ranks"]] == [1]  # the rank that lived on the dead node
    by_node = {n["node"]: n for n in ev["nodes"]}
    assert by_node[node]["ended"] == "died"
    assert by_node[1 - node]["ended"] in ("stopped", "result")  # the survivor was stopped (or ended) at once
    assert rec["wall_seconds"] < 40  # far from the 60 s timeout: no node waited for its lost peer
    assert wait_gone([n["pid"] for n in ev["nodes"]] + [r["pid"] for r in ev["ranks"]], 10) == []
    assert f"ampsuite: node {node} of 2 pid" in ev["stderr_tail"]


def test_the_run_stays_short(nodes_run) -> None:
    assert nodes_run["seconds"] < 120


HANG_TIMEOUT = 30


@pytest.mark.slow
def test_a_hanging_rank_times_out_and_every_node_group_is_killed(tmp_path) -> None:
    # The timeout counts from the cell's start: it covers node 0 starting, then node 1, then both ranks (each
    # process imports torch): 6 s on an idle 2-core machine, 12.5 s with four busy processes beside it.
    suite_path = tmp_path / "hang.toml"
    suite_path.write_text(
        RUN_SUITE.replace("timeout = 60", f"timeout = {HANG_TIMEOUT}")
        .replace('rank1-raises = ["fault-raise"]', 'hang = ["fault-hang"]')
        .replace("[techniques.fault-raise]", "[techniques.fault-hang]"),
        encoding="utf-8",
    )
    out = tmp_path / "r.json"
    argv = ["run", str(suite_path), "-o", str(out), "-k", "hang", "--no-report", "--no-peaks"]
    assert cli.main([*argv, "--data-dir", str(tmp_path / "data")]) == ExitCode.CELLS_FAILED
    (rec,) = json.loads(out.read_text(encoding="utf-8"))["cells"]
    ev = rec["evidence"]
    assert rec["status"] == "timeout" and ev["timeout_seconds"] == HANG_TIMEOUT
    assert re.search(r"^node 0 \(pid \d+\):", ev["stacks"], re.M) and re.search(
        r"^node 1 \(pid \d+\):", ev["stacks"], re.M
    )
    assert all(n["ended"] == "stopped" for n in ev["nodes"])
    ranks = [r["pid"] for n in ev["nodes"] for r in n["ranks"]]
    assert sorted(r["rank"] for n in ev["nodes"] for r in n["ranks"]) == [0, 1], (ev["nodes"], ev["stacks"])
    assert wait_gone([n["pid"] for n in ev["nodes"]] + ranks, 10) == []
