"""FP8 on CPU: the fp8 technique and the float8 GEMM dtypes are listed, validated,
skipped with their reasons off an FP8 GPU (with the install hint when torchao is missing), and the
FP8-against-BF16 comparison is a pure function of the results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import SMALL_BERT, toy_suite
from torch import nn

from ampsuite import BuildContext, SkipCell, Status, TrainStep, cli
from ampsuite.contract.errors import ExitCode
from ampsuite.plugins.probes import _tensorcores
from ampsuite.plugins.techniques import _fp8, fp8
from ampsuite.plugins.workloads import _gemm, _transformer, _vit, gemm, transformer
from ampsuite.run import peaks

CPU = torch.device("cpu")

MM = {"plugin": "gemm", "batch_size": 1, "m": 32, "n": 32, "k": 32, "dtype": ["bfloat16", "float8_e4m3fn"]}


def _suite(
    combinations: dict[str, list[str]] | None = None, techniques: dict[str, dict[str, Any]] | None = None
) -> str:
    """GEMMs in bfloat16 and float8 and a small BERT, in FP32 and ``combinations`` (AMP-bf16 with fp8 by default)."""
    return toy_suite(
        "fp8-cpu",
        toy=None,
        workloads={"mm": MM, "bert": SMALL_BERT},
        combinations=combinations or {"fp32": [], "bf16-fp8": ["amp-bf16", "fp8"]},
        techniques=techniques,
        measure=None,
    )


SUITE = _suite()


def _dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str = SUITE) -> tuple[int, str, str]:
    path = tmp_path / "fp8.toml"
    path.write_text(text)
    code = cli.main(["run", str(path), "--dry-run"])
    out = capsys.readouterr()
    return code, out.out, out.err


def _fake_find_spec(present: bool) -> Any:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torchao":
            return object() if present else None
        return real(name, *args, **kwargs)

    return find_spec


def test_list_shows_the_fp8_technique_and_the_float8_gemm_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "technique fp8 (plugin fp8) [order 35; requires amp-bf16; conflicts with amp-fp16, cuda-graphs; "
        "workload traits model]" in out
    )
    assert "recipe ('tensorwise' | 'rowwise' | 'rowwise_with_gw_hp', default 'tensorwise')" in out
    assert "'float8_e4m3fn' | 'float8_e5m2'" in out


def test_without_torchao_the_dry_run_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _fake_find_spec(present=False))
    code, out, _ = _dry_run(tmp_path, capsys)
    assert code == 0
    assert "bert/bf16-fp8/bs2  SKIP (fp8: needs torchao, which is not installed: pip install 'ampsuite[fp8]')" in out
    assert "mm[dtype=float8_e4m3fn]/fp32/bs1  SKIP (float8_e4m3fn GEMM runs torch._scaled_mm" in out
    assert "mm[dtype=bfloat16]/fp32/bs1  run" in out


def test_with_torchao_a_cpu_run_skips_fp8_for_the_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _fake_find_spec(present=True))
    _, out, _ = _dry_run(tmp_path, capsys)
    assert "bert/bf16-fp8/bs2  SKIP (fp8: needs a CUDA GPU of compute capability >= 8.9 (FP8 Tensor Cores); " in out
    assert "this run is on cpu)" in out


def test_fp8_needs_amp_bf16_and_refuses_amp_fp16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _dry_run(tmp_path, capsys, _suite({"fp32": [], "alone": ["fp8"], "f16": ["amp-fp16", "fp8"]}))
    assert "bert/alone/bs2  SKIP (fp8 requires amp-bf16 in the same combination)" in out
    assert "bert/f16/bs2  SKIP (fp8 conflicts with amp-fp16)" in out


def test_a_bad_recipe_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _dry_run(tmp_path, capsys, _suite(techniques={"fp8": {"recipe": "blockwise"}}))
    assert code == ExitCode.USAGE_ERROR
    assert len(err.strip().splitlines()) == 1
    assert (
        "techniques.fp8.recipe: expected one of 'tensorwise', 'rowwise', 'rowwise_with_gw_hp', got 'blockwise'" in err
    )


@pytest.mark.parametrize(
    ("options", "device", "reason"),
    [
        (gemm.GemmOptions(dtype="bfloat16"), "cpu", None),
        (gemm.GemmOptions(dtype="float8_e4m3fn"), "cuda", None),
        (gemm.GemmOptions(dtype="float8_e5m2", m=8200), "cuda", None),  # M is free
        (gemm.GemmOptions(dtype="float8_e4m3fn"), "cpu", "needs a CUDA GPU of compute capability >= 8.9"),
        (gemm.GemmOptions(dtype="float8_e4m3fn", k=8200), "cuda", "multiples of 16; got k=8200"),
        (gemm.GemmOptions(dtype="float8_e4m3fn", k=8193, n=8193), "cuda", "got k=8193, n=8193"),
        (gemm.GemmOptions(dtype="float8_e4m3fn", batch=2), "cuda", "batch must be 1, got 2"),
    ],
)
def test_gemm_check_decides_fp8_cells_at_expansion(options: gemm.GemmOptions, device: str, reason: str | None) -> None:
    got = gemm.check(options, device)
    assert got == reason if reason is None else (got is not None and reason in got)


def test_fp8_gemm_step_runs_scaled_mm_with_per_tensor_scales() -> None:
    options = gemm.GemmOptions(m=32, n=48, k=64, dtype="float8_e4m3fn")
    try:
        step = _gemm.build(options, BuildContext(CPU, batch_size=1, seed=0, data_dir=""))
        value = step.compose()(step.data())
    except (RuntimeError, NotImplementedError) as exc:  # a torch without a CPU _scaled_mm
        pytest.skip(f"torch._scaled_mm has no CPU kernel here: {exc}")
    a, b = step.data().inputs
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert b.stride() == (1, 64)  # column-major second operand
    reference = _gemm.build(gemm.GemmOptions(m=32, n=48, k=64), BuildContext(CPU, batch_size=1, seed=0, data_dir=""))
    exact = reference.compose()(reference.data())
    assert value.dtype == torch.bfloat16
    assert abs(value.float().item() - exact.item()) < 0.1 * (abs(exact.item()) + 1.0)
    assert step.notes["fp8_gemm"]["out_dtype"] == "bfloat16"


def test_quantised_operands_use_the_format_range() -> None:
    t = torch.randn(64, 64) * 1000
    q, scale = _gemm._quantised(t, torch.float8_e4m3fn)
    assert scale.dtype == torch.float32 and scale.dim() == 0
    assert q.float().abs().max().item() == pytest.approx(448.0)
    assert torch.allclose(q.float() * scale, t, rtol=0.07, atol=1.0)


def test_linear_plan_keeps_misaligned_last_and_attention_projections() -> None:
    model = _transformer.BertForMaskedLM(
        transformer.BertOptions(layers=1, hidden=32, heads=2, intermediate=64, seq_len=8, vocab=100)
    )
    converted, kept = _fp8.linear_plan(model)
    assert converted == [
        "layers.0.attention.qkv",
        "layers.0.attention.out",
        "layers.0.ffn_in",
        "layers.0.ffn_out",
        "head_dense",
    ]
    assert kept == ["decoder: out_features 100 not a multiple of 16"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(32, 2)
            self.mlp = nn.Linear(32, 64)
            self.head = nn.Linear(64, 32)

    converted, kept = _fp8.linear_plan(Block())
    assert converted == ["mlp"]
    assert kept[0].startswith("attention.out_proj: nn.MultiheadAttention")
    assert kept[1] == "head: the last layer (keep_last)"
    assert _fp8.linear_plan(Block(), keep_last=False)[0] == ["mlp", "head"]


def test_apply_off_cuda_is_a_skip_with_the_reason() -> None:
    step = TrainStep(device=CPU, batch_size=1, samples_per_step=1, data=lambda: None, model=nn.Linear(16, 16))  # type: ignore[arg-type,return-value]
    with pytest.raises(SkipCell, match="fp8 needs a CUDA GPU; this cell is on cpu"):
        _fp8.apply(step, fp8.Fp8Options())


def _record(cid: str, names: list[str], median: float | None, loss: float, **extra: Any) -> dict[str, Any]:
    options = extra.pop("options", {"hidden": 4096})
    plugin = extra.pop("plugin", "bert")
    return {
        "id": cid,
        "status": extra.pop("status", Status.PASSED),
        "batch_size": 8,
        "world_size": 1,
        "workload": {"id": extra.pop("workload", "big"), "plugin": plugin, "options": options},
        "techniques": [{"name": n, "options": {"recipe": "tensorwise"} if n == "fp8" else {}} for n in names],
        "metrics": {"step_time": {"median": median}},
        "numerics": {"loss_at_n": loss, "losses": [loss]},
        "notes": extra.pop("notes", {}),
    }


def test_bf16_comparisons_pair_each_fp8_cell_with_its_bf16_twin() -> None:
    notes = {"fp8": {"recipe": "tensorwise", "converted_linears": 17, "kept_high_precision": ["decoder: ..."]}}
    doc = {
        "cells": [
            _record("big/fp32/bs8", [], 2.0, 5.0),
            _record("big/bf16/bs8", ["amp-bf16", "fused-optimizer"], 0.2, 5.1),
            _record("big/bf16-fp8/bs8", ["amp-bf16", "fused-optimizer", "fp8"], 0.16, 5.2, notes=notes),
            _record("small/bf16-fp8/bs8", ["amp-bf16", "fp8"], 0.1, 1.0, workload="small"),  # no twin
            _record("mm[dtype=bfloat16]/fp32/bs1", [], 1.4, 90.0, plugin="gemm", options={"dtype": "bfloat16"}),
            _record(
                "mm[dtype=float8_e4m3fn]/fp32/bs1", [], 0.7, 91.0, plugin="gemm", options={"dtype": "float8_e4m3fn"}
            ),
        ]
    }
    rows = {r["id"]: r for r in fp8.bf16_comparisons(doc)}
    assert set(rows) == {"big/bf16-fp8/bs8", "small/bf16-fp8/bs8", "mm[dtype=float8_e4m3fn]/fp32/bs1"}
    big = rows["big/bf16-fp8/bs8"]
    assert big["reference_id"] == "big/bf16/bs8"
    assert big["speedup"] == pytest.approx(1.25)
    assert big["loss_diff"] == pytest.approx(0.1)
    assert big["loss_rel_diff"] == pytest.approx(0.1 / 5.1)
    assert big["recipe"] == "tensorwise" and big["converted_linears"] == 17
    assert rows["small/bf16-fp8/bs8"]["reference_id"] is None and rows["small/bf16-fp8/bs8"]["speedup"] is None
    mm = rows["mm[dtype=float8_e4m3fn]/fp32/bs1"]
    assert mm["reference_id"] == "mm[dtype=bfloat16]/fp32/bs1" and mm["speedup"] == pytest.approx(2.0)
    json.dumps(rows)  # plain data

    sections = list(fp8.ampsuite_report_sections([doc]))
    assert len(sections) == 1 and sections[0].anchor == "fp8"
    assert "1.25\u00d7" in sections[0].html and "not in this run" in sections[0].html
    assert sections[0].markdown is not None and "| big/bf16-fp8/bs8 | big/bf16/bs8 |" in sections[0].markdown
    assert list(fp8.ampsuite_report_sections([{"cells": [doc["cells"][0]]}])) == []


def test_a_failed_fp8_cell_shows_its_status_not_a_speedup() -> None:
    doc = {
        "cells": [
            _record("big/bf16/bs8", ["amp-bf16"], 0.2, 5.1),
            _record("big/bf16-fp8/bs8", ["amp-bf16", "fp8"], None, 5.2, status=Status.FAILED),
        ]
    }
    (row,) = fp8.bf16_comparisons(doc)
    assert row["speedup"] is None and row["loss_diff"] is None and row["status"] == "failed"
    assert "<td>failed</td>" in next(iter(fp8.ampsuite_report_sections([doc]))).html


def test_tensor_cores_probe_classes_an_fp8_training_tensor_by_its_payload() -> None:
    class Float8Like(torch.Tensor):
        """Stands in for torchao's Float8TrainingTensor: advertises bf16, carries float8 ``_data``."""

    t = torch.zeros(2, 2, dtype=torch.bfloat16).as_subclass(Float8Like)
    t._data = torch.zeros(2, 2).to(torch.float8_e4m3fn)  # type: ignore[attr-defined]
    assert _tensorcores._payload_dtype(t) == torch.float8_e4m3fn
    assert _tensorcores._payload_dtype(torch.zeros(2, dtype=torch.bfloat16)) == torch.bfloat16
    assert _tensorcores.dtype_class("_scaled_mm", torch.float8_e5m2, "cuda") == "float8_e5m2"
    assert _tensorcores._align("float8_e4m3fn") == 16 and _tensorcores._align("bfloat16") == 8


def test_mfu_finds_the_fp8_peak_by_the_cells_matmul_dtype() -> None:
    table = {"matmul_tflops": {"bfloat16": 800.0, "float8_e4m3fn": 1600.0, "float8_e5m2": 1600.0}}
    assert peaks.mfu(1200.0, "float8_e4m3fn", table) == pytest.approx(0.75)
    assert peaks.mfu(800.0, "float8_e5m2", table) == pytest.approx(0.5)


def _mha_and_copy(**kwargs: Any) -> tuple[nn.MultiheadAttention, nn.Module]:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True, **kwargs)
    holder = nn.Sequential(mha)
    replaced, kept = _fp8.split_attention(holder)
    assert (replaced, kept) == (["0"], [])
    return mha, holder[0]


@pytest.mark.parametrize("bias", [True, False])
def test_split_attention_computes_what_multihead_attention_did(bias: bool) -> None:
    mha, split = _mha_and_copy(bias=bias)
    assert type(split).__name__ == "SelfAttention" and isinstance(split.in_proj, nn.Linear)
    assert [id(p) for p in split.parameters()] == [id(p) for p in mha.parameters()]
    x = torch.randn(3, 7, 32, requires_grad=True)
    grads = []
    for module in (mha, split):
        x.grad = None
        for p in mha.parameters():
            p.grad = None
        out, weights = module(x, x, x, need_weights=False)
        out.square().sum().backward()
        assert weights is None
        grads.append((out.detach(), x.grad.clone(), [p.grad.clone() for p in mha.parameters()]))
    (ref, ref_dx, ref_dp), (got, got_dx, got_dp) = grads
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got_dx, ref_dx)
    for a, b in zip(got_dp, ref_dp, strict=True):
        torch.testing.assert_close(a, b)


def test_split_attention_keeps_other_calls_exact() -> None:
    mha, split = _mha_and_copy()
    x, y = torch.randn(2, 5, 32), torch.randn(2, 6, 32)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, -2:] = True
    calls = [((x, y, y), {"key_padding_mask": mask}), ((x, x, x), {}), ((x, y, y), {"need_weights": False})]
    for args, kwargs in calls:
        ref_out, ref_w = mha(*args, **kwargs)
        out, w = split(*args, **kwargs)
        torch.testing.assert_close(out, ref_out)
        assert (w is None) == (ref_w is None)
        if ref_w is not None:
            torch.testing.assert_close(w, ref_w)


def test_split_attention_leaves_what_it_cannot_replace_with_the_reason() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seq_first = nn.MultiheadAttention(32, 2)
            self.cross = nn.MultiheadAttention(32, 2, kdim=16, vdim=16, batch_first=True)
            self.biased = nn.MultiheadAttention(32, 2, add_bias_kv=True, batch_first=True)
            self.plain = nn.MultiheadAttention(32, 2, batch_first=True)

    block = Block()
    replaced, kept = _fp8.split_attention(block)
    assert replaced == ["plain"]
    assert kept == [
        "seq_first: not batch_first",
        "cross: key or value dimension differs from the embedding's",
        "biased: has bias_k/bias_v or add_zero_attn",
    ]
    converted, _ = _fp8.linear_plan(block, keep_last=False)
    assert converted == ["plain.in_proj", "plain.out_proj"]


def test_attention_option_doubles_vits_fp8_linears() -> None:
    from ampsuite.plugins.workloads import vit
    from ampsuite.plugins.workloads._vit import make_model

    options = vit.ViTOptions(image_size=32, patch_size=16, layers=2, heads=2, hidden=32, mlp=64, classes=10)
    model = make_model(options)
    assert len(_fp8.linear_plan(model)[0]) == 2 * 2  # the MLPs only
    x = torch.randn(2, 3, 32, 32)
    torch.manual_seed(1)
    before = model(x)
    _fp8.split_attention(model)
    converted, _ = _fp8.linear_plan(model)
    assert len(converted) == 2 * 4  # and each block's two attention projections
    torch.manual_seed(1)
    torch.testing.assert_close(model(x), before)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or fp8.torchao_missing(), reason="needs a CUDA GPU and torchao")
def test_fp8_attention_trains_a_vit_on_the_gpu(tmp_path: Path) -> None:
    from ampsuite.plugins.workloads import vit

    if torch.cuda.get_device_capability() < fp8.MIN_CAPABILITY:
        pytest.skip("needs FP8 Tensor Cores")
    options = vit.ViTOptions(image_size=64, patch_size=16, layers=2, heads=2, hidden=64, mlp=128, classes=16)
    device = torch.device("cuda")
    step = _vit.build(options, BuildContext(device=device, batch_size=32, seed=0, data_dir=str(tmp_path)))
    step.autocast_dtype = torch.bfloat16
    step = _fp8.apply(step, fp8.Fp8Options(attention=True))
    assert step.notes["fp8"]["converted_linears"] == 2 * 4
    assert step.notes["fp8"]["attention_modules_split"] == 2
    kinds = {type(m).__name__ for m in step.model.modules()}
    assert "Float8Linear" in kinds and "MultiheadAttention" not in kinds
    run = step.compose()
    losses = [float(run(step.data())) for _ in range(3)]
    assert all(torch.isfinite(torch.tensor(losses))), losses


def test_linear_plan_keeps_named_and_small_linears_and_the_head() -> None:
    from ampsuite.plugins.workloads import _llm, llm

    model = _llm.Decoder(llm.LlmOptions(preset="tiny", layers=1, dim=64, ffn=256).shape)
    # Every product of a width-64 model has 64 on one side: none reaches 128 on both.
    assert _fp8.linear_plan(model, min_features=128)[0] == []
    converted, kept = _fp8.linear_plan(model, filter_fqns=["attention.wk"], min_features=64)
    assert converted == [
        "layers.0.attention.wq",
        "layers.0.attention.wo",
        "layers.0.feed_forward.w1",
        "layers.0.feed_forward.w2",
        "layers.0.feed_forward.w3",
    ]
    assert kept == [
        "layers.0.attention.wk: named in filter_fqns",
        "layers.0.attention.wv: 64 x 32 under min_features 64",
        "output: the last layer (keep_last)",
    ]


def test_fsdp_all_gather_takes_the_tensorwise_recipe() -> None:
    from ampsuite.spec.options import OptionError, build_options

    with pytest.raises(OptionError, match=r"fsdp_all_gather takes the tensorwise recipe \(torchao's\), got 'rowwise'"):
        build_options(fp8.Fp8Options, {"recipe": "rowwise", "fsdp_all_gather": True})


def _check_context(names: list[str], options: Any) -> Any:
    from ampsuite import CheckContext
    from ampsuite.host.manager import PluginSettings, load_registry

    workload = load_registry(PluginSettings(autoload=False)).workloads["llm"]
    return CheckContext(workload, None, "cuda", tuple(names), 8, {"fp8": options})


def test_fsdp_all_gather_needs_fsdp2_in_the_combination(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp8, "torchao_missing", lambda: False)
    gather = fp8.Fp8Options(fsdp_all_gather=True)
    assert fp8.check(_check_context(["amp-bf16", "fp8"], gather)) == (
        "fsdp_all_gather needs fsdp2 in the combination (it changes how FSDP2 all-gathers the weights)"
    )
    assert fp8.check(_check_context(["amp-bf16", "fp8", "fsdp2"], gather)) is None
    assert fp8.check(_check_context(["amp-bf16", "fp8"], fp8.Fp8Options())) is None


def test_scales_are_precomputed_after_each_update_on_the_model_as_it_is_then() -> None:
    calls: list[str] = []
    model = nn.Linear(16, 16)
    step = TrainStep(device=CPU, batch_size=1, samples_per_step=1, data=lambda: None, model=model)  # type: ignore[arg-type,return-value]
    step.update = lambda: calls.append("update")
    _fp8._precompute_scales_after_update(step, lambda m: calls.append(f"scales of {type(m).__name__}"))
    step.model = nn.Sequential(model)  # what fsdp2 or compile leave in its place
    step.phases()[1]()
    assert calls == ["update", "scales of Sequential"]
