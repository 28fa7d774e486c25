"""cuda-graphs: when it refuses (on CPU too), and on a GPU that replays match the eager step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from steps import losses, one_batch_step, use
from torch import nn

from ampsuite import Batch, BuildContext, CaptureFailed, CheckContext, SkipCell, TrainStep, Workload
from ampsuite.plugins.techniques import cuda_graphs
from ampsuite.plugins.workloads import _toy, toy
from ampsuite.spec.options import build_options

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
GRAPHS = cuda_graphs.ampsuite_techniques()[0]


def graphs(step: TrainStep, **options: Any) -> TrainStep:
    return use(step, "cuda-graphs", **options)


def fake_cuda_step(**fields: Any) -> TrainStep:
    """A step that names a CUDA device; apply() decides without touching the device."""
    return TrainStep(device=torch.device("cuda"), batch_size=1, samples_per_step=1, data=lambda: Batch(()), **fields)


def check(traits: frozenset[str]) -> str | None:
    assert GRAPHS.check is not None
    workload = Workload(name="bert", summary="", build=lambda o, c: None, traits=traits)  # type: ignore[arg-type,return-value]
    return GRAPHS.check(CheckContext(workload, None, "cuda", ("cuda-graphs",), 8))


# -- refusals (CPU) ------------------------------------------------------------------


def test_cuda_graphs_require_cuda_and_static_shapes() -> None:
    assert "cuda" in GRAPHS.requires
    assert check(frozenset({"model", "dynamic-shapes"})) == (
        "a captured graph needs static shapes; workload 'bert' has dynamic shapes"
    )
    assert check(frozenset({"model"})) is None


def test_cuda_graphs_refuse_a_cpu_step(tmp_path: Any) -> None:
    step = _toy.build(toy.ToyOptions(), BuildContext(torch.device("cpu"), 4, 0, str(tmp_path)))
    with pytest.raises(SkipCell, match="needs a CUDA device; this step runs on cpu"):
        graphs(step)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graphs_refuse_to_stack_on_a_compile_mode_that_captures_graphs(mode: str) -> None:
    step = fake_cuda_step()
    step.notes["torch_compile"] = {"mode": mode}
    with pytest.raises(
        SkipCell, match=f"conflicts with torch-compile mode '{mode}', which already captures CUDA graphs"
    ):
        graphs(step)


def test_cuda_graphs_compose_with_a_compile_mode_without_graphs() -> None:
    step = fake_cuda_step()
    step.notes["torch_compile"] = {"mode": "max-autotune-no-cudagraphs"}
    assert len(graphs(step).wrappers) == 1


def test_capture_strategy_follows_the_scaler() -> None:
    whole = graphs(fake_cuda_step(), warmup_iters=2)
    assert whole.notes["cuda_graphs"] == {"capture": "whole-step", "warmup_iters": 2}
    partial = graphs(fake_cuda_step(scaler=object()))
    assert partial.notes["cuda_graphs"]["capture"] == "forward-backward"


def test_a_fused_optimizer_takes_the_scaler_into_the_whole_step_graph() -> None:
    p = nn.Parameter(torch.zeros(2))
    fused = torch.optim.SGD([p], lr=0.1, momentum=0.9, fused=True)
    assert graphs(fake_cuda_step(scaler=object(), optimizer=fused)).notes["cuda_graphs"]["capture"] == "whole-step"
    foreach = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    assert graphs(fake_cuda_step(scaler=object(), optimizer=foreach)).notes["cuda_graphs"]["capture"] == (
        "forward-backward"
    )
    # A workload's own update may read the scaler on the host: it stays outside the graph.
    custom = fake_cuda_step(scaler=object(), optimizer=fused, update=lambda: None)
    assert graphs(custom).notes["cuda_graphs"]["capture"] == "forward-backward"


def test_partial_capture_refuses_to_bypass_earlier_wrappers() -> None:
    step = fake_cuda_step(scaler=object())
    step.wrappers.append(lambda fn, st: fn)
    with pytest.raises(SkipCell, match="would bypass 1 step wrapper"):
        graphs(step)


def test_warmup_iters_must_be_positive() -> None:
    with pytest.raises(ValueError, match="warmup_iters: expected an integer >= 1, got 0"):
        build_options(cuda_graphs.GraphOptions, {"warmup_iters": 0})


# -- on the GPU ------------------------------------------------------------------------

N = 8


def cuda_toy(optimizer: Callable[[Any], torch.optim.Optimizer] | None = None) -> TrainStep:
    opts = toy.ToyOptions(features=32, hidden=64, layers=2, classes=10, lr=0.05)
    step = _toy.build(opts, BuildContext(torch.device("cuda"), 16, 0, "/nonexistent"))
    if optimizer is not None:
        assert step.model is not None
        step.optimizer = optimizer(step.model.parameters())
    return step


OPTIMIZERS = {
    "sgd": None,
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "adamw-fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
}


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_whole_step_replays_match_the_eager_losses(name: str) -> None:
    make = OPTIMIZERS[name]
    eager = losses(cuda_toy(make), N)
    step = graphs(cuda_toy(make))
    graphed = losses(step, N)
    assert graphed == pytest.approx(eager, rel=1e-4, abs=1e-6)
    assert graphed[0] == pytest.approx(eager[0], rel=1e-6)  # warm-up left no trace on the first step
    notes = step.notes["cuda_graphs"]
    assert notes["capture"] == "whole-step" and notes["capture_seconds"] > 0


@pytest.mark.cuda
@needs_cuda
def test_forward_backward_capture_with_a_grad_scaler_matches_eager() -> None:
    def fp16(step: TrainStep) -> TrainStep:
        return use(step, "amp-fp16", init_scale=1024.0, growth_interval=2)

    eager_step = fp16(cuda_toy())
    eager_run = eager_step.compose()
    eager, eager_scales = [], []
    for _ in range(N):
        eager.append(float(eager_run(eager_step.data())))
        eager_scales.append(eager_step.scaler.get_scale())  # type: ignore[union-attr]
    step = graphs(fp16(cuda_toy()))
    run = step.compose()
    graphed, scales = [], []
    for _ in range(N):
        graphed.append(float(run(step.data())))
        scales.append(step.scaler.get_scale())  # type: ignore[union-attr]
    assert step.notes["cuda_graphs"]["capture"] == "forward-backward"
    assert graphed == pytest.approx(eager, rel=1e-3, abs=1e-5)
    # Warm-up grew the scale too; restoring the scaler makes the replayed run grow it on the same steps.
    assert eager_scales[0] == 1024.0 and eager_scales[-1] > 1024.0
    assert scales == eager_scales
    assert step.model is not None and all(p.grad is not None for p in step.model.parameters())


@pytest.mark.cuda
@needs_cuda
def test_a_changed_batch_shape_is_an_error_not_a_silent_replay() -> None:
    step = graphs(cuda_toy())
    run = step.compose()
    run(step.data())
    batch = step.data()
    with pytest.raises(ValueError, match="batch shape changed"):
        run(Batch((batch.inputs[0][:4],), batch.target))


class RefusesCapture(nn.Module):
    """A forward that fails only while it is being captured (warm-up succeeds)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("not while capturing")
        return self.fc(x)


@pytest.mark.cuda
@needs_cuda
def test_a_failed_capture_is_reported_with_its_cause() -> None:
    model = RefusesCapture().cuda()
    step = one_batch_step(model, torch.randn(8, 4, device="cuda"), torch.randint(0, 2, (8,), device="cuda"))
    run = graphs(step).compose()
    with pytest.raises(CaptureFailed, match=r"^capture failed: RuntimeError: not while capturing$") as info:
        run(step.data())
    assert isinstance(info.value.__cause__, RuntimeError)
