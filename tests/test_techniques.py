"""The built-in techniques on CPU: what each does to a step, and why it refuses when it cannot apply.

Loading and CUDA graphs have their own files (test_techniques_loading.py,
test_techniques_cuda_graphs.py).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from steps import losses, one_batch_step, skip_reason, use
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ampsuite import Batch, BuildContext, SkipCell, Technique, TrainStep
from ampsuite.plugins.techniques import (
    amp,
    channels_last,
    cuda_graphs,
    fused_optimizer,
    islands,
    loading,
    precision_flags,
)
from ampsuite.plugins.techniques import (
    compile as compile_,
)
from ampsuite.plugins.workloads import _toy, toy
from ampsuite.spec.options import OptionError, build_options, options_as_dict

MODULES = (amp, islands, cuda_graphs, loading, channels_last, precision_flags, compile_, fused_optimizer)
TECHNIQUES: dict[str, Technique] = {t.name: t for m in MODULES for t in m.ampsuite_techniques()}
CPU = torch.device("cpu")


def toy_step(tmp_path: Any, batch_size: int = 8, **options: Any) -> TrainStep:
    opts = toy.ToyOptions(**{"features": 8, "hidden": 16, "layers": 1, "classes": 4, **options})
    return _toy.build(opts, BuildContext(CPU, batch_size, 0, str(tmp_path)))


# -- declarations ------------------------------------------------------------


def test_techniques_apply_in_the_documented_order() -> None:
    orders = {name: t.order for name, t in TECHNIQUES.items()}
    assert orders == {
        "tf32": 5,
        "cudnn-benchmark": 5,
        "pinned-loading": 10,
        "pageable-loading": 10,
        "channels-last": 20,
        "amp-fp16": 30,
        "amp-bf16": 30,
        "fp32-islands": 40,
        "fused-optimizer": 50,
        "torch-compile": 80,
        "cuda-graphs": 90,
    }


@pytest.mark.parametrize(("a", "b"), [("amp-fp16", "amp-bf16"), ("pinned-loading", "pageable-loading")])
def test_exclusive_pairs_declare_their_conflict_both_ways(a: str, b: str) -> None:
    assert b in TECHNIQUES[a].conflicts
    assert a in TECHNIQUES[b].conflicts


def test_device_only_techniques_require_cuda() -> None:
    assert {name for name, t in TECHNIQUES.items() if "cuda" in t.requires} == {
        "tf32",
        "cudnn-benchmark",
        "cuda-graphs",
    }


def test_the_matrix_prunes_impossible_combinations_with_their_reasons() -> None:
    from ampsuite.host.manager import PluginSettings, load_registry
    from ampsuite.spec.matrix import expand
    from ampsuite.spec.suitefile import loads

    spec = loads(
        """
        [workloads.toy]
        batch_size = 8
        [combinations]
        fp32 = []
        both-amp = ["amp-fp16", "amp-bf16"]
        islands-alone = ["fp32-islands"]
        islands = ["amp-bf16", "fp32-islands"]
        graphs = ["cuda-graphs"]
        cl = ["channels-last"]
        pinned = ["pinned-loading"]
        pageable = ["pageable-loading"]
        """
    )
    cells = expand(spec, load_registry(PluginSettings(autoload=False)), "cpu")
    reasons = {c.combination: c.skip_reason for c in cells}
    assert reasons["fp32"] is None and reasons["islands"] is None and reasons["pageable"] is None
    assert reasons["both-amp"] == "amp-bf16 conflicts with amp-fp16"
    assert reasons["islands-alone"] is not None and "needs amp-fp16 or amp-bf16" in reasons["islands-alone"]
    assert reasons["graphs"] == "cuda-graphs needs a CUDA device; this run is on cpu"
    assert reasons["cl"] == "channels-last needs a workload with trait 'conv'; 'toy' has none"
    assert reasons["pinned"] is not None and "pinned memory" in reasons["pinned"]


# -- amp -------------------------------------------------------------------------


def _linear_output_dtypes(step: TrainStep) -> set[torch.dtype]:
    assert step.model is not None
    seen: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda mod, args, out: seen.add(out.dtype))
        for m in step.model.modules()
        if isinstance(m, nn.Linear)
    ]
    try:
        losses(step, 1)
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_amp_bf16_makes_linear_layers_compute_in_bfloat16(tmp_path: Any) -> None:
    plain = toy_step(tmp_path)
    assert _linear_output_dtypes(plain) == {torch.float32}
    step = use(toy_step(tmp_path), "amp-bf16")
    assert step.autocast_dtype == torch.bfloat16 and step.scaler is None
    assert _linear_output_dtypes(step) == {torch.bfloat16}
    assert step.model is not None and all(p.dtype == torch.float32 for p in step.model.parameters())


def test_amp_fp16_builds_a_grad_scaler_from_its_options(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "amp-fp16", init_scale=1024, growth_interval=7)
    assert step.autocast_dtype == torch.float16
    assert isinstance(step.scaler, torch.amp.GradScaler)
    assert step.scaler.get_scale() == 1024.0
    assert step.scaler.get_growth_interval() == 7
    assert step.notes["amp"] == {"dtype": "float16", "scaler": True, "init_scale": 1024.0, "growth_interval": 7}
    assert _linear_output_dtypes(step) == {torch.float16}


def test_amp_fp16_scaler_false_is_plain_fp16_autocast(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "amp-fp16", scaler=False)
    assert step.autocast_dtype == torch.float16 and step.scaler is None
    assert step.notes["amp"] == {"dtype": "float16", "scaler": False}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"init_scale": 0}, "init_scale: expected a number > 0, got 0.0"),
        ({"growth_interval": 0}, "growth_interval: expected an integer >= 1, got 0"),
        ({"backoff_factor": 1}, "backoff_factor: expected a number > 0 and < 1, got 1.0"),
    ],
)
def test_amp_fp16_rejects_bad_options_naming_them(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_options(amp.Fp16Options, options)


class TinyLoss(nn.Module):
    """Cross entropy times a tiny factor: its gradients fall below float16's smallest subnormal."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.inner = nn.CrossEntropyLoss()
        self.factor = factor

    def forward(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.inner(out, target) * self.factor


def _grads_after_one_backward(tmp_path: Any, scaler: bool) -> list[torch.Tensor]:
    step = toy_step(tmp_path)
    step.loss_fn = TinyLoss(1e-8)
    step = use(step, "amp-fp16", scaler=scaler)
    forward_backward, _ = step.phases()
    loss = forward_backward(step.data())
    assert float(loss) > 0
    assert step.model is not None
    return [p.grad for p in step.model.parameters() if p.grad is not None]


def test_loss_scaling_rescues_fp16_gradients_that_underflow_without_it(tmp_path: Any) -> None:
    unscaled = _grads_after_one_backward(tmp_path, scaler=False)
    assert unscaled and all(torch.count_nonzero(g) == 0 for g in unscaled)
    scaled = _grads_after_one_backward(tmp_path, scaler=True)
    assert all(torch.isfinite(g).all() for g in scaled)
    assert sum(int(torch.count_nonzero(g)) for g in scaled) > sum(g.numel() for g in scaled) // 2


def test_amp_fp16_scaler_steps_and_keeps_its_scale_on_clean_steps(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "amp-fp16", init_scale=256)
    before = [p.detach().clone() for p in step.model.parameters()]  # type: ignore[union-attr]
    values = losses(step, 3)
    assert all(torch.isfinite(torch.tensor(values)))
    assert step.scaler is not None and step.scaler.get_scale() == 256.0
    assert any(not torch.equal(a, b) for a, b in zip(before, step.model.parameters(), strict=True))  # type: ignore[union-attr]


# -- fp32 islands ------------------------------------------------------------------


class Sensitive(nn.Module):
    """One of each layer kind that fp32-islands knows."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc3 = nn.Linear(16, 4)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.fc1(x))
        h = self.bn(self.fc2(h))
        return self.softmax(self.fc3(h))


def sensitive_step() -> TrainStep:
    torch.manual_seed(0)
    model = Sensitive()
    return one_batch_step(model, torch.randn(8, 8), torch.randint(0, 4, (8,)))


WATCHED = {
    "native_layer_norm": "layernorm",
    "_native_batch_norm_legit_functional": "batchnorm",
    "_native_batch_norm_legit": "batchnorm",
    "native_batch_norm": "batchnorm",
    "_softmax": "softmax",
    "_log_softmax": "loss",
}


class InputDtypes(TorchDispatchMode):
    """Records the dtype of the first input of the ops that fp32-islands is about."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[torch.dtype]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kind = WATCHED.get(func.overloadpacket.__name__)
        if kind and isinstance(args[0], torch.Tensor):
            self.seen.setdefault(kind, set()).add(args[0].dtype)
        return func(*args, **(kwargs or {}))


def _op_dtypes(step: TrainStep) -> dict[str, set[torch.dtype]]:
    forward_backward, _ = step.phases()
    with InputDtypes() as mode:
        forward_backward(step.data())
    return mode.seen


def test_without_islands_cpu_autocast_runs_the_sensitive_ops_in_bfloat16() -> None:
    seen = _op_dtypes(use(sensitive_step(), "amp-bf16"))
    assert seen["layernorm"] == {torch.bfloat16}
    assert seen["batchnorm"] == {torch.bfloat16}
    assert seen["softmax"] == {torch.bfloat16}


def test_fp32_islands_run_every_sensitive_op_in_float32() -> None:
    step = use(use(sensitive_step(), "amp-bf16"), "fp32-islands")
    seen = _op_dtypes(step)
    assert set(seen) == {"layernorm", "batchnorm", "softmax", "loss"}
    assert all(dtypes == {torch.float32} for dtypes in seen.values()), seen
    assert step.notes["fp32_islands"] == {
        "applied": {"layernorm": 1, "softmax": 1, "batchnorm": 1, "loss": 1},
        "missing": [],
        "output_dtype": "float32",
    }


def test_an_island_returns_float32_and_keeps_parameters_float32() -> None:
    step = use(use(sensitive_step(), "amp-bf16"), "fp32-islands", layers=["layernorm"])
    model = step.model
    assert isinstance(model, Sensitive)
    with step.autocast():
        h = model.fc1(torch.randn(2, 8))
        assert h.dtype == torch.bfloat16
        assert model.norm(h).dtype == torch.float32
        assert model.softmax(h).dtype == torch.bfloat16  # not asked for: untouched
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert step.notes["fp32_islands"]["applied"] == {"layernorm": 1}


def test_fp32_islands_on_the_toy_record_what_is_missing(tmp_path: Any) -> None:
    step = use(use(toy_step(tmp_path), "amp-fp16"), "fp32-islands")
    assert step.notes["fp32_islands"]["applied"] == {"loss": 1}
    assert step.notes["fp32_islands"]["missing"] == ["layernorm", "softmax", "batchnorm"]
    assert all(torch.isfinite(torch.tensor(losses(step, 2))))


def test_fp32_islands_skip_when_nothing_can_be_islanded(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "amp-bf16")
    with pytest.raises(SkipCell, match="found none of softmax, batchnorm"):
        use(step, "fp32-islands", layers=["softmax", "batchnorm"])


def test_fp32_islands_need_an_amp_technique() -> None:
    assert skip_reason("toy", "fp32-islands") == (
        "fp32-islands: needs amp-fp16 or amp-bf16 in the same combination (without autocast everything is float32 "
        "already)"
    )
    assert skip_reason("toy", "amp-bf16", "fp32-islands") is None


def test_fp32_islands_are_refused_before_running_where_there_is_no_model() -> None:
    # The GEMM workload has no model: the dry run must already say the cell is skipped.
    reason = skip_reason("gemm", "amp-bf16", "fp32-islands")
    assert reason == "fp32-islands needs a workload with trait 'model'; 'gemm' has none"
    with pytest.raises(SkipCell, match="needs amp-fp16 or amp-bf16"):
        use(sensitive_step(), "fp32-islands")


def test_fp32_islands_reject_an_unknown_layer_kind() -> None:
    with pytest.raises(ValueError, match=r"^layers\[1\]: expected one of 'layernorm', 'softmax', .*, got 'gelu'$"):
        build_options(islands.IslandsOptions, {"layers": ["softmax", "gelu"]})
    with pytest.raises(ValueError, match=r"^layers: expected a non-empty list, got \(\)$"):
        build_options(islands.IslandsOptions, {"layers": []})


# -- channels-last ----------------------------------------------------------------


def conv_step() -> TrainStep:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)
    )
    pool = [Batch((torch.randn(4, 3, 8, 8),), torch.randint(0, 4, (4,))) for _ in range(2)]
    cursor = iter(range(1 << 30))
    return TrainStep(
        device=CPU,
        batch_size=4,
        samples_per_step=4,
        data=lambda: pool[next(cursor) % 2],
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
    )


def test_channels_last_converts_weights_and_inputs_without_changing_the_losses() -> None:
    reference = losses(conv_step(), 3)
    step = use(conv_step(), "channels-last")
    conv = step.model[0]  # type: ignore[index]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert step.memory_format == torch.channels_last
    first = step.data()
    assert first.inputs[0].is_contiguous(memory_format=torch.channels_last)
    step.data()
    assert step.data().inputs[0] is first.inputs[0]  # the pool was converted once, not every step
    fresh = use(conv_step(), "channels-last")
    assert losses(fresh, 3) == pytest.approx(reference, rel=1e-5)


def test_channels_last_needs_a_conv_workload() -> None:
    assert skip_reason("bert", "channels-last") == "channels-last needs a workload with trait 'conv'; 'bert' has none"
    assert skip_reason("resnet", "channels-last") is None


# -- precision flags ------------------------------------------------------------------


@pytest.fixture
def baseline_flags() -> Iterator[None]:
    """The worker's FP32 baseline, restored afterwards (the flags are process-wide)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    limit = torch.backends.cudnn.benchmark_limit
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved
        torch.backends.cudnn.benchmark_limit = limit


def _cuda_step_without_tensors() -> TrainStep:
    # Flags are process-wide host settings: a step that names a CUDA device is
    # enough to exercise them on a machine without one.
    return TrainStep(device=torch.device("cuda"), batch_size=1, samples_per_step=1, data=lambda: Batch(()))


def test_tf32_turns_on_tf32_and_every_api_can_still_read_it(baseline_flags: None) -> None:
    step = use(_cuda_step_without_tensors(), "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert step.notes["tf32"]["reported"] == {"matmul": "tf32", "cudnn_conv": "tf32", "cudnn_rnn": "tf32"}
    assert step.notes["tf32"]["float32_matmul_precision"] == "high"


def test_cudnn_benchmark_turns_on_autotuning(baseline_flags: None) -> None:
    step = use(_cuda_step_without_tensors(), "cudnn-benchmark")
    assert torch.backends.cudnn.benchmark is True
    assert step.notes["cudnn_benchmark"] == {
        "torch.backends.cudnn.benchmark": True,
        "torch.backends.cudnn.benchmark_limit": 10,  # PyTorch's own default
    }


def test_cudnn_benchmark_times_as_many_algorithms_as_its_limit_says(baseline_flags: None) -> None:
    step = use(_cuda_step_without_tensors(), "cudnn-benchmark", limit=0)
    assert torch.backends.cudnn.benchmark_limit == 0
    assert step.notes["cudnn_benchmark"]["torch.backends.cudnn.benchmark_limit"] == 0


@pytest.mark.parametrize(
    ("limit", "match"),
    [
        (-1, "limit: expected an integer >= 0, got -1"),
        (True, "expected an integer, got True"),
        (2.5, "expected an integer"),
    ],
)
def test_cudnn_benchmark_refuses_a_limit_that_is_no_count(limit: Any, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        build_options(TECHNIQUES["cudnn-benchmark"].options, {"limit": limit})


@pytest.mark.parametrize("name", ["tf32", "cudnn-benchmark"])
def test_precision_flags_refuse_a_cpu_step(tmp_path: Any, name: str, baseline_flags: None) -> None:
    with pytest.raises(SkipCell, match="needs a CUDA device"):
        use(toy_step(tmp_path), name)
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.benchmark


# -- fused optimizer --------------------------------------------------------------------


def _with_optimizer(tmp_path: Any, make: Callable[[Any], torch.optim.Optimizer]) -> TrainStep:
    step = toy_step(tmp_path)
    assert step.model is not None
    step.optimizer = make(step.model.parameters())
    return step


def _hyperparameters(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    return [{k: v for k, v in g.items() if k not in ("params", "fused", "foreach")} for g in optimizer.param_groups]


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4, nesterov=True),
        lambda ps: torch.optim.Adam(ps, lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01),
        lambda ps: torch.optim.AdamW(ps, lr=3e-3, weight_decay=0.1, amsgrad=True),
    ],
    ids=["SGD", "Adam", "AdamW"],
)
def test_fused_optimizer_keeps_class_params_and_hyperparameters(tmp_path: Any, make: Any) -> None:
    reference_step = _with_optimizer(tmp_path, make)
    reference = losses(reference_step, 4)
    step = _with_optimizer(tmp_path, make)
    old = step.optimizer
    assert old is not None
    step = use(step, "fused-optimizer")
    new = step.optimizer
    assert type(new) is type(old) and new is not old
    assert all(g["fused"] is True for g in new.param_groups)
    assert _hyperparameters(new) == _hyperparameters(old)
    assert [p for g in new.param_groups for p in g["params"]] == [p for g in old.param_groups for p in g["params"]]
    notes = {"class": type(old).__name__, "fused": True}
    if isinstance(old, torch.optim.SGD):
        count = len(list(reference_step.model.parameters()))
        notes["momentum_buffers"] = f"{count} started at zero (a skipped first step)"
    assert step.notes["fused_optimizer"] == notes
    assert losses(step, 4) == pytest.approx(reference, rel=1e-4)


def test_fused_sgd_keeps_its_momentum_through_a_skipped_first_step(tmp_path: Any) -> None:
    """torch's fused SGD fills its momentum buffers on the first step, which a loss scaler may skip."""

    def make(ps: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4)

    reference_step = _with_optimizer(tmp_path, make)
    step = use(_with_optimizer(tmp_path, make), "fused-optimizer")
    optimizer, reference = step.optimizer, reference_step.optimizer
    assert optimizer is not None and reference is not None
    params = [p for g in optimizer.param_groups for p in g["params"]]
    assert all(torch.equal(optimizer.state[p]["momentum_buffer"], torch.zeros_like(p)) for p in params)
    # What GradScaler.step does with an optimizer that takes the scale itself, on an overflow:
    for p in params:
        p.grad = torch.full_like(p, float("inf"))
    optimizer.grad_scale, optimizer.found_inf = torch.ones(()), torch.ones(())  # type: ignore[attr-defined]
    optimizer.step()
    del optimizer.grad_scale, optimizer.found_inf  # type: ignore[attr-defined]
    assert all(torch.equal(optimizer.state[p]["momentum_buffer"], torch.zeros_like(p)) for p in params)
    # ... and the next step is the reference's first one.
    for p, q in zip(params, [p for g in reference.param_groups for p in g["params"]], strict=True):
        p.grad = q.grad = torch.linspace(-1, 1, p.numel()).reshape(p.shape)
    optimizer.step()
    reference.step()
    for p, q in zip(params, [p for g in reference.param_groups for p in g["params"]], strict=True):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7)
        assert torch.allclose(optimizer.state[p]["momentum_buffer"], reference.state[q]["momentum_buffer"])


def test_fused_optimizer_skips_an_optimizer_without_a_fused_kernel(tmp_path: Any) -> None:
    step = _with_optimizer(tmp_path, lambda ps: torch.optim.RMSprop(ps, lr=0.01))
    with pytest.raises(SkipCell, match="RMSprop has no fused implementation"):
        use(step, "fused-optimizer")


def test_an_optimizer_rebuilt_by_name_updates_the_parameters_that_replaced_the_old_ones() -> None:
    """What fp8's all-gather and fsdp2 do to a model: new Parameter objects under the same names."""
    from ampsuite.plugins.techniques._optimizer import by_name, parameter_names, rebuilt_optimizer

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    head = model[1].weight
    old = torch.optim.AdamW(
        [{"params": [model[0].weight, model[0].bias], "lr": 0.1}, {"params": [head, model[1].bias]}], lr=0.01
    )
    names = parameter_names(model)
    model[0].weight = nn.Parameter(model[0].weight.detach().clone())
    new = rebuilt_optimizer(old, by_name(model, names))
    assert type(new) is torch.optim.AdamW and [g["lr"] for g in new.param_groups] == [0.1, 0.01]
    assert [p for g in new.param_groups for p in g["params"]] == list(model.parameters())
    assert new.param_groups[1]["params"][0] is head
    before = model[0].weight.detach().clone()
    model(torch.ones(3, 4)).sum().backward()
    new.step()
    assert not torch.equal(model[0].weight, before)


# -- torch.compile ---------------------------------------------------------------------------


def test_torch_compile_wraps_the_model_and_keeps_the_losses(tmp_path: Any) -> None:
    reference = losses(toy_step(tmp_path), 3)
    step = use(toy_step(tmp_path), "torch-compile", backend="aot_eager")
    assert isinstance(step.model, torch._dynamo.eval_frame.OptimizedModule)
    assert step.notes["torch_compile"] == {
        "mode": "default",
        "backend": "aot_eager",
        "fullgraph": False,
        "dynamic": False,
        "inductor": {},
        "scope": "model",
    }
    assert losses(step, 3) == pytest.approx(reference, rel=1e-5)


class _DtypeBlindCacheDetails:
    """The shape of torch 2.11's AOTAutograd cache details: autocast on or off, no dtype."""

    def _record_runtime_state(self) -> None:
        self.disable_amp = torch._C._is_any_autocast_enabled()


def test_torch_compile_reads_whether_the_aot_cache_keys_the_autocast_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._functorch._aot_autograd import autograd_cache

    from ampsuite.plugins.techniques._compile import autocast_keyed_cache

    monkeypatch.setattr(autograd_cache, "AOTAutogradCacheDetails", _DtypeBlindCacheDetails)
    assert autocast_keyed_cache() is False
    monkeypatch.undo()
    fixed = "get_autocast_dtype" in inspect.getsource(autograd_cache.AOTAutogradCacheDetails)
    assert autocast_keyed_cache() is fixed


@pytest.mark.parametrize("autocast", [True, False], ids=["autocast", "fp32"])
def test_torch_compile_turns_a_dtype_blind_aot_cache_off_under_autocast(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, autocast: bool
) -> None:
    import torch._functorch.config as functorch_config

    from ampsuite.plugins.techniques import _compile

    monkeypatch.setattr(_compile, "autocast_keyed_cache", lambda: False)
    step = toy_step(tmp_path)
    if autocast:
        step.autocast_dtype = torch.bfloat16
    # torch's config modules restore themselves with patch(); monkeypatch's undo may delete the key (pytest 9.2)
    with functorch_config.patch(enable_autograd_cache=True):
        step = use(step, "torch-compile", backend="aot_eager")
        assert functorch_config.enable_autograd_cache is (not autocast)
    assert ("aot_autograd_cache" in step.notes["torch_compile"]) is autocast
    if autocast:
        assert "pytorch/pytorch#181564" in step.notes["torch_compile"]["aot_autograd_cache"]


def test_torch_compile_leaves_a_dtype_keyed_aot_cache_on(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._functorch.config as functorch_config

    from ampsuite.plugins.techniques import _compile

    monkeypatch.setattr(_compile, "autocast_keyed_cache", lambda: True)
    step = toy_step(tmp_path)
    step.autocast_dtype = torch.float16
    with functorch_config.patch(enable_autograd_cache=True):
        step = use(step, "torch-compile", backend="aot_eager")
        assert functorch_config.enable_autograd_cache is True
    assert "aot_autograd_cache" not in step.notes["torch_compile"]


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_torch_compile_passes_the_mode_as_options_plus_the_inductor_table(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    import torch._inductor

    calls: list[dict[str, Any]] = []
    real_compile = torch.compile

    def recording_compile(model: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_compile(model, **kwargs)  # torch checks the options' names and types here, compiling nothing yet

    monkeypatch.setattr(torch, "compile", recording_compile)
    table = {"coordinate_descent_tuning": True, "triton.tile_reductions": True, "triton.max_tiles": 3}
    step = use(toy_step(tmp_path), "torch-compile", mode=mode, inductor=table)
    (kwargs,) = calls
    # torch.compile refuses mode and options together: the mode travels as its own options, the table on top.
    assert "mode" not in kwargs and kwargs["dynamic"] is False
    assert kwargs["options"] == {**torch._inductor.list_mode_options(mode), **table}
    assert isinstance(step.model, torch._dynamo.eval_frame.OptimizedModule)
    assert step.notes["torch_compile"]["inductor"] == table and step.notes["torch_compile"]["mode"] == mode


def test_an_inductor_entry_can_turn_off_what_the_mode_sets(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: calls.append(kwargs) or model)
    use(toy_step(tmp_path), "torch-compile", mode="reduce-overhead", inductor={"triton.cudagraphs": False})
    (kwargs,) = calls
    assert kwargs["options"] == {"triton.cudagraphs": False}


def test_the_inductor_table_is_read_from_a_suite_file_and_merged_per_combination(
    tmp_path: Any, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[techniques.torch-compile.inductor] reaches every compiled cell, unquoted dotted keys included;
    [combination_options.NAME.torch-compile.inductor] adds entries on top in one combination, as any option
    there goes on top of [techniques]; the cell's options build into the kwargs torch.compile receives."""
    from ampsuite.spec import matrix, suitefile

    text = (
        "[workloads.toy]\nbatch_size = 8\n"
        '[combinations]\nfp32 = []\nplain = ["torch-compile"]\nfused = ["torch-compile"]\n'
        '[techniques.torch-compile]\nmode = "reduce-overhead"\n'
        "[techniques.torch-compile.inductor]\ncoordinate_descent_tuning = true\ntriton.tile_reductions = true\n"
        "[combination_options.fused.torch-compile]\nfullgraph = true\n"
        "[combination_options.fused.torch-compile.inductor]\ncombo_kernels = true\ncoordinate_descent_tuning = false\n"
    )
    cells = {c.combination: c for c in matrix.expand(suitefile.loads(text, "suite.toml"), registry, "cpu")}
    plain = dict(cells["plain"].techniques)["torch-compile"]
    fused = dict(cells["fused"].techniques)["torch-compile"]
    assert plain["inductor"] == {"coordinate_descent_tuning": True, "triton.tile_reductions": True}
    assert plain["mode"] == "reduce-overhead" and plain["fullgraph"] is False
    assert fused == {
        "mode": "reduce-overhead",
        "fullgraph": True,
        "backend": "inductor",
        "scope": "model",
        "inductor": {"coordinate_descent_tuning": False, "triton.tile_reductions": True, "combo_kernels": True},
    }
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: calls.append(kwargs) or model)
    TECHNIQUES["torch-compile"].apply(toy_step(tmp_path), build_options(compile_.CompileOptions, fused))
    (kwargs,) = calls
    assert kwargs["options"] == {"triton.cudagraphs": True, **fused["inductor"]} and kwargs["fullgraph"] is True


def test_an_inductor_setting_is_checked_against_this_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from ampsuite.plugins.techniques import _compile

    with pytest.raises(OptionError) as info:
        build_options(compile_.CompileOptions, {"inductor": {"tile_reductionz": True}})
    assert info.value.key == "inductor.tile_reductionz"
    assert info.value.message == (
        f"not a torch._inductor.config setting of torch {torch.__version__}; did you mean 'triton.tile_reductions'?"
    )
    # A torch without a setting (a newer torch's) refuses it the same way, before any cell runs.
    monkeypatch.setattr(_compile, "_setting_names", lambda: ("combo_kernels", "triton.tile_reductions"))
    with pytest.raises(OptionError, match=r"^inductor\.\"triton\.enable_pdl\": not a torch\._inductor\.config setting"):
        build_options(compile_.CompileOptions, {"inductor": {"combo_kernels": True, "triton.enable_pdl": True}})


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ({"coordinate_descent_tuning": 1}, "inductor.coordinate_descent_tuning", "expected true or false, got 1"),
        ({"triton.max_tiles": "two"}, 'inductor."triton.max_tiles"', "expected int or none, got 'two'"),
        ({"max_autotune_gemm_backends": True}, "inductor.max_autotune_gemm_backends", "expected a string, got True"),
        ({"worker_log_path": "x"}, "inductor.worker_log_path", "declares it without a type"),
    ],
)
def test_an_inductor_value_of_the_wrong_type_is_refused(table: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(OptionError) as info:
        build_options(compile_.CompileOptions, {"inductor": table})
    assert info.value.key == key and message in info.value.message


def test_inductor_values_take_the_settings_types(tmp_path: Any) -> None:
    """A float setting takes a TOML integer and a tuple setting a TOML array, as torch.compile's own check
    (isinstance) wants them: built, they are a float and a tuple, and torch.compile accepts them."""
    table = {"cpu_gpu_bw": 50, "cuda.cutlass_dynamic_cluster_shape": [1, 1, 1]}
    built = build_options(compile_.CompileOptions, {"inductor": table})
    assert built.inductor == {"cpu_gpu_bw": 50.0, "cuda.cutlass_dynamic_cluster_shape": (1, 1, 1)}
    assert isinstance(built.inductor["cpu_gpu_bw"], float)
    assert options_as_dict(built)["inductor"] == {"cpu_gpu_bw": 50.0, "cuda.cutlass_dynamic_cluster_shape": [1, 1, 1]}
    step = TECHNIQUES["torch-compile"].apply(toy_step(tmp_path), built)  # torch.compile checks the types here
    assert step.notes["torch_compile"]["inductor"] == built.inductor


def test_torch_compile_without_extra_settings_passes_the_mode(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: calls.append(kwargs) or model)
    use(toy_step(tmp_path), "torch-compile", mode="reduce-overhead")
    (kwargs,) = calls
    assert kwargs["mode"] == "reduce-overhead" and "options" not in kwargs


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "fast"}, "mode: expected one of 'default', 'reduce-overhead', .* got 'fast'"),
        ({"backend": ""}, "backend: expected a non-empty string, got ''"),
        ({"mode": "max-autotune", "backend": "eager"}, "applies to the inductor backend only"),
        (
            {"inductor": {"combo_kernels": True}, "backend": "aot_eager"},
            r"inductor settings \(combo_kernels\) apply to the inductor backend only",
        ),
        ({"inductor": ["combo_kernels"]}, r"inductor: expected a table \(KEY = value\), got \['combo_kernels'\]"),
        # A name the old booleans used is no option any more: the table says which settings it meant.
        ({"tile_reductions": True}, "tile_reductions: unknown option"),
    ],
)
def test_torch_compile_rejects_bad_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_options(compile_.CompileOptions, options)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("AMPSUITE_SLOW_TESTS"), reason="inductor on CPU takes ~20 s; set AMPSUITE_SLOW_TESTS=1"
)
@pytest.mark.parametrize("inductor", [{}, {"coordinate_descent_tuning": True}])
def test_torch_compile_with_inductor_matches_eager(tmp_path: Any, inductor: dict[str, Any]) -> None:
    reference = losses(toy_step(tmp_path), 3)
    step = use(toy_step(tmp_path), "torch-compile", inductor=inductor)
    assert losses(step, 3) == pytest.approx(reference, rel=1e-4)


# -- composition -----------------------------------------------------------------------------


def test_a_cpu_stack_of_techniques_composes_in_order(tmp_path: Any) -> None:
    step = toy_step(tmp_path)
    names = ["pageable-loading", "amp-bf16", "fp32-islands", "fused-optimizer", "torch-compile"]
    for name in sorted(names, key=lambda n: TECHNIQUES[n].order):
        step = use(step, name, **({"backend": "aot_eager"} if name == "torch-compile" else {}))
    values = losses(step, 3)
    assert all(torch.isfinite(torch.tensor(values)))
    assert set(step.notes) == {"loading", "amp", "fp32_islands", "fused_optimizer", "torch_compile"}
