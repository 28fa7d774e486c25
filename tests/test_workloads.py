"""The built-in workloads: they build and step on CPU, are deterministic, and their FLOPs add up."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from records import cell, doc
from steps import losses
from torch import nn
from torch.utils.data import DataLoader
from torchvision.models import resnet as tv

from ampsuite import BuildContext, ProbeContext, TrainStep
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.probes import _flops
from ampsuite.plugins.workloads import _cnn, _data, _transformer, cnn, gemm, transformer, vit
from ampsuite.spec.options import build_options

CPU = torch.device("cpu")

WORKLOADS = load_registry(PluginSettings(autoload=False)).workloads
"""The built-ins as registered: a test builds through the record's lazy ``build``, as a worker does."""

TINY: dict[str, Any] = {
    "resnet": cnn.ResNetOptions(depth=18, width=16, image_size=32, classes=10),
    "bert": transformer.BertOptions(layers=2, hidden=64, heads=4, intermediate=128, seq_len=32, vocab=1000),
    "vit": vit.ViTOptions(image_size=32, patch_size=8, layers=2, heads=4, hidden=64, mlp=128, classes=10),
    "gemm": gemm.GemmOptions(m=64, n=64, k=64),
}
MODELS = ("resnet", "bert", "vit")


def build(name: str, options: Any = None, batch_size: int = 4, seed: int = 0, data_dir: str = "unused") -> TrainStep:
    return WORKLOADS[name].build(options or TINY[name], BuildContext(CPU, batch_size, seed, data_dir))


def first_loss(step: TrainStep) -> torch.Tensor:
    return step.compose()(step.data())


def counted_flops(step: TrainStep) -> float:
    ctx = ProbeContext(step=step, run=step.compose(), cell={})
    _flops.inspect(ctx)
    assert not ctx.warnings
    return float(ctx.metrics["flops_per_step"])


# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------


def test_workloads_are_registered_with_their_units_and_traits() -> None:
    registry = load_registry(PluginSettings(autoload=False))
    expected = {
        "resnet": ("images", {"model", "conv", "data-path"}),
        "bert": ("sequences", {"model", "data-path", "blocks"}),
        "vit": ("images", {"model", "data-path", "blocks"}),
        "gemm": ("products", set()),
    }
    for name, (unit, traits) in expected.items():
        workload = registry.workloads[name]
        assert workload.unit == unit
        assert set(workload.traits) == traits


def test_defaults_are_the_full_gpu_sizes() -> None:
    assert (cnn.ResNetOptions().depth, cnn.ResNetOptions().image_size, cnn.ResNetOptions().width) == (50, 224, 64)
    bert = transformer.BertOptions()
    assert (bert.layers, bert.hidden, bert.heads, bert.seq_len, bert.vocab) == (12, 768, 12, 128, 30522)
    v = vit.ViTOptions()
    assert (v.image_size, v.patch_size, v.layers, v.heads, v.hidden, v.mlp) == (224, 16, 12, 12, 768, 3072)
    g = gemm.GemmOptions()
    assert (g.m, g.n, g.k, g.batch, g.dtype) == (8192, 8192, 8192, 1, "float32")


# ---------------------------------------------------------------------------
# every workload steps on CPU
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_model_workload_steps_and_learns(name: str) -> None:
    step = build(name)
    assert step.samples_per_step == step.batch_size == 4
    assert step.model is not None and step.optimizer is not None
    before = [p.detach().clone() for p in step.model.parameters()]
    loss = first_loss(step)
    assert loss.dim() == 0 and math.isfinite(float(loss))
    after = list(step.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert all(p.grad is None for p in step.model.parameters())  # update zeroed them


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_gives_the_same_losses(name: str) -> None:
    # two steps: the ViT's zero-initialised head makes every first loss ln(classes)
    assert losses(build(name, seed=3), 2) == losses(build(name, seed=3), 2)
    assert losses(build(name, seed=3), 2) != losses(build(name, seed=4), 2)


@pytest.mark.parametrize("name", MODELS)
def test_device_pool_equals_a_dataloader_over_the_dataset(name: str) -> None:
    step = build(name)
    assert step.dataset is not None and step.collate is not None
    assert len(step.dataset) == _data.POOL_BATCHES * step.batch_size
    loader = DataLoader(step.dataset, batch_size=step.batch_size, shuffle=False)
    from_loader = itertools.chain.from_iterable(itertools.repeat(loader, 2))
    for item in from_loader:
        expected, got = step.collate(item).to(CPU), step.data()
        assert all(torch.equal(a, b) for a, b in zip(expected.inputs, got.inputs, strict=True))
        assert expected.target is not None and got.target is not None
        assert torch.equal(expected.target, got.target)


# ---------------------------------------------------------------------------
# FLOPs: the probe's count against an analytic one
# ---------------------------------------------------------------------------


def resnet_flops(step: TrainStep) -> int:
    """2*N*Cout*Hout*Wout*Cin/groups*kh*kw per convolution, 2*N*in*out per linear layer.

    Forward once; backward computes the weight gradient (same count) and the
    input gradient (same count) except for the first convolution, whose input
    is data.
    """
    model = step.model
    assert model is not None
    shapes: dict[nn.Module, tuple[torch.Size, torch.Size]] = {}
    hooks = [
        m.register_forward_hook(lambda m, i, o: shapes.__setitem__(m, (i[0].shape, o.shape)))
        for m in model.modules()
        if isinstance(m, nn.Conv2d | nn.Linear)
    ]
    with torch.no_grad():
        model(*step.data().inputs)
    for h in hooks:
        h.remove()
    total = 0
    for m, (inp, out) in shapes.items():
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            forward = 2 * out.numel() * (m.in_channels // m.groups) * kh * kw
        else:
            assert isinstance(m, nn.Linear)
            forward = 2 * inp[0] * m.in_features * m.out_features
        total += forward * (2 if m is model.conv1 else 3)
    return total


def bert_flops(o: transformer.BertOptions, batch: int) -> float:
    """Linear layers 3x forward; fused attention 3.5x (its backward recomputes Q K^T), unfused 3x."""
    t, h = batch * o.seq_len, o.hidden
    per_layer = 2 * t * h * 3 * h + 2 * t * h * h + 2 * (2 * t * h * o.intermediate)
    head = 2 * t * h * h + 2 * t * h * o.padded_vocab
    attention = 2 * (2 * batch * o.heads * o.seq_len * o.seq_len * (h // o.heads))
    return 3 * (o.layers * per_layer + head) + (3.5 if o.fused_attention else 3) * o.layers * attention


def vit_flops(o: vit.ViTOptions, batch: int) -> float:
    patches = (o.image_size // o.patch_size) ** 2
    s, e = patches + 1, o.hidden
    t = batch * s
    patchify = 2 * batch * patches * e * 3 * o.patch_size**2  # first layer: no input gradient
    per_layer = 2 * t * e * 3 * e + 2 * t * e * e + 2 * (2 * t * e * o.mlp)
    attention = 2 * (2 * batch * o.heads * s * s * (e // o.heads))
    head = 2 * batch * e * o.classes
    return 2 * patchify + 3 * (o.layers * per_layer + head) + 3.5 * o.layers * attention


def test_resnet_flops_match_the_conv_formula() -> None:
    assert counted_flops(build("resnet")) == pytest.approx(resnet_flops(build("resnet")), rel=0.01)


@pytest.mark.parametrize("fused", [True, False])
def test_bert_flops_match_the_analytic_count(fused: bool) -> None:
    options = transformer.BertOptions(
        layers=2, hidden=64, heads=4, intermediate=128, seq_len=32, vocab=1001, pad_vocab_to=8, fused_attention=fused
    )
    assert counted_flops(build("bert", options, batch_size=2)) == pytest.approx(bert_flops(options, 2), rel=0.01)


def test_vit_flops_match_the_analytic_count() -> None:
    options = TINY["vit"]
    assert counted_flops(build("vit", batch_size=2)) == pytest.approx(vit_flops(options, 2), rel=0.01)


@pytest.mark.parametrize("batch", [1, 3])
def test_gemm_flops_are_2mnk_per_product(batch: int) -> None:
    options = gemm.GemmOptions(m=24, n=40, k=56, batch=batch)
    assert counted_flops(build("gemm", options)) == pytest.approx(2 * batch * 24 * 40 * 56, rel=0.01)
    assert options.flops == 2 * batch * 24 * 40 * 56


# ---------------------------------------------------------------------------
# resnet
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("depth", sorted(cnn.DEPTHS))
def test_narrow_resnet_at_width_64_has_torchvisions_parameters(depth: int) -> None:
    name, layers = cnn.DEPTHS[depth]
    block = _cnn.BLOCKS[name]
    with torch.device("meta"):  # shapes only: skip allocating and initialising full-size weights
        ours = _cnn.NarrowResNet(block, layers, 64, 1000)
        theirs = _cnn.make_model(cnn.ResNetOptions(depth=depth))
    assert isinstance(theirs, tv.ResNet)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, p.shape) for n, p in theirs.named_parameters()]


def test_reduced_width_narrows_every_stage() -> None:
    model = _cnn.make_model(cnn.ResNetOptions(depth=50, width=16, classes=10))
    assert isinstance(model, _cnn.NarrowResNet)
    assert model.conv1.out_channels == 16
    assert model.fc.in_features == 16 * 8 * 4  # last stage 8x the width, Bottleneck expansion 4
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"depth": 20}, "depth: expected one of 18, 34, 50, 101, 152, got 20"),
        ({"depth": 50.0}, "depth: expected an integer, got 50.0"),
        ({"optimizer": "adam"}, "optimizer: expected one of 'sgd', 'adamw', 'lamb', got 'adam'"),
        ({"source": "s3"}, "source: expected one of 'synthetic', 'disk', 'digits', got 's3'"),
        ({"width": 0}, "width: expected an integer >= 1, got 0"),
        ({"lr": 0}, "lr: expected a number > 0, got 0.0"),
        ({"weight_decay": -0.1}, "weight_decay: expected a number >= 0, got -0.1"),
    ],
)
def test_resnet_options_are_validated(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build_options(cnn.ResNetOptions, options)


def test_resnet_adamw_option_builds_adamw() -> None:
    step = build("resnet", cnn.ResNetOptions(depth=18, width=8, image_size=32, classes=10, optimizer="adamw"))
    assert isinstance(step.optimizer, torch.optim.AdamW)
    assert isinstance(step.loss_fn, nn.CrossEntropyLoss)


def disk_options(**kw: Any) -> cnn.ResNetOptions:
    return cnn.ResNetOptions(depth=18, width=8, image_size=32, classes=10, source="disk", disk_images=10, **kw)


def test_prepare_writes_the_disk_data_once(tmp_path: Path) -> None:
    path = _cnn.prepare(disk_options(), str(tmp_path))
    images = np.load(f"{path}/images.npy", mmap_mode="r")
    assert images.shape == (10, 32, 32, 3) and images.dtype == np.uint8
    stamp = (tmp_path / path / "images.npy").stat().st_mtime_ns
    assert _cnn.prepare(disk_options(), str(tmp_path)) == path
    assert (tmp_path / path / "images.npy").stat().st_mtime_ns == stamp
    other = cnn.ResNetOptions(depth=18, width=8, image_size=40, classes=10, source="disk", disk_images=10)
    assert _cnn.prepare(other, str(tmp_path)) != path
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_prepare_does_nothing_for_the_synthetic_source(tmp_path: Path) -> None:
    assert _cnn.prepare(cnn.ResNetOptions(), str(tmp_path)) == ""
    assert list(tmp_path.iterdir()) == []


def test_disk_dataset_reads_back_the_written_content(tmp_path: Path) -> None:
    path = _cnn.prepare(disk_options(), str(tmp_path))
    raw = np.load(f"{path}/images.npy")
    labels = np.load(f"{path}/labels.npy")
    dataset = _data.DiskImages(path)
    image, label = dataset[7]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert torch.equal(image, _data.normalize_image(torch.from_numpy(raw[7])))
    assert int(label) == int(labels[7])
    restored = _data.normalize_image(torch.from_numpy(raw[7])) * _data._STD + _data._MEAN
    assert torch.allclose(restored * 255, torch.from_numpy(raw[7]).permute(2, 0, 1).float(), atol=1e-3)


def test_disk_source_steps_through_a_dataloader_in_whole_batches(tmp_path: Path) -> None:
    step = build("resnet", disk_options(), batch_size=4, data_dir=str(tmp_path))
    assert isinstance(step.dataset, _data.DiskImages) and len(step.dataset) == 8  # 10 images, whole batches of 4
    loader = DataLoader(step.dataset, batch_size=4, shuffle=False)
    assert step.collate is not None
    for item in itertools.chain(loader, loader):
        assert torch.equal(step.collate(item).inputs[0], step.data().inputs[0])
    assert math.isfinite(float(first_loss(step)))


def test_disk_source_needs_a_whole_batch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"disk_images \(10\) must be >= the batch size \(16\)"):
        build("resnet", disk_options(), batch_size=16, data_dir=str(tmp_path))


# ---------------------------------------------------------------------------
# bert
# ---------------------------------------------------------------------------


def test_bert_head_is_tied_and_vocab_padding_is_optional() -> None:
    step = build("bert")
    model = step.model
    assert isinstance(model, _transformer.BertForMaskedLM)
    assert model.decoder.weight is model.word_embeddings.weight
    assert transformer.BertOptions().padded_vocab == 30522
    assert transformer.BertOptions(pad_vocab_to=8).padded_vocab == 30528
    assert isinstance(step.loss_fn, nn.CrossEntropyLoss) and step.loss_fn.ignore_index == -100
    assert sum(isinstance(m, nn.LayerNorm) for m in model.modules()) == 2 * 2 + 2
    assert isinstance(step.optimizer, torch.optim.AdamW)


def test_bert_unfused_attention_uses_its_softmax_module() -> None:
    options = transformer.BertOptions(layers=1, hidden=32, heads=4, intermediate=64, seq_len=16, vocab=100)
    unfused = transformer.BertOptions(**{**options.__dict__, "fused_attention": False})
    calls: list[int] = []
    step = build("bert", unfused)
    assert step.model is not None
    for m in step.model.modules():
        if isinstance(m, _transformer.SelfAttention):
            m.softmax.register_forward_hook(lambda *_: calls.append(1))
    loss_unfused = first_loss(step)
    assert calls == [1]
    assert float(first_loss(build("bert", options))) == pytest.approx(float(loss_unfused), rel=1e-5)


def test_masked_tokens_mask_a_fixed_count_per_sequence() -> None:
    data = _transformer.MaskedTokens(count=6, seq_len=20, vocab=50, mask_prob=0.15, seed=0)
    masked = data.labels != -100
    assert masked.sum(dim=1).tolist() == [3] * 6
    assert (data.input_ids[masked] == 49).all()
    assert (data.input_ids[~masked] < 49).all()


def test_bert_options_are_validated() -> None:
    with pytest.raises(ValueError, match=r"heads \(5\) must divide hidden \(64\)"):
        transformer.BertOptions(hidden=64, heads=5)
    with pytest.raises(ValueError, match=r"^mask_prob: expected a number > 0 and <= 1, got 0\.0$"):
        build_options(transformer.BertOptions, {"mask_prob": 0})
    with pytest.raises(ValueError, match=r"^vocab: expected an integer >= 2, got 1$"):
        build_options(transformer.BertOptions, {"vocab": 1})
    with pytest.raises(ValueError, match=r"^dropout: expected a number >= 0 and < 1, got 1\.0$"):
        build_options(transformer.BertOptions, {"dropout": 1.0})


# ---------------------------------------------------------------------------
# vit and gemm
# ---------------------------------------------------------------------------


def test_vit_options_are_validated() -> None:
    with pytest.raises(ValueError, match=r"patch_size \(7\) must divide image_size \(32\)"):
        vit.ViTOptions(image_size=32, patch_size=7)


def test_gemm_step_is_one_product_with_static_inputs() -> None:
    step = build("gemm", gemm.GemmOptions(m=8, n=16, k=24))
    assert step.model is None and step.optimizer is None and step.samples_per_step == 1
    batch = step.data()
    assert step.data() is batch  # allocated once
    a, b = batch.inputs
    assert not a.requires_grad and not b.requires_grad
    out = first_loss(step)
    assert out.dim() == 0
    assert torch.equal(out, (a @ b)[0, 0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_runs_in_its_dtype_and_follows_autocast(dtype: Any) -> None:
    step = build("gemm", gemm.GemmOptions(m=8, n=8, k=8, dtype=dtype))
    assert first_loss(step).dtype == getattr(torch, dtype)
    amp = build("gemm", gemm.GemmOptions(m=8, n=8, k=8, batch=2))
    amp.autocast_dtype = torch.bfloat16
    assert first_loss(amp).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("dtype", "autocast", "precision"),
    [
        ("float32", None, "float32"),
        ("bfloat16", None, "bfloat16"),
        ("float16", None, "float16"),
        ("float32", torch.bfloat16, "bfloat16"),
        ("float8_e4m3fn", None, "float8_e4m3fn"),
    ],
)
def test_a_correct_gemm_product_is_within_its_precision_s_tolerance(dtype: Any, autocast: Any, precision: str) -> None:
    step = build("gemm", gemm.GemmOptions(m=96, n=80, k=512, dtype=dtype))
    step.autocast_dtype = autocast
    assert step.check_output is not None
    check = step.check_output()
    assert check["precision"] == precision and check["reference"] == "float64"
    assert 0 < check["rel_error"] <= check["tolerance"]


def test_gemm_check_draws_new_operands_in_every_call() -> None:
    step = build("gemm", gemm.GemmOptions(m=16, n=16, k=16, dtype="bfloat16"))
    assert step.check_output is not None
    assert step.check_output()["seed"] != step.check_output()["seed"]


def test_a_corrupted_bf16_gemm_product_is_not_ok(monkeypatch: Any) -> None:
    from ampsuite.analysis import best_per_workload

    real = torch.mm
    # A product 3% off: three times what bfloat16's rounding explains.
    monkeypatch.setattr(torch, "mm", lambda a, b: real(a, b) * 1.03)
    step = build("gemm", gemm.GemmOptions(m=64, n=64, k=256, dtype="bfloat16"))
    assert step.check_output is not None
    check = step.check_output()
    assert check["rel_error"] > check["tolerance"]
    monkeypatch.setattr(torch, "mm", real)
    healthy = build("gemm", gemm.GemmOptions(m=64, n=64, k=256, dtype="bfloat16")).check_output()  # type: ignore[misc]
    bad, good = cell("amp", median=0.01), cell("amp-fp16", median=0.02, loss=9.0)  # loss far from FP32's: ignored
    bad["numerics"]["output_check"], good["numerics"]["output_check"] = check, healthy
    result = best_per_workload(doc(cell("fp32", median=0.04), bad, good))["toy"]
    assert result.record is not None and result.record["id"] == "toy/amp-fp16/bs32"
    assert result.derived is not None and result.derived.numerics_verdict == "ok"
    ((cell_id, _, why),) = result.passed_over
    assert cell_id == "toy/amp/bs32" and why.startswith("output's relative error") and "float64" in why


def test_gemm_options_are_validated() -> None:
    message = "dtype: expected one of 'float32', 'float16', 'bfloat16', 'float8_e4m3fn', 'float8_e5m2', got 'int8'"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build_options(gemm.GemmOptions, {"dtype": "int8"})
    with pytest.raises(ValueError, match=r"^k: expected an integer >= 1, got 0$"):
        build_options(gemm.GemmOptions, {"k": 0})


# ---------------------------------------------------------------------------
# CUDA (run on a GPU machine: pytest -m cuda)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*MODELS, "gemm"])
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_workload_steps_on_cuda_and_matches_cpu_data(name: str) -> None:
    gpu = WORKLOADS[name].build(TINY[name], BuildContext(torch.device("cuda"), 4, 0, "unused"))
    cpu = build(name)
    if gpu.dataset is not None:  # the same batches, whichever device they were pooled on
        for _ in range(_data.POOL_BATCHES):
            a, b = gpu.data(), cpu.data()
            assert a.inputs[0].is_cuda
            assert torch.equal(a.inputs[0].cpu(), b.inputs[0])
    assert math.isfinite(float(first_loss(gpu)))
