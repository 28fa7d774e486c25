"""Inference cells on CPU: the forward alone under inference_mode, its precisions, INT8 and TensorRT's skips,
and how a run keeps inference cells apart from training cells (analysis, report)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import run_in_workers, toy_suite
from records import cell, doc
from steps import skip_reason, use
from torch import nn

from ampsuite import BuildContext, CheckContext, NoOptions, SkipCell, Technique, TrainStep, Workload, analysis
from ampsuite.plugins.techniques import (
    _channels_last,
    amp,
    fused_optimizer,
    grad_accumulation,
    half_weights,
    inference,
    int8,
    tensorrt,
)
from ampsuite.plugins.workloads import _cnn, _toy, _transformer, cnn, toy, transformer
from ampsuite.report.render import render_site
from ampsuite.spec.options import build_options

MODULES = (amp, fused_optimizer, grad_accumulation, half_weights, inference, int8, tensorrt)
TECHNIQUES: dict[str, Technique] = {t.name: t for m in MODULES for t in m.ampsuite_techniques()}
CPU = torch.device("cpu")
TINY_BERT = {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "seq_len": 16, "vocab": 101, "dropout": 0.1}


def toy_step(tmp_path: Any, batch_size: int = 8) -> TrainStep:
    opts = toy.ToyOptions(features=8, hidden=16, layers=1, classes=4)
    return _toy.build(opts, BuildContext(CPU, batch_size, 0, str(tmp_path)))


def bert_step(tmp_path: Any, batch_size: int = 4) -> TrainStep:
    return _transformer.build(transformer.BertOptions(**TINY_BERT), BuildContext(CPU, batch_size, 0, str(tmp_path)))


def check_reason(name: str, techniques: tuple[str, ...] = ()) -> Any:
    technique = TECHNIQUES[name]
    assert technique.check is not None
    workload = Workload(name="w", summary="", build=lambda o, c: None, traits=frozenset({"model"}))  # type: ignore[arg-type,return-value]
    return technique.check(CheckContext(workload, None, "cpu", (name, *techniques), 8))


# -- the step --------------------------------------------------------------------


def test_inference_runs_the_forward_alone(tmp_path: Any) -> None:
    step = bert_step(tmp_path)
    model = step.model
    assert model is not None
    weights = [p.detach().clone() for p in model.parameters()]
    step = use(step, "inference")
    run = step.compose()
    out = [run(step.data()) for _ in range(3)]
    assert not model.training  # dropout off
    assert all(torch.is_inference(t) for t in out)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))  # nothing trained
    assert step.optimizer is None and step.scaler is None
    assert step.notes["inference"]["technique"] == "inference"
    # The same batch twice gives the same loss: no state changes between steps.
    batch = step.data()
    assert float(run(batch)) == float(run(batch))


def test_inference_without_the_loss_returns_the_output(tmp_path: Any) -> None:
    step = use(toy_step(tmp_path), "inference", loss=False)
    out = step.compose()(step.data())
    assert out.shape == (8, 4)
    assert step.notes["inference"]["returns"] == "output"


def test_inference_in_bf16_autocast_and_fp16_drops_the_scaler(tmp_path: Any) -> None:
    seen: list[torch.dtype] = []
    step = use(use(toy_step(tmp_path), "amp-bf16"), "inference")
    assert step.model is not None
    step.model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    step.compose()(step.data())
    assert seen == [torch.bfloat16]
    step = use(use(toy_step(tmp_path), "amp-fp16"), "inference")
    assert step.scaler is None and step.notes["inference"]["dropped"] == ["scaler", "optimizer"]


def test_inference_with_half_weights_runs_the_half_model(tmp_path: Any) -> None:
    plain = use(toy_step(tmp_path), "inference")
    step = use(use(toy_step(tmp_path), "half-weights", dtype="bfloat16"), "inference")
    assert step.model is not None
    assert {p.dtype for p in step.model.parameters()} == {torch.bfloat16}
    assert step.optimizer is None  # the FP32 masters went with it
    assert step.notes["inference"]["weights"] == "bfloat16"
    batch = plain.data()
    a, b = float(plain.compose()(batch)), float(step.compose()(batch))
    assert b == pytest.approx(a, rel=0.02)


def test_inference_composes_with_channels_last_batch_norm_in_eval(tmp_path: Any) -> None:

    opts = cnn.ResNetOptions(depth=18, width=8, image_size=32, classes=10)
    step = _cnn.build(opts, BuildContext(CPU, 2, 0, str(tmp_path)))
    step = _channels_last.apply(step, NoOptions())
    step = use(step, "inference")
    assert step.model is not None
    bn = next(m for m in step.model.modules() if isinstance(m, nn.BatchNorm2d))
    before = bn.running_mean.clone()
    step.compose()(step.data())
    assert torch.equal(bn.running_mean, before)  # eval mode: running statistics are used, not updated


def test_inference_refuses_training_techniques_and_model_less_workloads() -> None:
    assert "fused-optimizer is a training technique" in check_reason("inference", ("fused-optimizer",))
    assert "grad-accumulation is a training technique" in check_reason("inference", ("grad-accumulation",))
    assert skip_reason("gemm", "inference") == "inference needs a workload with trait 'model'; 'gemm' has none"
    assert check_reason("inference", ("amp-bf16", "channels-last", "torch-compile", "cuda-graphs")) is None


# -- int8 and tensorrt -------------------------------------------------------------


def test_int8_requires_inference_and_says_how_to_install() -> None:
    assert TECHNIQUES["int8"].requires == frozenset({"inference"})
    reason = check_reason("int8", ("inference",))
    try:
        import torchao  # noqa: F401
    except ImportError:
        assert reason == int8.INSTALL_HINT
    else:
        assert reason is None


def test_int8_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"^mode: expected one of 'dynamic', 'weight-only', got 'int4'$"):
        build_options(int8.Int8Options, {"mode": "int4"})


def test_int8_quantizes_through_torchaos_quantize(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[nn.Module, Any]] = []
    ao = types.ModuleType("torchao")
    ao.__version__ = "0.0-test"  # type: ignore[attr-defined]
    quantization = types.ModuleType("torchao.quantization")
    quantization.quantize_ = lambda model, config: calls.append((model, config))  # type: ignore[attr-defined]
    quantization.Int8DynamicActivationInt8WeightConfig = lambda: "dynamic-config"  # type: ignore[attr-defined]
    quantization.int8_weight_only = lambda: "old-weight-only"  # type: ignore[attr-defined]
    ao.quantization = quantization  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchao", ao)
    monkeypatch.setitem(sys.modules, "torchao.quantization", quantization)
    step = use(toy_step(tmp_path), "int8")
    assert calls == [(step.model, "dynamic-config")]
    use(toy_step(tmp_path), "int8", mode="weight-only")
    assert calls[-1][1] == "old-weight-only"  # older torchao: the factory function
    assert step.notes["int8"] == {"mode": "dynamic", "torchao": "0.0-test", "quantized": "nn.Linear"}

    def broken(model: nn.Module, config: Any) -> None:
        raise NotImplementedError("no kernel for this device")

    quantization.quantize_ = broken  # type: ignore[attr-defined]
    with pytest.raises(SkipCell, match=r"torchao 0\.0-test could not quantize here: NotImplementedError"):
        use(toy_step(tmp_path), "int8")


def test_int8_on_cpu_with_real_torchao(tmp_path: Any) -> None:
    pytest.importorskip("torchao")
    step = use(use(bert_step(tmp_path), "int8"), "inference")
    plain = use(bert_step(tmp_path), "inference")
    batch = plain.data()
    assert float(step.compose()(batch)) == pytest.approx(float(plain.compose()(batch)), rel=0.05)


def test_tensorrt_only_with_a_build_for_the_installed_torch() -> None:
    assert TECHNIQUES["tensorrt"].requires == frozenset({"cuda", "inference"})
    assert tensorrt.mismatch("2.11.0", "2.11.0+cu130") is None
    old = tensorrt.mismatch("2.10.0", "2.11.0+cu130")
    assert old == "torch-tensorrt 2.10.0 is built for torch 2.10, not torch 2.11.0+cu130"
    missing = tensorrt.mismatch(None, "2.11.0+cu130")
    assert missing is not None
    assert missing.startswith("torch-tensorrt is not installed (pip install torch-tensorrt==2.11.*")
    assert "drop torch-compile" in check_reason("tensorrt", ("inference", "torch-compile"))
    with pytest.raises(ValueError, match=r"^precision: expected one of 'fp32', 'fp16', 'bf16', got 'int4'$"):
        build_options(tensorrt.TensorRTOptions, {"precision": "int4"})


def test_tensorrt_skips_in_the_worker_off_cuda(tmp_path: Any) -> None:
    with pytest.raises(SkipCell, match="tensorrt needs a CUDA device"):
        use(toy_step(tmp_path), "tensorrt")


# -- a run: records, analysis, report ------------------------------------------------------

SUITE = toy_suite(
    "inference",
    toy={"plugin": "toy", "batch_size": [1, 16], "features": 8, "hidden": 16, "layers": 1, "classes": 4},
    combinations={
        "fp32": [],
        "bf16": ["amp-bf16"],
        "infer-fp32": ["inference"],
        "infer-bf16": ["inference", "amp-bf16"],
        "infer-o2": ["inference", "half-weights"],
        "infer-int8": ["inference", "int8"],
        "infer-trt": ["inference", "tensorrt"],
    },
    techniques={"half-weights": {"dtype": "bfloat16"}},
)


@pytest.fixture(scope="module")
def inference_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("inference") / "inference.toml"
    path.write_text(SUITE, encoding="utf-8")
    return run_in_workers(path)


@pytest.mark.slow
def test_inference_cells_run_and_say_so(inference_run: tuple[Path, dict[str, Any]]) -> None:
    _, doc = inference_run
    cells = {c["id"]: c for c in doc["cells"]}
    for bs in (1, 16):
        for combo in ("infer-fp32", "infer-bf16", "infer-o2"):
            record = cells[f"toy/{combo}/bs{bs}"]
            assert record["status"] == "passed", record.get("evidence")
            assert analysis.is_inference(record)
            step_time = record["metrics"]["step_time"]
            assert step_time["p10"] <= step_time["median"] <= step_time["p90"] <= step_time["p99"] <= step_time["max"]
        assert not analysis.is_inference(cells[f"toy/fp32/bs{bs}"])
        assert cells[f"toy/infer-trt/bs{bs}"]["status"] == "skipped"
    int8_record = cells["toy/infer-int8/bs1"]
    assert int8_record["status"] in ("passed", "skipped")


def test_inference_speedups_are_against_fp32_inference(inference_run: tuple[Path, dict[str, Any]]) -> None:
    _, doc = inference_run
    derived = analysis.derive(doc)
    assert derived["toy/infer-bf16/bs16"].fp32_id == "toy/infer-fp32/bs16"
    assert derived["toy/infer-o2/bs1"].fp32_id == "toy/infer-fp32/bs1"
    assert derived["toy/infer-fp32/bs1"].fp32_id == "toy/infer-fp32/bs1"
    assert derived["toy/bf16/bs16"].fp32_id == "toy/fp32/bs16"  # training stays with training
    assert derived["toy/infer-bf16/bs16"].numerics_verdict == "ok"
    best = analysis.best_per_workload(doc)
    assert set(best) == {"toy", "toy (inference)"}
    cells = {c["id"]: c for c in doc["cells"]}
    for key, infers in (("toy", False), ("toy (inference)", True)):
        # The crowned cell, or (fast measurement may leave none trustworthy) the cells passed over.
        entry = best[key]
        contenders = [entry.record] if entry.record is not None else [cells[c] for c, _, _ in entry.passed_over]
        assert contenders and all(analysis.is_inference(r) == infers for r in contenders)


def test_inference_cells_render_in_the_report(inference_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = inference_run
    doc = json.loads(path.read_text(encoding="utf-8"))
    index = render_site(doc, tmp_path / "site")
    html = index.read_text(encoding="utf-8")
    assert "toy (inference)" in html
    pages = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "site").glob("*.html"))
    assert "infer-bf16" in pages and "infer-fp32" in pages


def _base_cell(combination: str, techniques: list[str], *, inference: bool, baseline: str = "fp32") -> dict[str, Any]:
    record = cell("fp32", baseline=baseline, matmul_dtype="float32")
    record["id"] = f"toy/{combination}/bs32"
    record["combination"] = combination
    record["techniques"] = [{"name": name, "options": {}} for name in techniques]
    if inference:
        record["notes"] = {"inference": {"technique": "inference"}}
    return record


def test_inference_fp32_reference_ignores_the_suites_base_techniques() -> None:
    """[suite] base_techniques = ["cudnn-benchmark"]: the FP32 inference cell carries it, as the FP32 training
    baseline does; records do not say which techniques are base ones, so the baseline cell's techniques stand in."""
    cells = [
        _base_cell("fp32", ["cudnn-benchmark"], inference=False),
        _base_cell("infer-fp32", ["cudnn-benchmark", "inference"], inference=True),
        _base_cell("infer-bf16", ["cudnn-benchmark", "amp-bf16", "inference"], inference=True),
    ]
    derived = analysis.derive(doc(*cells))
    assert derived["toy/infer-bf16/bs32"].fp32_id == "toy/infer-fp32/bs32"
    assert derived["toy/infer-fp32/bs32"].fp32_id == "toy/infer-fp32/bs32"
    # The tuned reference is preferred to a cell with nothing but the inference technique (PyTorch's defaults).
    plain = _base_cell("infer-plain", ["inference"], inference=True)
    derived = analysis.derive(doc(*cells, plain))
    assert derived["toy/infer-bf16/bs32"].fp32_id == "toy/infer-fp32/bs32"
    assert derived["toy/infer-plain/bs32"].fp32_id == "toy/infer-fp32/bs32"
    # A baseline that is not FP32 (its matmuls in bfloat16) does not make its techniques base ones.
    amp_base = _base_cell("amp", ["amp-bf16"], inference=False, baseline="amp")
    amp_base["metrics"]["matmul_dtype"] = "bfloat16"
    infer_amp = _base_cell("infer-amp", ["amp-bf16", "inference"], inference=True, baseline="amp")
    derived = analysis.derive(doc(amp_base, infer_amp))
    assert derived["toy/infer-amp/bs32"].fp32_id is None


def test_training_references_are_the_tuned_ones_with_base_techniques() -> None:
    """base_techniques = ["cudnn-benchmark"] and an extra ``fp32-defaults = ["-cudnn-benchmark"]`` row: FP32 and
    TF32 are the cells a practitioner runs (cudnn.benchmark on), so every speedup and the numerics verdict are held
    against them, and PyTorch's defaults are an extra row (an untuned baseline inflated ResNet-50's speedups by 17%
    on an H200)."""
    fp32 = _base_cell("fp32", ["cudnn-benchmark"], inference=False)
    defaults = _base_cell("fp32-defaults", [], inference=False)
    defaults["metrics"]["step_time"]["median"] *= 1.17
    tf32 = _base_cell("tf32", ["cudnn-benchmark", "tf32"], inference=False)
    tf32_defaults = _base_cell("tf32-defaults", ["tf32"], inference=False)
    amp = _base_cell("amp", ["cudnn-benchmark", "amp-bf16"], inference=False)
    amp["metrics"]["matmul_dtype"] = "bfloat16"
    derived = analysis.derive(doc(defaults, tf32_defaults, fp32, tf32, amp))
    for cell_id in ("toy/amp/bs32", "toy/fp32-defaults/bs32", "toy/fp32/bs32"):
        assert derived[cell_id].fp32_id == "toy/fp32/bs32"
        assert derived[cell_id].tf32_id == "toy/tf32/bs32"
    assert derived["toy/amp/bs32"].numerics_verdict == "ok"
    assert derived["toy/fp32-defaults/bs32"].speedup_vs_fp32 is not None
    assert derived["toy/fp32-defaults/bs32"].speedup_vs_fp32 < 1.0
    # Without base techniques the reference is the cell without techniques, as before.
    plain = analysis.derive(doc(defaults, tf32_defaults))
    assert plain["toy/tf32-defaults/bs32"].fp32_id == "toy/fp32-defaults/bs32"
    assert plain["toy/tf32-defaults/bs32"].tf32_id == "toy/tf32-defaults/bs32"
