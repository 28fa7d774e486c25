"""The opt-in kernels probe: trace arithmetic on CPU, the profiler itself on CUDA."""

from __future__ import annotations

import gzip
import json
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from ampsuite import BuildContext, ProbeContext
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.probes import _flops, _tensorcores, kernels
from ampsuite.plugins.workloads import _cnn, cnn


def event(name: str, ts: float, dur: float, cat: str = "kernel") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_union_merges_overlaps_and_keeps_gaps() -> None:
    assert kernels.union_seconds([]) == 0.0
    assert kernels.union_seconds([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17.0
    assert kernels.union_seconds([(20, 25), (0, 10)]) == 15.0


@pytest.mark.parametrize(
    ("name", "cat", "expected"),
    [
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
            "kernel",
            "matmul/conv",
        ),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "kernel", "matmul/conv"),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>",
            "kernel",
            "matmul/conv",
        ),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", "kernel", "attention"),
        ("void cudnn::bn_fw_tr_1C11_singleread_spec_kernel<__nv_bfloat16, float>", "kernel", "normalization"),
        ("void at::native::batch_norm_collect_statistics_kernel<float>", "kernel", "normalization"),
        ("triton_red_fused__native_batch_norm_legit_functional_0", "kernel", "normalization"),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32>",
            "kernel",
            "normalization",
        ),
        ("void cudnn::ops::nchwToNhwcKernel<__nv_bfloat16>", "kernel", "layout/cast"),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)>",
            "kernel",
            "layout/cast",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous)::launch_clamp_scalar>",
            "kernel",
            "elementwise",
        ),
        ("triton_poi_fused_add_relu_3", "kernel", "elementwise"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "kernel", "reduction"),
        ("void at::native::(anonymous)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "kernel", "optimizer"),
        ("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", "copy"),
        ("Memset (Device)", "gpu_memset", "copy"),
        ("my_custom_kernel", "kernel", "other"),
        # "lambda" in a copy kernel's name is not the LAMB optimizer (seen on an H200)
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
            "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>",
            "kernel",
            "layout/cast",
        ),
        ("void at::native::_fused_sgd_kernel<float>", "kernel", "optimizer"),
    ],
)
def test_classify(name: str, cat: str, expected: str) -> None:
    assert kernels.classify(name, cat) == expected


def test_summarize_trace_busy_share_classes_and_top() -> None:
    trace = {
        "traceEvents": [
            event("sm90_xmma_gemm_a", 0, 600),
            event("sm90_xmma_gemm_a", 1000, 600),
            event("vectorized_elementwise_kernel<relu>", 600, 100),
            event("vectorized_elementwise_kernel<relu>", 1600, 100),
            # overlaps the first GEMM on another stream: counted in the class, not twice in the union
            event("Memcpy HtoD", 100, 150, cat="gpu_memcpy"),
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5},  # host side: ignored
            {"ph": "i", "cat": "kernel", "name": "marker", "ts": 0},  # not a complete event: ignored
        ]
    }
    s = kernels.summarize_trace(trace, wall_seconds=0.002, steps=2)
    assert s["busy_seconds_per_step"] == pytest.approx(700e-6)
    assert s["busy_share"] == pytest.approx(0.7)
    assert s["kernels_per_step"] == 2.5
    assert s["summed_seconds_per_step"] == pytest.approx(775e-6)
    assert list(s["classes"]) == ["matmul/conv", "elementwise", "copy"]
    assert s["classes"]["matmul/conv"]["share"] == pytest.approx(1200 / 1550)
    assert s["top"][0] == {
        "name": "sm90_xmma_gemm_a",
        "class": "matmul/conv",
        "calls_per_step": 1.0,
        "seconds_per_step": pytest.approx(600e-6),
        "share": pytest.approx(1200 / 1550),
    }


def test_summarize_empty_trace() -> None:
    s = kernels.summarize_trace({"traceEvents": []}, wall_seconds=0.01, steps=5)
    assert s["busy_share"] == 0.0 and s["kernels_per_step"] == 0 and s["top"] == []


def test_opt_in_only() -> None:
    assert "kernels" not in load_registry(PluginSettings(autoload=False)).probes
    loaded = load_registry(PluginSettings(extra=("ampsuite.plugins.probes.kernels",), autoload=False))
    assert loaded.probes["kernels"].inspect is kernels.inspect


def tiny_resnet_step(device: torch.device) -> Any:
    options = cnn.ResNetOptions(depth=18, width=8, image_size=32, classes=16)
    return _cnn.build(options, BuildContext(device, 4, 0, "unused"))


def test_cpu_cell_records_nothing() -> None:
    step = tiny_resnet_step(torch.device("cpu"))
    ctx = ProbeContext(step=step, run=step.compose(), cell={})
    kernels.inspect(ctx)
    assert ctx.metrics == {} and ctx.diagnostics == {} and ctx.warnings == []


def test_report_section_lists_profiled_cells_escaped() -> None:
    summary = kernels.summarize_trace({"traceEvents": [event("gemm<a&b>", 0, 800)]}, wall_seconds=0.001, steps=1)
    doc = {
        "run": {"id": "20261129T000000Z", "suite": {"name": "s"}},
        "cells": [
            {"id": "w/<x>/bs1", "metrics": {"step_time": {"median": 0.00095}}, "diagnostics": {"kernels": summary}},
            {"id": "w/cpu/bs1", "metrics": {"step_time": {"median": 0.001}}, "diagnostics": {}},
        ],
    }
    (section,) = kernels.ampsuite_report_sections([doc])
    assert "w/&lt;x&gt;/bs1" in section.html and "w/cpu" not in section.html
    assert "<td>80%</td>" in section.html and "<td>0.95</td>" in section.html
    assert (
        section.markdown is not None
        and "| s 20261129T000000Z | w/<x>/bs1 | 0.95 | 1.00 | 0.80 | 80% | 1 | matmul/conv 100% |" in section.markdown
    )
    assert list(kernels.ampsuite_report_sections([{"cells": []}])) == []


def _profiled(monkeypatch: pytest.MonkeyPatch, artifact_dir: Path | None) -> ProbeContext:
    """The probe on a step labelled CUDA, its profiler replaced by a trace of one 800 us kernel in 1 ms."""
    trace = {"traceEvents": [event("gemm", 0, 800)]}
    monkeypatch.setattr(kernels, "_profile", lambda ctx, steps: (trace, 0.001 * steps))
    step = types.SimpleNamespace(device=torch.device("cuda", 0))
    ctx = ProbeContext(step=step, run=lambda b: None, cell={}, artifact_dir=artifact_dir, artifact_prefix="artifacts/c")  # type: ignore[arg-type]
    kernels.inspect(ctx)
    return ctx


def test_the_timeline_is_saved_beside_the_results_and_named_in_the_record(monkeypatch, tmp_path: Path) -> None:
    ctx = _profiled(monkeypatch, tmp_path / "artifacts" / "c")
    assert ctx.diagnostics["kernels"]["trace"] == "artifacts/c/kernels-trace.json.gz"
    saved = json.loads(gzip.decompress((tmp_path / "artifacts" / "c" / kernels.TRACE_NAME).read_bytes()))
    assert saved["traceEvents"][0]["name"] == "gemm"  # what Perfetto and chrome://tracing open


def test_a_run_that_keeps_no_artifacts_records_no_trace(monkeypatch) -> None:
    ctx = _profiled(monkeypatch, None)
    assert "trace" not in ctx.diagnostics["kernels"] and ctx.metrics["gpu_busy_share"] == pytest.approx(0.16)


def test_an_artifact_name_is_one_file_name(tmp_path: Path) -> None:
    ctx = ProbeContext(step=None, run=lambda b: None, cell={}, artifact_dir=tmp_path)  # type: ignore[arg-type]
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(ValueError, match="one file name"):
            ctx.save_artifact(bad, b"")


def _traced_doc(trace: str) -> dict[str, Any]:
    summary = kernels.summarize_trace({"traceEvents": [event("gemm", 0, 800)]}, wall_seconds=0.001, steps=1)
    doc = json.loads((Path(__file__).parent / "fixtures" / "results_a.json").read_text(encoding="utf-8"))
    passed = next(r for r in doc["cells"] if r["status"] == "passed")
    passed.setdefault("diagnostics", {})["kernels"] = {**summary, "trace": trace}
    return doc


def test_the_report_copies_each_trace_into_the_site_and_links_it(tmp_path: Path) -> None:
    from ampsuite.report import render_site

    results = tmp_path / "run" / "results.json"
    (results.parent / "artifacts" / "c").mkdir(parents=True)
    trace = gzip.compress(b"{}")
    (results.parent / "artifacts" / "c" / kernels.TRACE_NAME).write_bytes(trace)
    doc = _traced_doc("artifacts/c/kernels-trace.json.gz")
    results.write_text(json.dumps(doc), encoding="utf-8")
    site = tmp_path / "site"
    render_site([doc], site, results_files=[results])
    assert (site / "artifacts" / "c" / kernels.TRACE_NAME).read_bytes() == trace
    pages = "".join(p.read_text(encoding="utf-8") for p in site.glob("workload-*.html"))
    assert 'href="artifacts/c/kernels-trace.json.gz"' in pages and "Perfetto" in pages


def test_a_trace_path_outside_the_results_folder_is_neither_read_nor_linked(tmp_path: Path) -> None:
    from ampsuite.report import render_site

    secret = tmp_path / "secret.json.gz"
    secret.write_bytes(b"x")
    results = tmp_path / "run" / "results.json"
    results.parent.mkdir()
    doc = _traced_doc("../secret.json.gz")
    results.write_text(json.dumps(doc), encoding="utf-8")
    site = tmp_path / "site"
    render_site([doc], site, results_files=[results])
    assert not any(p.name == "secret.json.gz" for p in site.rglob("*"))
    assert "secret.json.gz" not in "".join(p.read_text(encoding="utf-8") for p in site.glob("workload-*.html"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_profile_of_a_real_step(tmp_path: Path) -> None:
    step = tiny_resnet_step(torch.device("cuda"))
    ctx = ProbeContext(step=step, run=step.compose(), cell={}, artifact_dir=tmp_path, artifact_prefix="a")
    kernels.inspect(ctx)
    assert ctx.warnings == []
    k = ctx.diagnostics["kernels"]
    assert k["trace"] == "a/kernels-trace.json.gz" and (tmp_path / kernels.TRACE_NAME).stat().st_size > 1000
    assert 0.0 < ctx.metrics["gpu_busy_share"] <= 1.0
    assert k["kernels_per_step"] > 20
    assert "matmul/conv" in k["classes"] and "normalization" in k["classes"]
    # the union never exceeds the host's wall time of the same steps
    assert k["busy_seconds_per_step"] <= k["wall_seconds_per_step"]


def test_flop_counting_runs_the_original_of_a_compiled_model() -> None:
    """The eager probes swap a torch.compile'd model for its original module and put it back."""

    step = tiny_resnet_step(torch.device("cpu"))
    original = step.model
    seen: list[Any] = []

    class Compiled(torch.nn.Module):  # stands in for OptimizedModule: same attribute, no compilation
        def __init__(self, mod: torch.nn.Module) -> None:
            super().__init__()
            self._orig_mod = mod

        def forward(self, *args: Any) -> Any:
            raise AssertionError("the probe called the compiled module")

    step.model = Compiled(original)
    hook = original.register_forward_hook(lambda m, i, o: seen.append(m))
    ctx = ProbeContext(step=step, run=step.compose(), cell={})
    _flops.inspect(ctx)
    _tensorcores.inspect(ctx)
    hook.remove()
    assert ctx.metrics["flops_per_step"] > 0 and len(seen) == 2
    assert isinstance(step.model, Compiled)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_compiled_model_still_compiled_after_the_eager_probes() -> None:
    """On an H200 (torch 2.11) a compiled module once called under FlopCounterMode ran eagerly ever after."""

    step = tiny_resnet_step(torch.device("cuda"))
    step.model = torch.compile(step.model)
    run = step.compose()
    run(step.data())
    ctx = ProbeContext(step=step, run=run, cell={})
    _flops.inspect(ctx)
    _tensorcores.inspect(ctx)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(step.data())
        torch.cuda.synchronize()
    assert any("Torch-Compiled Region" in e.name for e in prof.events())
