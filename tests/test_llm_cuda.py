"""The LLM techniques on a GPU: FSDP2 over a one-rank NCCL group, FP8 with its all-gather, checkpointing's saving.

Skipped without CUDA; on the GPU machine:
``python -m pytest -m cuda tests/test_llm_cuda.py tests/test_compile_blocks.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from steps import losses

from ampsuite import BuildContext, TrainStep
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.techniques import _compile, _fp8, _fsdp, fp8, fsdp
from ampsuite.plugins.techniques.compile import CompileOptions
from ampsuite.plugins.workloads.llm import LlmOptions

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

REGISTRY = load_registry(PluginSettings(autoload=False))
# Every product a multiple of 16, as FP8's kernels need: dim 256, kv 128, SwiGLU 768, vocab 4096.
SMALL = LlmOptions(preset="tiny", dim=256, heads=4, kv_heads=2, ffn=768, vocab=4096, seq_len=256, layers=2)


@pytest.fixture
def one_rank() -> Iterator[None]:
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def step_on_gpu(options: LlmOptions = SMALL, batch_size: int = 4) -> TrainStep:
    return REGISTRY.workloads["llm"].build(options, BuildContext(torch.device("cuda"), batch_size, 0, ""))


def test_fsdp2_on_one_gpu_shards_over_a_one_rank_nccl_group(one_rank: None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = losses(step_on_gpu(), 4)
    step = _fsdp.apply(step_on_gpu(), fsdp.FsdpOptions(param_dtype="float32"))
    assert step.notes["fsdp2"]["backend"] == "nccl"
    assert losses(step, 4) == pytest.approx(reference, rel=1e-4)


@pytest.mark.skipif(fp8.torchao_missing(), reason="needs torchao")
def test_fp8_all_gather_under_fsdp2_with_per_block_compile_trains(one_rank: None) -> None:
    if torch.cuda.get_device_capability() < fp8.MIN_CAPABILITY:
        pytest.skip("needs FP8 Tensor Cores")
    step = step_on_gpu()
    step.autocast_dtype = torch.bfloat16
    step = _fp8.apply(step, fp8.Fp8Options(fsdp_all_gather=True))
    assert step.notes["fp8"]["converted_linears"] == 2 * 7  # every block's products; the head kept
    # The all-gather wraps each converted weight in a new Parameter: the optimizer must update those.
    updated = {id(p) for g in step.optimizer.param_groups for p in g["params"]}
    assert updated == {id(p) for p in step.model.parameters()}
    step = _compile.apply(step, CompileOptions(scope="block"))
    step = _fsdp.apply(step, fsdp.FsdpOptions())
    values = losses(step, 6)
    assert all(torch.isfinite(torch.tensor(values))) and values[-1] < values[0]


def test_checkpointing_lowers_the_gpu_peak(ampsuite_run: Any) -> None:
    workload = {"plugin": "llm", "preset": "tiny", "dim": 512, "layers": 8, "seq_len": 1024, "batch_size": 16}
    result = ampsuite_run(
        {
            "suite": {"device": "cuda"},
            "workloads": {"llm": workload},
            "combinations": {"bf16": ["amp-bf16"], "bf16-ac": ["amp-bf16", "activation-checkpointing"]},
        },
        isolated=True,
    )
    result.assert_all_passed()
    plain, ckpt = result.metrics("llm/bf16/bs16"), result.metrics("llm/bf16-ac/bs16")
    assert ckpt["peak_memory_allocated_bytes"] < 0.6 * plain["peak_memory_allocated_bytes"]
    assert result.metrics("llm/bf16/bs16")["model_tflops"] > 0
