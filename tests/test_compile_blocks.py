"""torch-compile's scope = "block": each of the workload's blocks compiled on its own, the rest eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from steps import losses
from torch._dynamo.eval_frame import OptimizedModule

from ampsuite import BuildContext, ProbeContext, SkipCell, TrainStep
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.probes import _flops, _tensorcores
from ampsuite.plugins.techniques import _compile
from ampsuite.plugins.techniques.compile import CompileOptions
from ampsuite.plugins.workloads.llm import LlmOptions
from ampsuite.spec.options import OptionError, build_options

REGISTRY = load_registry(PluginSettings(autoload=False))


def llm_step(device: str = "cpu") -> TrainStep:
    return REGISTRY.workloads["llm"].build(LlmOptions(preset="tiny"), BuildContext(torch.device(device), 2, 0, ""))


def test_each_block_is_compiled_and_the_losses_stay() -> None:
    reference = losses(llm_step(), 3)
    step = _compile.apply(llm_step(), CompileOptions(backend="aot_eager", scope="block"))
    assert step.model is not None and not isinstance(step.model, OptimizedModule)
    assert all(isinstance(block, OptimizedModule) for block in step.model_blocks())
    assert step.notes["torch_compile"]["scope"] == "block" and step.notes["torch_compile"]["blocks"] == 2
    assert losses(step, 3) == pytest.approx(reference, rel=1e-5)


def test_a_workload_without_blocks_is_skipped() -> None:
    toy = REGISTRY.workloads["toy"]
    step = toy.build(toy.options(), BuildContext(torch.device("cpu"), 4, 0, ""))
    with pytest.raises(SkipCell, match=r"torch-compile scope 'block': the workload names no repeated blocks"):
        _compile.apply(step, CompileOptions(backend="aot_eager", scope="block"))


def test_block_scope_skips_a_workload_without_blocks_at_expansion(ampsuite_run: Any) -> None:
    result = ampsuite_run(
        {
            "workloads": {"toy": {"batch_size": 4}},
            "combinations": {"compiled": ["torch-compile"]},
            "techniques": {"torch-compile": {"scope": "block", "backend": "aot_eager"}},
        }
    )
    result.assert_status("toy/compiled/bs4", "skipped", reason=r"scope 'block': workload 'toy' names no repeated")


def test_an_unknown_scope_is_a_one_line_error() -> None:
    with pytest.raises(OptionError, match=r"scope: expected one of 'model', 'block', got 'layer'") as info:
        build_options(CompileOptions, {"scope": "layer"})
    assert "\n" not in str(info.value)


def test_the_eager_probes_never_enter_compiled_blocks() -> None:
    """The flops and tensor-core probes' eager step runs the blocks' own code, compiling nothing more."""
    step = _compile.apply(llm_step(), CompileOptions(backend="aot_eager", scope="block"))
    run = step.compose()
    run(step.data())
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    ctx = ProbeContext(step=step, run=run, cell={})  # type: ignore[arg-type]
    _flops.inspect(ctx)
    _tensorcores.inspect(ctx)
    assert not ctx.warnings and ctx.metrics["flops_per_step"] > 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_compiled_blocks_stay_compiled_after_the_eager_probes(ampsuite_run: Any) -> None:
    step = _compile.apply(llm_step("cuda"), CompileOptions(scope="block"))
    run = step.compose()
    run(step.data())
    ctx = ProbeContext(step=step, run=run, cell={})  # type: ignore[arg-type]
    _flops.inspect(ctx)
    _tensorcores.inspect(ctx)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(step.data())
        torch.cuda.synchronize()
    assert sum("Torch-Compiled Region" in e.name for e in prof.events()) >= 2
