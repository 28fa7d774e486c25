"""The flops and tensor-cores probes, run on real steps without the core runner."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from ampsuite import Batch, BuildContext, ProbeContext, TrainStep
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.probes import _flops, _tensorcores
from ampsuite.plugins.workloads import _gemm, _transformer, cnn, gemm, transformer

CPU = torch.device("cpu")


WORKLOADS = load_registry(PluginSettings(autoload=False)).workloads


def make(workload: str, options: Any, batch_size: int = 2, autocast: torch.dtype | None = None) -> TrainStep:
    step = WORKLOADS[workload].build(options, BuildContext(CPU, batch_size, 0, "unused"))
    step.autocast_dtype = autocast
    return step


def probe(step: TrainStep, *inspects: Any) -> ProbeContext:
    ctx = ProbeContext(step=step, run=step.compose(), cell={})
    for inspect in inspects or (_flops.inspect, _tensorcores.inspect):
        inspect(ctx)
    return ctx


def tiny_bert(**kw: Any) -> transformer.BertOptions:
    return transformer.BertOptions(**{"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "seq_len": 16, **kw})


def tiny_resnet() -> cnn.ResNetOptions:
    return cnn.ResNetOptions(depth=18, width=8, image_size=32, classes=16)


@contextlib.contextmanager
def legacy_tf32(matmul: bool, conv: bool) -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_probes_are_registered() -> None:
    probes = load_registry(PluginSettings(autoload=False)).probes
    assert probes["flops"].inspect.resolve() is _flops.inspect  # type: ignore[attr-defined]
    assert probes["tensor-cores"].inspect.resolve() is _tensorcores.inspect  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# tensor cores
# ---------------------------------------------------------------------------


@pytest.fixture
def tensor_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe warns only where Tensor Cores exist (CUDA); these tests check the warnings on a CPU step."""
    from ampsuite.plugins.probes import _tensorcores

    monkeypatch.setattr(_tensorcores, "has_tensor_cores", lambda device: True)


def test_on_a_cpu_misalignment_is_recorded_without_warnings() -> None:
    ctx = probe(make("gemm", gemm.GemmOptions(m=64, n=64, k=65, dtype="bfloat16")), _tensorcores.inspect)
    assert ctx.warnings == []
    assert ctx.diagnostics["tensor_cores"]["misaligned"] == 1
    assert ctx.diagnostics["tensor_cores"]["ops"][0]["aligned"] is False


@pytest.mark.parametrize(("dims", "bad"), [((64, 64, 65), "K=65"), ((65, 64, 64), "M=65"), ((64, 65, 64), "N=65")])
def test_misaligned_bf16_product_is_warned_about(dims: tuple[int, int, int], bad: str, tensor_cores: None) -> None:
    m, n, k = dims
    ctx = probe(make("gemm", gemm.GemmOptions(m=m, n=n, k=k, dtype="bfloat16")), _tensorcores.inspect)
    assert len(ctx.warnings) == 1
    assert "aten.mm" in ctx.warnings[0] and "bfloat16" in ctx.warnings[0] and bad in ctx.warnings[0]
    assert f"[[{m}, {k}], [{k}, {n}]]" in ctx.warnings[0]
    table = ctx.diagnostics["tensor_cores"]
    assert table["misaligned"] == 1
    assert table["ops"] == [
        {
            "op": "aten.mm",
            "shapes": [[m, k], [k, n]],
            "dtype": "bfloat16",
            "count": 1,
            "aligned": False,
            "dims": {"M": m, "K": k, "N": n},
            "phase": "forward",
        }
    ]


def test_aligned_product_is_not_warned_about() -> None:
    ctx = probe(make("gemm", gemm.GemmOptions(m=64, n=64, k=64, batch=2, dtype="bfloat16")), _tensorcores.inspect)
    assert ctx.warnings == []
    [row] = ctx.diagnostics["tensor_cores"]["ops"]
    assert (row["op"], row["aligned"], row["shapes"]) == ("aten.bmm", True, [[2, 64, 64], [2, 64, 64]])


def test_float32_misalignment_is_recorded_but_not_warned() -> None:
    ctx = probe(make("gemm", gemm.GemmOptions(m=64, n=64, k=65)), _tensorcores.inspect)
    assert ctx.warnings == []
    [row] = ctx.diagnostics["tensor_cores"]["ops"]
    assert (row["dtype"], row["aligned"]) == ("float32", False)
    assert ctx.diagnostics["tensor_cores"]["misaligned"] == 0


def test_autocast_dtype_reaches_the_table(tensor_cores: None) -> None:
    ctx = probe(make("gemm", gemm.GemmOptions(m=64, n=64, k=65), autocast=torch.bfloat16), _tensorcores.inspect)
    assert [row["dtype"] for row in ctx.diagnostics["tensor_cores"]["ops"]] == ["bfloat16"]
    assert len(ctx.warnings) == 1


def test_bert_unpadded_vocab_is_flagged_and_padding_fixes_it(tensor_cores: None) -> None:
    odd = probe(make("bert", tiny_bert(vocab=1001), autocast=torch.bfloat16), _tensorcores.inspect)
    assert len(odd.warnings) == 3  # the head's product forward, and both of its backward products
    assert all("1001" in w for w in odd.warnings)
    phases = {row["phase"] for row in odd.diagnostics["tensor_cores"]["ops"] if not row["aligned"]}
    assert phases == {"forward", "backward"}
    padded = probe(make("bert", tiny_bert(vocab=1001, pad_vocab_to=8), autocast=torch.bfloat16))
    assert padded.warnings == []


def test_convolutions_are_recorded_in_both_phases_with_counts() -> None:
    ctx = probe(make("resnet", tiny_resnet(), autocast=torch.bfloat16), _tensorcores.inspect)
    ops = ctx.diagnostics["tensor_cores"]["ops"]
    convs = [row for row in ops if row["op"] == "aten.convolution"]
    backward = [row for row in ops if row["op"] == "aten.convolution_backward"]
    assert sum(row["count"] for row in convs) == sum(row["count"] for row in backward) == 20  # ResNet-18 convs
    assert {row["dtype"] for row in convs + backward} == {"bfloat16"}
    stem = next(row for row in convs if row["shapes"][0][1] == 3)
    assert stem["dims"] == {"C_out": 8} and stem["aligned"]  # a 3-channel image input is exempt
    assert all(row["phase"] == "backward" for row in backward)
    assert not any("convolution" in w for w in ctx.warnings)  # widths 8..64 are all multiples of 8


def test_probe_drops_the_gradients_it_made() -> None:
    step = make("bert", tiny_bert(vocab=100))
    probe(step)
    assert step.model is not None
    assert all(p.grad is None for p in step.model.parameters())


def test_a_step_that_cannot_be_traced_becomes_a_warning() -> None:
    def broken(batch: Batch) -> torch.Tensor:
        raise RuntimeError("kaput")

    step = TrainStep(device=CPU, batch_size=1, samples_per_step=1, data=lambda: Batch(()), forward_backward=broken)
    ctx = probe(step)
    assert [w.split(":")[0] for w in ctx.warnings] == [
        "flops probe could not count the step",
        "tensor-cores probe could not trace the step",
    ]
    assert "flops_per_step" not in ctx.metrics and "tensor_cores" not in ctx.diagnostics


# ---------------------------------------------------------------------------
# precision-sensitive ops
# ---------------------------------------------------------------------------


def families(ctx: ProbeContext, phase: str = "forward") -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for row in ctx.diagnostics["precision_ops"]:
        if row["phase"] == phase:
            out.setdefault(row["family"], {}).setdefault(row["dtype"], 0)
            out[row["family"]][row["dtype"]] += row["count"]
    return out


def autocast_layer_norm_dtype() -> str:
    """What CPU autocast makes of a LayerNorm fed by a linear layer's output."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = nn.LayerNorm(8)(nn.Linear(8, 8)(torch.randn(2, 8)))
    return str(y.dtype).removeprefix("torch.")


def test_precision_ops_show_float32_in_the_fp32_baseline() -> None:
    ctx = probe(make("bert", tiny_bert(vocab=100, fused_attention=False)), _tensorcores.inspect)
    seen = families(ctx)
    assert seen == {
        "layer_norm": {"float32": 2 * 2 + 2},
        "softmax": {"float32": 2},
        "log_softmax": {"float32": 1},
        "nll_loss": {"float32": 1},
    }
    assert families(ctx, "backward").keys() == seen.keys()


def test_precision_ops_show_what_autocast_decides() -> None:
    ctx = probe(make("bert", tiny_bert(vocab=100), autocast=torch.bfloat16), _tensorcores.inspect)
    layer_norm = families(ctx)["layer_norm"]
    assert sum(layer_norm.values()) == 2 * 2 + 2
    # the embedding LayerNorm is fed float32 embeddings; the head's one a linear layer's output
    assert set(layer_norm) == {"float32", autocast_layer_norm_dtype()}
    assert families(ctx)["log_softmax"] == {"float32": 1}  # cross entropy is on autocast's float32 list


def test_precision_ops_prove_a_float32_island() -> None:
    step = make("bert", tiny_bert(vocab=100), autocast=torch.bfloat16)
    assert isinstance(step.model, _transformer.BertForMaskedLM)
    norm = step.model.head_norm
    original = norm.forward

    def island(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            return original(x.float())

    norm.forward = island  # type: ignore[method-assign, assignment]
    assert families(probe(step, _tensorcores.inspect))["layer_norm"] == {"float32": 2 * 2 + 2}


def test_batch_norm_is_a_precision_op() -> None:
    ctx = probe(make("resnet", tiny_resnet()), _tensorcores.inspect)
    assert families(ctx)["batch_norm"] == {"float32": 20}


# ---------------------------------------------------------------------------
# flops probe: matmul dtype class
# ---------------------------------------------------------------------------


def test_matmul_dtype_follows_the_precision_that_reaches_the_products() -> None:
    assert probe(make("resnet", tiny_resnet()), _flops.inspect).metrics["matmul_dtype"] == "float32"
    amp = probe(make("resnet", tiny_resnet(), autocast=torch.bfloat16), _flops.inspect)
    assert amp.metrics["matmul_dtype"] == "bfloat16"
    assert amp.diagnostics["flops"]["by_dtype"] == {"bfloat16": amp.metrics["flops_per_step"]}
    stored = probe(make("gemm", gemm.GemmOptions(m=16, n=16, k=16, dtype="float16")), _flops.inspect)
    assert stored.metrics == {"flops_per_step": 2.0 * 16**3, "matmul_dtype": "float16"}


def test_matmul_dtype_is_the_class_with_most_flops() -> None:
    step = make("gemm", gemm.GemmOptions(m=64, n=64, k=64))
    small = torch.randn(8, 8, dtype=torch.bfloat16)
    forward_backward, _ = step.phases()

    def mixed(batch: Batch) -> torch.Tensor:
        small @ small  # a bf16 product with far fewer FLOPs than the float32 one
        return forward_backward(batch)

    step.forward_backward = mixed
    ctx = probe(step, _flops.inspect)
    assert ctx.metrics["matmul_dtype"] == "float32"
    assert ctx.diagnostics["flops"]["by_dtype"] == {"float32": 2.0 * 64**3, "bfloat16": 2.0 * 8**3}


def test_tf32_class_follows_the_cuda_flags() -> None:
    with legacy_tf32(matmul=True, conv=False):
        assert _tensorcores.dtype_class("mm", torch.float32, "cuda") == "tf32"
        assert _tensorcores.dtype_class("convolution", torch.float32, "cuda") == "float32"
        assert _tensorcores.dtype_class("mm", torch.float32, "cpu") == "float32"
        # TF32 is a mode of products: a norm or a loss in float32 stays float32 whatever the flags.
        for op in ("_fused_rms_norm", "_log_softmax", "nll_loss_forward", "native_layer_norm_backward"):
            assert _tensorcores.dtype_class(op, torch.float32, "cuda") == "float32", op
    with legacy_tf32(matmul=False, conv=True):
        assert _tensorcores.dtype_class("mm", torch.float32, "cuda") == "float32"
        assert _tensorcores.dtype_class("convolution_backward", torch.float32, "cuda") == "tf32"
        assert _tensorcores.dtype_class("_scaled_dot_product_efficient_attention", torch.float32, "cuda") == "float32"
    assert _tensorcores.dtype_class("mm", torch.float16, "cuda") == "float16"


# ---------------------------------------------------------------------------
# CUDA (run on a GPU machine: pytest -m cuda)
# ---------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fp16_8193_gemm_is_flagged_and_tf32_is_seen() -> None:
    cuda = BuildContext(torch.device("cuda"), 1, 0, "unused")
    odd = _gemm.build(gemm.GemmOptions(m=8193, n=8193, k=8193, dtype="float16"), cuda)
    ctx = probe(odd)
    assert ctx.diagnostics["tensor_cores"]["misaligned"] == 1 and len(ctx.warnings) == 1
    assert ctx.metrics["flops_per_step"] == 2.0 * 8193**3
    with legacy_tf32(matmul=True, conv=True):
        fp32 = _gemm.build(gemm.GemmOptions(m=1024, n=1024, k=1024), cuda)
        assert probe(fp32, _flops.inspect).metrics["matmul_dtype"] == "tf32"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fused", [True, False])
def test_cuda_bert_flops_and_fp16_precision_ops(fused: bool) -> None:
    options = tiny_bert(vocab=1000, fused_attention=fused)
    step = _transformer.build(options, BuildContext(torch.device("cuda"), 2, 0, "unused"))
    step.autocast_dtype = torch.float16
    ctx = probe(step)
    t, h, s = 2 * 16, 64, 16
    linear = 2 * (2 * t * h * 3 * h + 2 * t * h * h + 4 * t * h * 128) + 2 * t * h * h + 2 * t * h * 1000
    attention = 2 * 2 * (2 * 2 * 4 * s * s * 16)
    expected = 3 * linear + (3.5 if fused else 3) * attention
    assert ctx.metrics["flops_per_step"] == pytest.approx(expected, rel=0.01)
    assert ctx.metrics["matmul_dtype"] == "float16"
    assert families(ctx)["layer_norm"] == {"float32": 6}  # CUDA autocast runs layer_norm in float32
    ops = ctx.diagnostics["tensor_cores"]["ops"]
    assert {row["phase"] for row in ops} == {"forward", "backward"}  # backward runs on the device thread
    assert {row["dtype"] for row in ops} == {"float16"}
    if not fused:
        # Seen on an H200 with torch 2.11: under fp16 autocast the unfused
        # softmax runs in float16 (it is not on CUDA autocast's float32 list),
        # which is what the fp32-islands technique exists to change.
        assert families(ctx)["softmax"] == {"float16": 2}
