"""The articles' recipes on CPU: gradient accumulation, half weights (O2), the optimizer option (LAMB/AdamW).

What each technique does to a step, its losses against the plain step, and why
it refuses (one line, or skipped with the reason) where it cannot apply.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

import pytest
import torch
from conftest import toy_suite
from steps import losses, use
from torch import nn

from ampsuite import BuildContext, CheckContext, SkipCell, Technique, TrainStep, Workload
from ampsuite.contract.errors import SuiteFileError
from ampsuite.host import session
from ampsuite.plugins.techniques import amp, fused_optimizer, grad_accumulation, half_weights, inference
from ampsuite.plugins.workloads import _cnn, _toy, _transformer, cnn, optimizers, toy, transformer, vit
from ampsuite.spec.options import build_options

MODULES = (amp, fused_optimizer, grad_accumulation, half_weights, inference)
TECHNIQUES: dict[str, Technique] = {t.name: t for m in MODULES for t in m.ampsuite_techniques()}
CPU = torch.device("cpu")
TINY_BERT = {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "seq_len": 16, "vocab": 101}


def toy_step(tmp_path: Any, batch_size: int = 8, **options: Any) -> TrainStep:
    opts = toy.ToyOptions(**{"features": 8, "hidden": 16, "layers": 2, "classes": 4, **options})
    return _toy.build(opts, BuildContext(CPU, batch_size, 0, str(tmp_path)))


def bert_step(tmp_path: Any, batch_size: int = 8, **options: Any) -> TrainStep:
    opts = transformer.BertOptions(**{**TINY_BERT, **options})
    return _transformer.build(opts, BuildContext(CPU, batch_size, 0, str(tmp_path)))


def resnet_step(tmp_path: Any, batch_size: int = 4, **options: Any) -> TrainStep:
    opts = cnn.ResNetOptions(**{"depth": 18, "width": 8, "image_size": 32, "classes": 10, **options})
    return _cnn.build(opts, BuildContext(CPU, batch_size, 0, str(tmp_path)))


def check_reason(
    name: str, techniques: tuple[str, ...] = (), batch_size: int = 8, options: dict[str, Any] | None = None
) -> str | None:
    technique = TECHNIQUES[name]
    assert technique.check is not None
    workload = Workload(name="w", summary="", build=lambda o, c: None, traits=frozenset({"model"}))  # type: ignore[arg-type,return-value]
    opts = {name: build_options(technique.options, options or {})}
    return technique.check(CheckContext(workload, None, "cpu", (name, *techniques), batch_size, opts))


def dry_run(write_suite: Any, **parts: Any) -> dict[str, str | None]:
    """{cell id: skip reason or None} of the CPU suite ``toy_suite`` builds of ``parts``, as ``--dry-run`` shows it."""
    plan = session.plan(write_suite(toy_suite("r", **parts)), device="cpu")
    return {c.id: c.skip_reason for c in plan.cells}


# -- declarations ----------------------------------------------------------------


def test_orders_put_each_recipe_where_it_composes() -> None:
    orders = {name: t.order for name, t in TECHNIQUES.items()}
    assert orders["half-weights"] == orders["amp-fp16"] == 30  # replaces AMP
    assert orders["amp-fp16"] < orders["grad-accumulation"] < orders["fused-optimizer"]
    assert orders["fused-optimizer"] < orders["inference"] < 80  # before torch-compile and cuda-graphs


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("grad-accumulation", {"steps": 0}, "steps: expected an integer >= 1, got 0"),
        ("half-weights", {"dtype": "float8"}, "dtype"),
        ("half-weights", {"init_scale": 0}, "init_scale: expected a number > 0, got 0.0"),
    ],
)
def test_bad_options_are_refused_in_one_line(name: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, SuiteFileError)) as info:
        build_options(TECHNIQUES[name].options, options)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_options_in_a_suite_file_are_one_line_errors(write_suite: Any) -> None:
    with pytest.raises(SuiteFileError) as info:
        dry_run(write_suite, combinations={"a": ["grad-accumulation"]}, techniques={"grad-accumulation": {"steps": -2}})
    message = str(info.value)
    assert "grad-accumulation.steps: expected an integer >= 1, got -2" in message and "\n" not in message


def test_an_unknown_optimizer_is_refused_in_one_line() -> None:
    for workload in (cnn, transformer, vit):
        with pytest.raises(ValueError, match=r"^optimizer: expected one of 'sgd', 'adamw', 'lamb', got 'adam'$"):
            build_options(workload.ampsuite_workloads()[0].options, {"optimizer": "adam"})


# -- grad-accumulation -------------------------------------------------------------


@pytest.mark.parametrize("build", [toy_step, bert_step], ids=["toy", "bert-tiny"])
def test_accumulation_losses_equal_the_full_batch(tmp_path: Any, build: Any) -> None:
    plain = losses(build(tmp_path), 5)
    one = losses(use(build(tmp_path), "grad-accumulation", steps=1), 5)
    four = losses(use(build(tmp_path), "grad-accumulation", steps=4), 5)
    assert one == pytest.approx(plain, rel=1e-6)
    assert four == pytest.approx(plain, rel=1e-5, abs=1e-6)
    assert plain[0] != plain[-1]  # the updates happened: these are trajectories, not one loss


def test_accumulation_updates_once_per_effective_batch(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "grad-accumulation", steps=4)
    calls = []
    opt = step.optimizer
    assert opt is not None
    original = opt.step
    opt.step = lambda *a, **k: calls.append(1) or original(*a, **k)  # type: ignore[method-assign]
    seen: list[int] = []
    inner = step.model
    assert inner is not None
    inner.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    losses(step, 2)
    assert calls == [1, 1] and seen == [2] * 8
    assert step.samples_per_step == 8  # throughput stays per sample of the full batch
    assert step.notes["grad_accumulation"] == {"steps": 4, "micro_batch": 2}


def test_accumulation_with_a_grad_scaler_follows_the_amp_recipe(tmp_path: Any) -> None:
    step = use(use(toy_step(tmp_path), "amp-fp16"), "grad-accumulation", steps=2)
    scaler = step.scaler
    assert scaler is not None
    scaled: list[float] = []
    original = scaler.scale
    scaler.scale = lambda loss: scaled.append(float(loss.detach())) or original(loss)  # type: ignore[method-assign,assignment]
    updates: list[int] = []
    original_update = scaler.update
    scaler.update = lambda *a: updates.append(1) or original_update(*a)  # type: ignore[method-assign]
    total = losses(step, 1)[0]
    assert len(scaled) == 2 and updates == [1]
    assert sum(scaled) == pytest.approx(total, rel=1e-3)  # each micro-batch scaled loss / steps


def test_accumulation_skips_where_it_cannot_apply() -> None:
    assert check_reason("grad-accumulation", batch_size=8, options={"steps": 4}) is None
    assert check_reason("grad-accumulation", batch_size=6, options={"steps": 4}) == (
        "steps (4) must divide the batch size (6)"
    )


def test_accumulation_skips_in_the_worker_without_a_model(tmp_path: Any) -> None:
    step = TrainStep(device=CPU, batch_size=4, samples_per_step=4, data=lambda: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(SkipCell, match="needs a workload with a model"):
        use(step, "grad-accumulation", steps=2)


# -- half-weights ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_weights_keep_fp32_masters_and_batch_norm(tmp_path: Any, dtype: str) -> None:
    # A small initial scale: 2**16 overflows this ResNet's float16 gradients for the first few steps.
    step = use(resnet_step(tmp_path), "half-weights", dtype=dtype, init_scale=128.0)
    model, optimizer = step.model, step.optimizer
    assert model is not None and optimizer is not None
    half = getattr(torch, dtype)
    for module in model.modules():
        for p in module.parameters(recurse=False):
            want = torch.float32 if isinstance(module, nn.BatchNorm2d) else half
            assert p.dtype == want, module
    masters = [p for g in optimizer.param_groups for p in g["params"]]
    assert masters and all(p.dtype == torch.float32 for p in masters)
    assert (step.scaler is not None) == (dtype == "float16")
    before = [m.detach().clone() for m in masters]
    got = losses(step, 3)
    assert all(torch.isfinite(torch.tensor(got)))
    assert any(not torch.equal(a, b) for a, b in zip(before, masters, strict=True))  # the masters moved
    weights = [p for p in model.parameters()]
    pairs = {id(p): p for p in weights}
    assert len(pairs) == step.notes["half_weights"]["params"]
    # The half weights are the masters rounded: the copy back happened.
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    master = masters[next(i for i, p in enumerate(weights) if p is conv.weight)]
    assert torch.equal(conv.weight, master.to(half))
    assert step.notes["half_weights"]["batchnorm_fp32"] > 0


def test_half_weights_copy_gradients_and_masters_one_foreach_call_per_dtype_pair(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = use(resnet_step(tmp_path), "half-weights", dtype="float16", init_scale=128.0)
    optimizer = step.optimizer
    assert optimizer is not None
    losses(step, 1)
    masters = [p for g in optimizer.param_groups for p in g["params"]]
    grads = [m.grad for m in masters]
    copies: list[set[tuple[torch.dtype, torch.dtype]]] = []
    foreach_copy = torch._foreach_copy_

    def counted(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
        copies.append({(d.dtype, s.dtype) for d, s in zip(dst, src, strict=True)})
        foreach_copy(dst, src)

    monkeypatch.setattr(torch, "_foreach_copy_", counted)
    losses(step, 1)
    # The float16 weights' and the float32 batch norm's gradients into the masters, then the masters back: one
    # call per dtype pair (a cast kernel per parameter was 161 launches for ResNet-50).
    f16, f32 = torch.float16, torch.float32
    assert copies == [{(f32, f16)}, {(f32, f32)}, {(f16, f32)}, {(f32, f32)}]
    # The masters' gradients are kept from step to step and overwritten.
    assert all(m.grad is g for m, g in zip(masters, grads, strict=True))


def test_half_weights_losses_track_fp32(tmp_path: Any) -> None:
    plain = losses(bert_step(tmp_path), 4)
    o2 = losses(use(bert_step(tmp_path), "half-weights", dtype="bfloat16"), 4)
    assert o2 == pytest.approx(plain, rel=0.02)


def test_half_weights_tied_weights_stay_tied(tmp_path: Any) -> None:
    step = use(bert_step(tmp_path), "half-weights", dtype="bfloat16")
    model = step.model
    assert isinstance(model, _transformer.BertForMaskedLM)
    assert model.decoder.weight is model.word_embeddings.weight
    losses(step, 2)
    assert model.decoder.weight is model.word_embeddings.weight


def test_half_weights_fp16_scale_history_is_read_like_amp(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "half-weights", dtype="float16", init_scale=2.0**40)
    scaler = step.scaler
    assert scaler is not None
    losses(step, 3)
    # 2**40 overflows float16 gradients: the scaler backs off and skips those steps, as with AMP.
    assert float(scaler.get_scale()) < 2.0**40


def test_half_weights_compose_with_fused_optimizer_and_accumulation(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "half-weights", dtype="bfloat16")
    step = use(step, "grad-accumulation", steps=2)
    with contextlib.suppress(SkipCell):  # no fused SGD on this build: the rest still composes
        step = use(step, "fused-optimizer")
    got = losses(step, 3)
    assert all(torch.isfinite(torch.tensor(got)))


def test_half_weights_refuse_autocast_and_model_less_workloads() -> None:
    reason = check_reason("half-weights", techniques=("amp-bf16",))
    assert reason is not None and "replaces amp-bf16" in reason
    assert check_reason("half-weights", techniques=("channels-last", "fused-optimizer", "cuda-graphs")) is None


# -- the optimizer option ----------------------------------------------------------


def test_adamw_is_an_option_of_every_model_workload(tmp_path: Any) -> None:
    assert isinstance(resnet_step(tmp_path, optimizer="adamw").optimizer, torch.optim.AdamW)
    assert isinstance(resnet_step(tmp_path).optimizer, torch.optim.SGD)
    assert isinstance(bert_step(tmp_path, optimizer="sgd").optimizer, torch.optim.SGD)
    assert vit.ViTOptions().optimizer == "adamw" and transformer.BertOptions().optimizer == "adamw"


def test_lamb_without_timm_is_skipped_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimizers, "lamb_available", lambda: False)
    for workload in (cnn, transformer, vit):
        record = workload.ampsuite_workloads()[0]
        assert record.check is not None
        options = record.options(optimizer="lamb")
        assert record.check(options, "cpu") == optimizers.LAMB_HINT
        assert "pip install 'ampsuite[lamb]'" in optimizers.LAMB_HINT
        assert record.check(record.options(), "cpu") is None


def test_lamb_is_timms_lamb(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Lamb(torch.optim.SGD):  # stands in for timm.optim.Lamb where timm is not installed
        def __init__(self, params: Any, lr: float, weight_decay: float) -> None:
            super().__init__(params, lr=lr, weight_decay=weight_decay)

    if optimizers.lamb_available():
        from timm.optim import Lamb as Real

        expected: type = Real
    else:
        fake = types.ModuleType("timm")
        fake_optim = types.ModuleType("timm.optim")
        fake_optim.Lamb = Lamb  # type: ignore[attr-defined]
        fake.optim = fake_optim  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "timm", fake)
        monkeypatch.setitem(sys.modules, "timm.optim", fake_optim)
        expected = Lamb
    step = bert_step(tmp_path, optimizer="lamb")
    assert type(step.optimizer) is expected
    assert all(torch.isfinite(torch.tensor(losses(step, 2))))


def test_recipes_in_a_dry_run(write_suite: Any) -> None:
    cells = dry_run(
        write_suite,
        toy={"batch_size": [8, 6]},
        workloads={"gemm": {"plugin": "gemm", "batch_size": 1, "m": 8, "n": 8, "k": 8}},
        combinations={"accum": ["grad-accumulation"], "o2": ["half-weights"], "o1o2": ["amp-fp16", "half-weights"]},
    )
    assert cells["toy/accum/bs8"] is None and cells["toy/o2/bs8"] is None
    assert cells["toy/accum/bs6"] == "grad-accumulation: steps (4) must divide the batch size (6)"
    assert "replaces amp-fp16" in str(cells["toy/o1o2/bs8"])
    assert cells["gemm/accum/bs1"] == "grad-accumulation needs a workload with trait 'model'; 'gemm' has none"
    assert cells["gemm/o2/bs1"] == "half-weights needs a workload with trait 'model'; 'gemm' has none"


def test_the_articles_gpu_suite_expands(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/gpu/articles.toml (run by hand on a GPU) is valid and runs what its header says."""
    from pathlib import Path

    from ampsuite.host import environment

    monkeypatch.setattr(environment, "gpu_count", lambda: 1)
    monkeypatch.setattr(session, "resolve_device", lambda spec_device, device: "cuda")
    plan = session.plan(Path(__file__).parent / "gpu" / "articles.toml")
    cells = {c.id: c.skip_reason for c in plan.cells}
    assert len(cells) <= 60
    for cell in ("resnet50-adamw/o1/bs128", "resnet50-adamw/tuned-bf16-cl/bs64", "bert-base-adamw/o1-accum4/bs128"):
        assert cells[cell] is None
    assert {"resnet50-lamb/o2/bs64", "bert-base-lamb/o2-accum4/bs64"} <= cells.keys()
    for workload in ("resnet50-infer", "bert-base-infer"):
        for bs in (1, 256):
            for combo in ("infer-fp32", "infer-fp16", "infer-bf16", "infer-int8", "infer-trt"):
                assert f"{workload}/{combo}/bs{bs}" in cells
            assert f"{workload}/fp32/bs{bs}" not in cells
