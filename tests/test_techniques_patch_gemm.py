"""patch-gemm: a convolution whose kernel equals its stride, as a GEMM that computes the same thing."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from conftest import SMALL_BERT, toy_suite
from steps import skip_reason
from torch import nn

from ampsuite import BuildContext, NoOptions, SkipCell
from ampsuite.plugins.techniques import _patch_gemm as impl
from ampsuite.plugins.techniques import patch_gemm
from ampsuite.plugins.workloads import _toy, _vit, toy, vit

TECHNIQUE = patch_gemm.ampsuite_techniques()[0]
CPU = torch.device("cpu")
SMALL_VIT = vit.ViTOptions(image_size=32, patch_size=16, layers=1, heads=2, hidden=32, mlp=64, classes=10)


def grads_of(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    for p in module.parameters():
        p.grad = None
    out = module(x)
    (out.float() ** 2).sum().backward()
    assert x.grad is not None
    return out.detach(), [p.grad.clone() for p in module.parameters() if p.grad is not None], x.grad


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 3, 32, 48), (2, 3, 37, 21)])  # the second crops, as the convolution floors
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_the_gemm_computes_what_the_convolution_did(
    bias: bool, shape: tuple[int, ...], memory_format: torch.memory_format
) -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, (8, 4), stride=(8, 4), bias=bias).to(memory_format=memory_format)
    gemm = impl.PatchGemm(conv)
    assert [id(p) for p in gemm.parameters()] == [id(p) for p in conv.parameters()]
    x = torch.randn(*shape).contiguous(memory_format=memory_format)
    ref_out, ref_grads, ref_dx = grads_of(conv, x)
    out, grads, dx = grads_of(gemm, x)
    assert out.shape == ref_out.shape
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(dx, ref_dx)
    for a, b in zip(grads, ref_grads, strict=True):
        # Weight gradients sum over every patch; the two paths sum in other orders (and with other thread
        # counts), so they differ by a few float32 ulps of the sum, above assert_close's 1e-5 default.
        torch.testing.assert_close(a, b, rtol=1e-5, atol=5e-5)


def test_only_non_overlapping_convolutions_are_replaced() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 4, stride=4),  # a patch embedding
        nn.Conv2d(8, 8, 3, stride=1, padding=1),
        nn.Conv2d(8, 8, 2, stride=2, padding=1),
        nn.Conv2d(8, 8, 2, stride=2, groups=2),
        nn.Conv2d(8, 8, 2, stride=2, dilation=2),
        nn.Conv2d(8, 8, 2, stride=2),
    )
    assert [impl.why_not(m) for m in model] == [
        None,
        "kernel (3, 3) differs from stride (1, 1)",
        "padding (1, 1)",
        "dilated or grouped",
        "dilated or grouped",
        None,
    ]
    reference = copy.deepcopy(model)
    assert impl.replace(model) == ["0", "5"]
    assert [type(m).__name__ for m in model] == ["PatchGemm"] + ["Conv2d"] * 4 + ["PatchGemm"]
    x = torch.randn(2, 3, 128, 128)
    torch.testing.assert_close(model(x), reference(x))


def test_a_vit_trains_the_same_with_it(tmp_path: Path) -> None:
    step = _vit.build(SMALL_VIT, BuildContext(CPU, 4, 0, str(tmp_path)))
    reference = _vit.build(SMALL_VIT, BuildContext(CPU, 4, 0, str(tmp_path)))
    step = TECHNIQUE.apply(step, NoOptions())
    assert step.notes["patch_gemm"] == {"replaced": ["conv_proj"]}
    assert step.model is not None and type(step.model.conv_proj).__name__ == "PatchGemm"
    losses = [step.compose(), reference.compose()]
    batches = [step.data() for _ in range(3)]
    for batch in batches:
        torch.testing.assert_close(losses[0](batch), losses[1](batch))
    assert reference.model is not None
    torch.testing.assert_close(step.model.conv_proj.weight, reference.model.conv_proj.weight)


def test_declaration_and_skips(tmp_path: Path) -> None:
    assert TECHNIQUE.order == 22 and not TECHNIQUE.requires and not TECHNIQUE.conflicts
    assert skip_reason("gemm", "patch-gemm") == "patch-gemm needs a workload with trait 'model'; 'gemm' has none"
    step = _toy.build(
        toy.ToyOptions(features=8, hidden=16, layers=1, classes=4), BuildContext(CPU, 8, 0, str(tmp_path))
    )
    with pytest.raises(SkipCell, match="no convolution whose kernel equals its stride"):
        TECHNIQUE.apply(step, NoOptions())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_under_bf16_autocast_on_the_gpu_it_is_as_close_to_fp32_as_cudnn() -> None:
    """In bfloat16 neither side is exact: each is held against the float32 convolution, the GEMM no further off."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 768, 16, stride=16).cuda()
    gemm = impl.PatchGemm(conv)
    x = torch.randn(8, 3, 224, 224, device="cuda")
    exact_out, exact_grads, _ = grads_of(conv, x)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        conv_out, conv_grads, _ = grads_of(conv, x)
        out, grads, _ = grads_of(gemm, x)
    assert out.dtype == conv_out.dtype == torch.bfloat16

    def error(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b).norm() / b.norm())

    pairs = [(out, conv_out, exact_out), *zip(grads, conv_grads, exact_grads, strict=True)]
    for mine, cudnn, exact in pairs:
        assert error(mine, exact) < 2e-2
        assert error(mine, exact) <= 2 * error(cudnn, exact) + 5e-3


def test_a_suite_cell_runs_it_in_its_own_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole path on CPU: the suite file, the matrix, a worker process, the record and its notes."""
    from ampsuite import cli, results

    vit = {
        "plugin": "vit",
        "batch_size": 2,
        "image_size": 32,
        "patch_size": 16,
        "layers": 1,
        "heads": 2,
        "hidden": 32,
        "mlp": 64,
        "classes": 10,
    }
    suite = tmp_path / "patch.toml"
    text = toy_suite(
        "patch-cpu",
        cpu_threads=1,
        toy=None,
        workloads={"vit": vit, "bert": SMALL_BERT},  # a stride-16 patch convolution, and no convolution at all
        combinations={"fp32": [], "patch": ["patch-gemm"]},
    )
    suite.write_text(text, encoding="utf-8")
    out = tmp_path / "results.json"
    assert cli.main(["run", str(suite), "-o", str(out), "--no-report", "--no-peaks"]) == 0
    capsys.readouterr()
    cells = {c["id"]: c for c in results.load(out)["cells"]}
    patched = cells["vit/patch/bs2"]
    assert patched["status"] == "passed"
    assert patched["notes"]["patch_gemm"] == {"replaced": ["conv_proj"]}
    # Same seed, same batches, the same arithmetic: the loss after the numerics steps matches FP32's.
    assert patched["numerics"]["loss_at_n"] == pytest.approx(cells["vit/fp32/bs2"]["numerics"]["loss_at_n"], rel=1e-4)
    skipped = cells["bert/patch/bs2"]
    assert skipped["status"] == "skipped"
    assert "no convolution whose kernel equals its stride" in skipped["evidence"]["reason"]
