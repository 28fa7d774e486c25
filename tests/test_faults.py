"""Fault injection: one run where every fault a CPU can show sits between healthy cells.

Each ``fault-KIND`` technique is a combination of its own, followed by a
healthy ``noop`` cell, so the run checks in one go that every fault ends as
the right status with its evidence, that the cell after it starts clean and
passes, and that the run has exactly one record per expanded cell. The
CUDA-only faults are in the same suite and must be skipped with a reason on a
CPU; ``test_cuda_faults`` runs them on a GPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FAST_MEASURE, FAULTS, TOY, toy_suite

from ampsuite import BuildContext, SkipCell, cli, results
from ampsuite.contract.errors import ExitCode, SuiteFileError
from ampsuite.host import session
from ampsuite.plugins import _faults, faults
from ampsuite.plugins.workloads import _toy, toy
from ampsuite.run.resultcheck import malformed

HANG_TIMEOUT = 10.0
NUMERICS_STEPS = 12
"""Enough steps for a GradScaler halving every step to fall 2**10 below its start (at step 9)."""

CPU_FAULTS = (
    "raise",
    "abort",
    "segfault",
    "exit",
    "hang",
    "launch-hang",
    "oom",
    "leak",
    "nan",
    "corrupt",
    "illegal-address",
)
CUDA_ONLY = ("cuda-assert", "graph-capture")


PAIRED = {
    "scale-collapse": ["amp-fp16", "fault-scale-collapse"],
    "graph-capture": ["cuda-graphs", "fault-graph-capture"],
}
"""Faults that need another technique to happen at all."""


def fault_suite(
    device: str,
    kinds: tuple[str, ...],
    *,
    memory_limit_gb: float,
    toy: dict[str, Any] = TOY,
    timeout: float = HANG_TIMEOUT,
) -> str:
    combinations: dict[str, list[str]] = {"fp32": []}
    for i, kind in enumerate(kinds):
        combinations[kind] = PAIRED.get(kind, [f"fault-{kind}"])
        combinations[f"ok-{i}"] = ["noop"]
    combinations["amp-fp16"] = ["amp-fp16"]
    # Give up allocating only far beyond any device's memory (an H200 has 141 GiB).
    techniques = {f"fault-{kind}": {"oom_limit_gb": 4096} for kind in ("oom", "leak") if kind in kinds}
    return toy_suite(
        f"faults-{device}",
        device=device,
        timeout=timeout,
        memory_limit_gb=memory_limit_gb,
        toy=toy,
        combinations=combinations,
        techniques=techniques,
        measure={**FAST_MEASURE, "numerics_steps": NUMERICS_STEPS},
    )


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, registry) -> tuple[int, dict[str, dict[str, Any]], list[str], list[str]]:
    """(exit code, records by combination, record ids in file order, expanded cell ids)."""
    root = tmp_path_factory.mktemp("faults")
    # memory_limit_gb is room on top of what each worker maps after its imports.
    text = fault_suite("cpu", (*CPU_FAULTS, *CUDA_ONLY, "scale-collapse"), memory_limit_gb=2.5)
    path = root / "faults.toml"
    path.write_text(text)
    out = root / "results.json"
    code = cli.main(["run", str(path), "-o", str(out), "--no-report", "--no-peaks", "--data-dir", str(root / "data")])
    expected = [c.id for c in session.plan(path, device="cpu").cells]
    doc = results.load(out)
    return code, {r["combination"]: r for r in doc["cells"]}, [r["id"] for r in doc["cells"]], expected


@pytest.mark.slow
def test_one_record_per_expanded_cell(cpu_run) -> None:
    code, _, ids, expected = cpu_run
    assert ids == expected
    assert len(expected) == 2 + 2 * len(CPU_FAULTS + CUDA_ONLY) + 1 + 1  # fp32, fault + healthy pairs, collapse, amp
    assert code == ExitCode.CELLS_FAILED


def test_every_healthy_cell_passes(cpu_run) -> None:
    records = cpu_run[1]
    healthy = ["fp32", "amp-fp16", *(f"ok-{i}" for i in range(len(CPU_FAULTS + CUDA_ONLY)))]
    for combination in healthy:
        record = records[combination]
        assert record["status"] == "passed", (combination, record["evidence"])
        assert record["evidence"] is None
        assert record["metrics"]["step_time"]["n"] >= 3
        assert record["numerics"]["nonfinite_step"] is None
        assert record["numerics"]["scale_collapsed_step"] is None


def _allocated_bytes(message: str) -> int:
    match = re.search(r"tried to allocate (\d+) bytes", message)
    assert match, message
    return int(match.group(1))


EXPECTED: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "raise": (
        "failed",
        lambda r: (
            (r["evidence"]["type"], r["evidence"]["message"]) == ("InjectedFault", "injected fault")
            and r["evidence"]["traceback"].splitlines()[-1] == "ampsuite.plugins.faults.InjectedFault: injected fault"
        ),
    ),
    "abort": (
        "crashed",
        lambda r: (
            (r["evidence"]["signal"], r["evidence"]["exitcode"]) == ("SIGABRT", -6)
            and r["evidence"]["message"] == "worker was killed by SIGABRT before sending a result"
        ),
    ),
    "segfault": ("crashed", lambda r: (r["evidence"]["signal"], r["evidence"]["exitcode"]) == ("SIGSEGV", -11)),
    "exit": (
        "crashed",
        lambda r: (
            (r["evidence"]["signal"], r["evidence"]["exitcode"]) == (None, 3)
            and r["evidence"]["message"] == "worker exited with code 3 before sending a result"
        ),
    ),
    # The worker's threads at the moment of the timeout: the main one sleeps in the fault's loop.
    "hang": (
        "timeout",
        lambda r: (
            r["evidence"]["timeout_seconds"] == HANG_TIMEOUT
            and re.search(r'File ".*faults\.py", line \d+ in fire\n', r["evidence"]["stacks"]) is not None
        ),
    ),
    "launch-hang": (
        "timeout",
        lambda r: (
            r["evidence"]["timeout_seconds"] == HANG_TIMEOUT
            and re.search(r'File ".*faults\.py", line \d+ in _launch_forever\n', r["evidence"]["stacks"]) is not None
        ),
    ),
    "oom": ("oom", lambda r: "allocate" in r["evidence"]["message"] and r["evidence"]["memory"]["max_rss_bytes"] > 0),
    # The leak grew over several steps: what ran out was not its first, smallest piece.
    "leak": ("oom", lambda r: _allocated_bytes(r["evidence"]["message"]) > faults.LEAK_FIRST_BYTES),
    "nan": ("passed", lambda r: (r["numerics"]["nonfinite_step"], r["numerics"]["nonfinite_what"]) == (0, "loss")),
    "corrupt": (
        "failed",
        lambda r: (
            r["evidence"]["message"]
            == "malformed result from worker: notes.injected_corruption.not_json: a set is not JSON data"
        ),
    ),
    "illegal-address": ("crashed", lambda r: r["evidence"]["signal"] == "SIGSEGV"),
}


@pytest.mark.parametrize("kind", CPU_FAULTS)
def test_fault_has_its_status_and_evidence(cpu_run, kind: str) -> None:
    record = cpu_run[1][kind]
    status, check = EXPECTED[kind]
    assert record["status"] == status, record["evidence"]
    assert check(record), record


def test_nan_cell_warns_with_the_step(cpu_run) -> None:
    assert "non-finite loss at step 0" in cpu_run[1]["nan"]["warnings"]


def test_leak_ends_in_the_numerics_phase_with_memory_figures(cpu_run) -> None:
    ev = cpu_run[1]["leak"]["evidence"]
    assert ev["phase"] == "numerics"
    assert ev["memory"]["max_rss_bytes"] > 0
    assert "grow" in ev["traceback"]


@pytest.mark.parametrize("kind", CUDA_ONLY)
def test_cuda_only_faults_are_skipped_on_cpu_with_a_reason(cpu_run, kind: str) -> None:
    record = cpu_run[1][kind]
    assert record["status"] == "skipped"
    assert record["evidence"]["reason"] == f"fault-{kind} needs a CUDA device; this run is on cpu"


def test_scale_collapse_is_recorded_with_its_step(cpu_run) -> None:
    record = cpu_run[1]["scale-collapse"]
    assert record["status"] == "passed", record["evidence"]
    n = record["numerics"]
    assert n["scale_start"] == 65536.0
    # The history starts with the scale before the first step; every step overflowed and halved it.
    assert n["scale_history"] == [65536.0 / 2**i for i in range(NUMERICS_STEPS + 1)]
    assert (n["scale_collapsed_step"], n["scale_at_collapse"]) == (9, 64.0)  # 2**10 below the start
    assert n["nonfinite_step"] is None  # the scaler skipped the bad steps: the loss stayed finite
    assert all(loss is not None for loss in n["losses"])
    assert "loss scale collapsed to 64 at step 9 (from 65536): gradients overflow in float16" in record["warnings"]


def test_healthy_fp16_scale_does_not_collapse(cpu_run) -> None:
    n = cpu_run[1]["amp-fp16"]["numerics"]
    assert n["scale_history"] == [65536.0] * (NUMERICS_STEPS + 1)
    assert not any("collapsed" in w for w in cpu_run[1]["amp-fp16"]["warnings"])


# ---------------------------------------------------------------------------
# the runner refuses malformed worker results
# ---------------------------------------------------------------------------

GOOD = {"status": "passed", "metrics": {"throughput": 1.0}, "numerics": None, "diagnostics": {}, "notes": {}}


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ("passed", "expected a dict, got a str"),
        ({**GOOD, "status": "crashed"}, "status 'crashed' is not one of passed, skipped, failed, oom"),
        ({**GOOD, "status": None}, "status None is not one of passed, skipped, failed, oom"),
        ({**GOOD, "id": "other/cell"}, "unexpected field 'id'"),
        ({**GOOD, "metrics": [1.0]}, "metrics: expected an object, got list '[1.0]'"),
        ({**GOOD, "warnings": "careful"}, "warnings: expected a list, got str 'careful'"),
        ({**GOOD, "warnings": ["ok", 3]}, "warnings[1]: expected a string, got int '3'"),
        ({**GOOD, "metrics": {"throughput": float("nan")}}, "metrics.throughput: non-finite number nan"),
        ({**GOOD, "metrics": {"t": {"samples": [1.0, float("inf")]}}}, "metrics.t.samples[1]: non-finite number inf"),
        ({**GOOD, "notes": {"x": {1, 2}}}, "notes.x: a set is not JSON data"),
        ({**GOOD, "diagnostics": {1: "a"}}, "diagnostics: key 1 is not a string"),
        ({**GOOD, "notes": {"x": b"\x00"}}, "notes.x: a bytes is not JSON data"),
        ({**GOOD, "evidence": "boom"}, "evidence: expected an object or null"),
    ],
)
def test_malformed_results_are_named(result: Any, problem: str) -> None:
    assert malformed(result) == problem


@pytest.mark.parametrize(
    "result",
    [
        GOOD,
        {**GOOD, "numerics": {"losses": [1.0, None], "scale_history": None}, "warnings": ["w"], "evidence": None},
        {"status": "oom", "metrics": {}, "numerics": None, "evidence": {"type": "OutOfMemoryError", "memory": {}}},
        {"status": "skipped", "metrics": {}, "numerics": None, "evidence": {"reason": "why"}},
    ],
)
def test_well_formed_results_pass(result: dict[str, Any]) -> None:
    assert malformed(result) is None


# ---------------------------------------------------------------------------
# the fault plugin's own contract
# ---------------------------------------------------------------------------


def _suite_with(write_suite, techniques: list[str], options: dict[str, dict[str, Any]]) -> Path:
    return write_suite(toy_suite("faults", combinations={"fp32": [], "bad": techniques}, techniques=options))


def test_step_only_fault_at_apply_is_a_suite_file_error(write_suite, registry) -> None:
    path = _suite_with(write_suite, ["inject-fault"], {"inject-fault": {"kind": "leak", "at": "apply"}})
    with pytest.raises(SuiteFileError) as info:
        session.plan(path, device="cpu")
    assert str(info.value) == (
        f"{path}: techniques.inject-fault: "
        "at='apply' is not possible with kind='leak': that fault happens inside a step"
    )


def test_fault_kind_technique_takes_no_kind_option(write_suite) -> None:
    path = _suite_with(write_suite, ["fault-nan"], {"fault-nan": {"kind": "raise"}})
    with pytest.raises(SuiteFileError, match=r"techniques\.fault-nan\.kind: unknown option"):
        session.plan(path, device="cpu")


def test_every_kind_is_a_technique_of_its_own(registry) -> None:
    for kind in faults.KINDS:
        technique = registry.techniques[f"fault-{kind}"]
        assert technique.options.kind == kind
        assert technique.order == (80 if kind == "graph-capture" else 99)
    assert registry.techniques["fault-graph-capture"].requires == {"cuda", "cuda-graphs"}
    assert registry.techniques["fault-scale-collapse"].requires == {"amp-fp16"}


def _toy_step(device: str = "cpu") -> Any:
    step = _toy.build(toy.ToyOptions(hidden=8), BuildContext(torch.device("cpu"), 4, 0, "unused"))
    step.device = torch.device(device)  # only a label here: the tensors stay on the CPU
    return step


def test_leak_doubles_every_step_and_gives_up_at_its_limit() -> None:
    leak = _faults._Leak(torch.device("cpu"), limit_gb=0.5)
    for _ in range(3):
        leak.grow()
    assert [t.numel() for t in leak.kept] == [faults.LEAK_FIRST_BYTES * 2**i for i in range(3)]
    with pytest.raises(faults.InjectedFault, match=r"leaked 0\.44 GiB without running out of memory"):
        leak.grow()


def test_graph_capture_fault_is_inside_forward_backward_not_a_wrapper() -> None:
    step = _faults.apply(_toy_step("cuda"), faults.FaultOptions(kind="graph-capture", after_steps=1))
    assert step.wrappers == []  # cuda-graphs captures forward_backward (or the composed step around it)
    assert step.forward_backward is not None
    run = step.compose()
    for _ in range(2):  # healthy, then faulty: eagerly, the host sync is harmless
        assert math.isfinite(float(run(step.data())))


def test_graph_capture_and_scale_collapse_skip_where_they_cannot_happen() -> None:
    with pytest.raises(SkipCell, match="needs a CUDA device"):
        _faults.apply(_toy_step(), faults.FaultOptions(kind="graph-capture"))
    with pytest.raises(SkipCell, match="needs a GradScaler"):
        _faults.apply(_toy_step(), faults.FaultOptions(kind="scale-collapse"))


def test_overflowing_loss_keeps_the_value_and_overflows_the_gradient() -> None:
    calls = iter([False, True])
    loss_fn = _faults.overflowing(torch.nn.MSELoss(), lambda: next(calls))
    x = torch.ones(3, requires_grad=True)
    healthy = loss_fn(x * 2, torch.zeros(3))
    healthy.backward()
    assert torch.isfinite(x.grad).all()
    x.grad = None
    with torch.autocast("cpu", dtype=torch.float16):
        y = torch.nn.functional.linear(x.unsqueeze(0), torch.eye(3))
    overflowing = loss_fn(y.float().squeeze(0) * 2, torch.zeros(3))
    assert float(overflowing.detach()) == float(healthy.detach())
    (overflowing * 65536.0).backward()
    assert not torch.isfinite(x.grad).all()


# ---------------------------------------------------------------------------
# on a GPU: sticky CUDA errors and a failed capture between healthy cells
# ---------------------------------------------------------------------------

CUDA_EXPECTED: dict[str, tuple[tuple[str, ...], str]] = {
    "cuda-assert": (("failed", "crashed"), "device-side assert"),
    "illegal-address": (("failed", "crashed"), "illegal memory access"),
    "graph-capture": (("failed",), "capture failed"),
    "oom": (("oom",), "out of memory"),
    "leak": (("oom",), "out of memory"),
}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_faults_stay_in_their_cells(tmp_path: Path) -> None:
    kinds = ("cuda-assert", "illegal-address", "graph-capture", "oom", "leak", "nan", "scale-collapse")
    text = fault_suite("cuda", kinds, memory_limit_gb=0, toy={**TOY, "hidden": 64}, timeout=120)
    path = tmp_path / "faults.toml"
    path.write_text(text)
    out = tmp_path / "results.json"
    code = cli.main(["run", str(path), "-o", str(out), "--no-report", "--no-peaks"])
    doc = results.load(out)
    records = {r["combination"]: r for r in doc["cells"]}
    assert [r["id"] for r in doc["cells"]] == [c.id for c in session.plan(path, device="cuda").cells]
    assert code == ExitCode.CELLS_FAILED
    for combination, record in records.items():
        if combination in CUDA_EXPECTED:
            statuses, text_ = CUDA_EXPECTED[combination]
            assert record["status"] in statuses, (combination, record["evidence"])
            evidence = " ".join(str(v) for v in record["evidence"].values())
            assert text_ in evidence, (combination, record["evidence"])
        else:
            assert record["status"] == "passed", (combination, record["evidence"])
    assert records["scale-collapse"]["numerics"]["scale_collapsed_step"] == 9
    assert records["nan"]["numerics"]["nonfinite_step"] == 0


def test_a_loss_that_turns_non_finite_after_the_numerics_phase_is_placed_at_the_step_after_the_timed_ones(
    ampsuite_run,
) -> None:
    # The parameters turn NaN after the two numerics steps (in an inspect, warm-up or timed step): only the last
    # step's loss, after the numerics, warm-up and timed steps, shows it.
    result = ampsuite_run(
        {
            "workloads": {"toy": {"batch_size": 4, "hidden": 8}},
            "combinations": {"late-nan": ["fault-nan"]},
            "techniques": {"fault-nan": {"after_steps": 2}},
        },
        plugins=(FAULTS,),
    )
    (record,) = result.doc["cells"]
    numerics, metrics = record["numerics"], record["metrics"]
    assert len(numerics["losses"]) == 2 and None not in numerics["losses"]  # finite through the numerics phase
    assert numerics["nonfinite_what"] == "loss"
    assert numerics["nonfinite_step"] == 2 + metrics["warmup_steps"] + metrics["step_time"]["n"] == 6
