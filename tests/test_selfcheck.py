"""ampsuite selfcheck: the plain loop trains exactly like the harness step, and the command reports a ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import toy_suite

from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.run import plainloops, selfcheck
from ampsuite.run.worker import build_step
from ampsuite.spec.options import build_options, options_as_dict
from ampsuite.spec.suitespec import MeasureSpec


def _step(workload: str, options: dict, techniques: tuple[str, ...] = (), batch_size: int = 16):
    registry = load_registry(PluginSettings())
    record = registry.workloads[workload]
    cell = {
        "workload": workload,
        "options": options_as_dict(build_options(record.options, options)),
        "techniques": [
            {"name": t, "options": options_as_dict(build_options(registry.techniques[t].options, {}))}
            for t in techniques
        ],
        "batch_size": batch_size,
    }
    return build_step(registry, cell, torch.device("cpu"), seed=0, data_dir="unused")


@pytest.mark.parametrize("techniques", [(), ("amp-bf16",)])
def test_plain_loop_trains_like_the_harness(techniques: tuple[str, ...]) -> None:
    harness, plain = _step("toy", {}, techniques), _step("toy", {}, techniques)
    run, by_hand = harness.compose(), plainloops.plain_step(plain)
    for _ in range(4):
        a, b = run(harness.data()), by_hand(plain.data())
        assert float(a) == pytest.approx(float(b.detach()), rel=1e-6)
    for p, q in zip(harness.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("techniques", [(), ("amp-bf16",)])
def test_the_llm_s_plain_loop_trains_like_the_harness(techniques: tuple[str, ...]) -> None:
    harness = _step("llm", {"preset": "tiny"}, techniques, batch_size=4)
    plain = _step("llm", {"preset": "tiny"}, techniques, batch_size=4)
    run, by_hand = harness.compose(), plainloops.plain_step(plain)
    for _ in range(3):
        assert float(run(harness.data())) == pytest.approx(float(by_hand(plain.data()).detach()), rel=1e-6)
    for p, q in zip(harness.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_selfcheck_covers_the_llm_recipes_on_a_gpu_and_the_tiny_llm_on_a_cpu() -> None:
    # docs/llm.md's table: every recipe with fused AdamW, as tests/gpu/llm.toml measures them.
    cuda = {c.name: c for c in selfcheck.CHECKS["cuda"] if c.workload == "llm"}
    assert {(c.techniques, c.technique_options.get("fp8", {}).get("recipe")) for c in cuda.values()} == {
        (("fused-optimizer", "tf32"), None),
        (("fused-optimizer", "amp-bf16"), None),
        (("fused-optimizer", "amp-bf16", "activation-checkpointing"), None),
        (("fused-optimizer", "amp-bf16", "torch-compile"), None),
        (("fused-optimizer", "amp-bf16", "fp8", "torch-compile"), "tensorwise"),
        (("fused-optimizer", "amp-bf16", "fp8", "torch-compile"), "rowwise"),
    }
    assert all(c.options == {"preset": "0.9b"} and c.batch_size == 8 for c in cuda.values())
    registry = load_registry(PluginSettings())
    for check in cuda.values():  # names and options the registry accepts (build_options raises), without a GPU
        built = selfcheck._cell(registry, check, check.techniques)["techniques"]
        assert sorted(t["name"] for t in built) == sorted(check.techniques)
    assert [c.name for c in selfcheck.CHECKS["cpu"] if c.workload == "llm"] == ["llm-tiny-fp32-bs8"]


def test_a_check_out_of_memory_is_reported_and_the_next_still_runs(monkeypatch, tmp_path, capsys) -> None:
    from ampsuite import cli

    calls: list[str] = []

    def run_check(check, device, rounds):
        calls.append(check.name)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")
        return selfcheck.CheckResult(check.name, 1.0, 0.001, 1.0, 0.001, 1.0, rounds, 20)

    released: list[str] = []
    monkeypatch.setattr(selfcheck, "run_check", run_check)
    monkeypatch.setattr(selfcheck, "release", released.append)
    out = tmp_path / "sc.json"
    assert cli.main(["selfcheck", "--device", "cpu", "--rounds", "1", "-o", str(out)]) == 1
    rows = json.loads(out.read_text())["checks"]
    assert len(rows) == len(calls) == len(released) == len(selfcheck.CHECKS["cpu"])
    assert rows[0]["not_checked"] == "out of memory on cpu: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert all(r["ratio"] == 1.0 for r in rows[1:])
    assert "not checked: out of memory" in capsys.readouterr().out


def test_a_recipe_this_machine_cannot_build_is_not_checked() -> None:
    check = selfcheck.Check("fp8-here", "llm", {"preset": "tiny"}, ("amp-bf16", "fp8"), 2)
    with pytest.raises(selfcheck.NotComparable, match=r"fp8-here: fp8 needs"):
        selfcheck.run_check(check, "cpu", rounds=1)


def test_plain_gemm_is_a_bare_matmul() -> None:
    step = _step("gemm", {"m": 16, "n": 8, "k": 24}, batch_size=1)
    batch = step.data()
    out = plainloops.plain_step(step)(batch)
    assert torch.equal(out, batch.inputs[0] @ batch.inputs[1])


def test_wrapped_steps_are_refused() -> None:
    check = selfcheck.Check("faulty", "toy", {}, ("inject-fault",), 8)
    with pytest.raises(ValueError, match="eager or compiled steps"):
        selfcheck.run_check(check, "cpu", rounds=1)


@pytest.mark.parametrize(
    ("techniques", "options"),
    [
        (("grad-accumulation",), {"steps": 2}),
        (("inference",), {}),
        (("grad-accumulation", "half-weights"), {"steps": 2}),
    ],
)
def test_steps_whose_phases_a_technique_replaced_are_refused(techniques: tuple[str, ...], options: dict) -> None:
    # The plain loops train the default step, or half-weights' by hand: accumulated micro-batches and a forward-only
    # step would be timed against a loop that is not theirs.
    check = selfcheck.Check("replaced", "toy", {}, techniques, 8, {techniques[0]: options})
    with pytest.raises(selfcheck.NotComparable, match="replaced the step's phases"):
        selfcheck.run_check(check, "cpu", rounds=1)


TINY_RESNET = {"depth": 18, "width": 8, "image_size": 32, "classes": 10}


@pytest.mark.parametrize(
    ("dtype", "workload", "options", "techniques"),
    [
        ("float16", "toy", {}, ()),
        ("bfloat16", "toy", {}, ()),
        # batch norm kept in float32 (two dtypes to copy), SGD with momentum that fused-optimizer starts at zero
        ("float16", "resnet", TINY_RESNET, ("fused-optimizer", "channels-last")),
        ("bfloat16", "resnet", TINY_RESNET, ()),
    ],
)
def test_plain_half_loop_trains_like_half_weights(
    dtype: str, workload: str, options: dict, techniques: tuple[str, ...]
) -> None:
    registry = load_registry(PluginSettings())
    half = {"dtype": dtype, "init_scale": 1024.0}
    chosen = sorted(
        [("half-weights", half), *((t, {}) for t in techniques)], key=lambda t: registry.techniques[t[0]].order
    )
    cell = {
        "workload": workload,
        "options": options_as_dict(build_options(registry.workloads[workload].options, options)),
        "techniques": [
            {"name": t, "options": options_as_dict(build_options(registry.techniques[t].options, o))} for t, o in chosen
        ],
        "batch_size": 4,
    }
    harness = build_step(registry, cell, torch.device("cpu"), seed=0, data_dir="unused")
    # in the order a cell applies them (selfcheck's own side is built so too)
    own = _step(workload, options, tuple(t for t, _ in chosen if t != "half-weights"), batch_size=4)
    started = {id(p) for p, state in own.optimizer.state.items() if state}
    params = [p for g in own.optimizer.param_groups for p in g["params"]]
    by_hand = plainloops.plain_half_step(own, getattr(torch, dtype), 1024.0)
    # fused SGD's momentum, started at zero by fused-optimizer, moved to the masters with them
    masters = [p for g in own.optimizer.param_groups for p in g["params"]]
    assert [bool(own.optimizer.state.get(m)) for m in masters] == [id(p) in started for p in params]
    assert len(started) == (len(params) if "fused-optimizer" in techniques else 0)
    run = harness.compose()
    for _ in range(3):
        a, b = run(harness.data()), by_hand(own.data())
        assert float(a) == float(b.detach())
    # the same half weights, FP32 masters (the optimizers' parameters) and optimizer state after the updates
    for p, q in zip(harness.model.parameters(), own.model.parameters(), strict=True):
        assert p.dtype == q.dtype and torch.equal(p, q)
    assert {p.dtype for p in own.model.parameters()} == (
        {getattr(torch, dtype)} if workload == "toy" else {getattr(torch, dtype), torch.float32}
    )
    theirs = [p for g in harness.optimizer.param_groups for p in g["params"]]
    assert all(p.dtype == torch.float32 for p in masters)
    for p, q in zip(theirs, masters, strict=True):
        assert torch.equal(p, q)
        for key, value in harness.optimizer.state[p].items():
            assert torch.equal(value, own.optimizer.state[q][key])


def test_the_half_weights_plain_loop_refuses_a_model_without_a_tensor_output() -> None:
    own = _step("toy", {})
    model = own.model
    own.model = lambda *inputs: (model(*inputs),)  # a third-party model returning a tuple, say
    own.model.modules = model.modules
    by_hand = plainloops.plain_half_step(own, torch.bfloat16, 1.0)
    with pytest.raises(selfcheck.NotComparable, match="returns tuple"):
        by_hand(own.data())


def test_a_half_weights_check_is_timed_against_the_hand_written_loop() -> None:
    fast = MeasureSpec(warmup_steps=1, min_steps=5, max_steps=10, max_seconds=0.5, noise_target=0.5)
    check = selfcheck.Check("o2", "toy", {}, ("half-weights",), 32, {"half-weights": {"dtype": "bfloat16"}})
    result = selfcheck.run_check(check, "cpu", rounds=1, measure=fast)
    assert result.harness_median > 0 and result.plain_per_step > 0


def test_run_check_times_both_sides() -> None:
    fast = MeasureSpec(warmup_steps=1, min_steps=5, max_steps=10, max_seconds=0.5, noise_target=0.5)
    result = selfcheck.run_check(selfcheck.Check("toy", "toy", {}, (), 32), "cpu", rounds=2, measure=fast)
    assert result.harness_median > 0 and result.plain_per_step > 0
    assert result.ratio == pytest.approx(result.plain_per_step / result.harness_median)
    assert 5 <= result.steps_per_round <= 10


@pytest.mark.slow
def test_command_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "selfcheck.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsuite",
            "selfcheck",
            "--device",
            "cpu",
            "-k",
            "toy",
            "--rounds",
            "1",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1 only flags a ratio below --min-ratio
    assert "toy-fp32-bs128: harness" in proc.stdout
    doc = json.loads(out.read_text())
    assert [c["name"] for c in doc["checks"]] == ["toy-fp32-bs128"]
    assert doc["environment"]["device"] == "cpu"


@pytest.mark.slow
def test_cells_checks_every_passed_cell_of_a_results_file(tmp_path: Path) -> None:
    suite = tmp_path / "suite.toml"
    text = toy_suite(
        "cells",
        cpu_threads=1,
        toy={"batch_size": 16, "hidden": 32},
        combinations={"fp32": [], "bf16": ["amp-bf16"], "broken": ["inject-fault"], "slow": ["fault-delay"]},
        techniques={"inject-fault": {"kind": "raise", "at": "apply"}, "fault-delay": {"seconds": 0.01}},
        measure={"warmup_steps": 1, "min_steps": 5, "max_steps": 20, "max_seconds": 0.2, "noise_target": 0.5},
    )
    suite.write_text(text, encoding="utf-8")
    out = tmp_path / "results.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsuite",
            "run",
            str(suite),
            "--no-peaks",
            "-o",
            str(out),
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.exists(), run.stdout + run.stderr
    from ampsuite import results

    doc = results.load(out)
    passed = {r["id"] for r in doc["cells"] if r["status"] == "passed"}
    checks = selfcheck.cell_checks(doc)
    assert {c.name for c in checks} == {f"cell {i}" for i in passed} and len(passed) == 3  # the failed cell is not
    bf16 = next(c for c in checks if "bf16" in c.name)
    record = next(r for r in doc["cells"] if r["id"] in bf16.name)
    assert bf16.techniques == tuple(t["name"] for t in record["techniques"]) and bf16.batch_size == 16
    args = ["selfcheck", "--cells", str(out), "-k", "bf16", "--rounds", "1", "--min-ratio", "0"]
    check = subprocess.run(
        [sys.executable, "-m", "ampsuite", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr
    assert f"{bf16.name}: harness" in check.stdout and "fp32" not in check.stdout
    # A passed cell the plain loop cannot express is named with the reason, and the others are still checked.
    args = ["selfcheck", "--cells", str(out), "-k", "slow or fp32", "--rounds", "1", "--min-ratio", "0"]
    both = subprocess.run([sys.executable, "-m", "ampsuite", *args], capture_output=True, text=True, timeout=300)
    assert both.returncode == 0, both.stderr
    assert "cell toy/slow/bs16: not checked: " in both.stdout and "drop wrapping techniques" in both.stdout
    assert "cell toy/fp32/bs16: harness" in both.stdout
