"""fsdp2: fully_shard per block and at the root, alone as a one-rank mesh and on 2 gloo ranks, same losses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from steps import losses, skip_reason
from torch.distributed.tensor import DTensor

from ampsuite import BuildContext, CheckContext, TrainStep
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.techniques import _checkpointing, _compile, _fsdp, fsdp
from ampsuite.plugins.techniques.checkpointing import CheckpointOptions
from ampsuite.plugins.techniques.compile import CompileOptions
from ampsuite.plugins.workloads.llm import LlmOptions

REGISTRY = load_registry(PluginSettings(autoload=False))
FP32 = fsdp.FsdpOptions(param_dtype="float32")
LLM = {"plugin": "llm", "preset": "tiny", "batch_size": 4}


@pytest.fixture
def one_rank() -> Iterator[None]:
    """The one-rank group fsdp2 starts in this process is gone after the test."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def llm_step() -> TrainStep:
    return REGISTRY.workloads["llm"].build(LlmOptions(preset="tiny"), BuildContext(torch.device("cpu"), 4, 0, ""))


@pytest.mark.slow
def test_one_process_shards_over_a_one_rank_mesh_and_trains_the_same(one_rank: None) -> None:
    reference = losses(llm_step(), 4)
    step = _fsdp.apply(llm_step(), FP32)
    assert step.model is not None and step.optimizer is not None
    params = list(step.model.parameters())
    assert all(isinstance(p, DTensor) for p in params)
    assert {id(p) for g in step.optimizer.param_groups for p in g["params"]} == {id(p) for p in params}
    assert step.notes["fsdp2"]["mesh"] == "one-rank group of this process"
    assert step.notes["fsdp2"]["sharded_blocks"] == 2 and step.notes["fsdp2"]["backend"] == "gloo"
    assert losses(step, 4) == pytest.approx(reference, rel=1e-5)


@pytest.mark.slow
def test_bf16_parameters_train_in_bf16(one_rank: None) -> None:
    step = _fsdp.apply(llm_step(), fsdp.FsdpOptions())
    values = losses(step, 6)
    assert all(torch.isfinite(torch.tensor(values))) and values[-1] < values[0]
    assert step.model is not None
    assert all(p.dtype == torch.float32 for p in step.model.parameters())  # the shards the optimizer steps


@pytest.mark.slow
def test_composes_with_checkpointing_and_per_block_compile(one_rank: None) -> None:
    reference = losses(llm_step(), 4)
    step = _checkpointing.apply(llm_step(), CheckpointOptions())
    step = _compile.apply(step, CompileOptions(backend="aot_eager", scope="block"))
    step = _fsdp.apply(step, FP32)
    assert losses(step, 4) == pytest.approx(reference, rel=1e-5)


def _context(workload: str, techniques: dict[str, Any]) -> CheckContext:
    record = REGISTRY.workloads[workload]
    return CheckContext(record, record.options(), "cpu", tuple(techniques), 4, techniques)


def test_checked_at_expansion() -> None:
    assert fsdp.check(_context("llm", {"fsdp2": FP32})) is None
    assert skip_reason("toy", "fsdp2") == "fsdp2 needs a workload with trait 'blocks'; 'toy' has none"
    whole = _context("llm", {"fsdp2": FP32, "torch-compile": CompileOptions()})
    assert "compile per block" in (fsdp.check(whole) or "")
    assert fsdp.check(_context("llm", {"fsdp2": FP32, "torch-compile": CompileOptions(scope="block")})) is None


@pytest.mark.slow
def test_two_gloo_ranks_give_the_unsharded_losses(ampsuite_run: Any) -> None:
    result = ampsuite_run(
        {
            "workloads": {"llm": {**LLM, "gpus": [1, 2]}},
            "combinations": {"fp32": [], "fsdp": ["fsdp2"], "fsdp-bf16": ["fsdp2"]},
            "combination_options": {"fsdp": {"fsdp2": {"param_dtype": "float32"}}},
        },
        isolated=True,
    )
    result.assert_all_passed()
    unsharded = result.numerics("llm/fp32/bs4")["losses"]
    assert result.numerics("llm/fsdp/x2/bs4")["losses"] == pytest.approx(unsharded, rel=1e-5)
    assert result.numerics("llm/fsdp/bs4")["losses"] == pytest.approx(unsharded, rel=1e-5)
    # bf16 parameters: the two ranks' mean of equal gradients is the one rank's gradient.
    assert result.numerics("llm/fsdp-bf16/x2/bs4")["losses"] == pytest.approx(
        result.numerics("llm/fsdp-bf16/bs4")["losses"], rel=1e-3
    )
    notes = result.notes("llm/fsdp/x2/bs4")
    assert notes["fsdp2"]["world_size"] == 2 and notes["fsdp2"]["mesh"] == "the data-parallel ranks"
    assert notes["distributed"]["wrapper"] == "FSDP2 (the fsdp2 technique)"
    assert result.metrics("llm/fsdp/x2/bs4")["throughput_per_gpu"] > 0
