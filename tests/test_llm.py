"""The built-in `llm` workload: shapes and presets, training on CPU, the FLOPs convention, model MFU."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from records import cell, doc

from ampsuite import BuildContext, ProbeContext, TrainStep, analysis
from ampsuite.analysis.datasheet import datasheet_bf16_tflops
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.probes import _flops
from ampsuite.plugins.workloads import llm
from ampsuite.spec.options import OptionError, build_options

CPU = torch.device("cpu")
REGISTRY = load_registry(PluginSettings(autoload=False))
TINY = llm.LlmOptions(preset="tiny")


def build(options: llm.LlmOptions = TINY, batch_size: int = 4, seed: int = 0) -> TrainStep:
    return REGISTRY.workloads["llm"].build(options, BuildContext(CPU, batch_size, seed, "unused"))


def test_registered_in_tokens_with_a_model_a_data_path_and_blocks() -> None:
    workload = REGISTRY.workloads["llm"]
    assert workload.unit == "tokens"
    assert set(workload.traits) == {"model", "data-path", "blocks"}


def test_the_09b_preset_is_the_measured_shape() -> None:
    shape = llm.LlmOptions(preset="0.9b").shape
    assert (shape.dim, shape.layers, shape.heads, shape.kv_heads, shape.ffn, shape.vocab, shape.seq_len) == (
        2048,
        16,
        16,
        8,
        5632,
        32768,
        2048,
    )
    assert not shape.tied


def test_an_option_given_replaces_the_presets_value_and_the_rest_stay() -> None:
    shape = llm.LlmOptions(preset="0.9b", layers=4, seq_len=512, tied=True).shape
    assert (shape.layers, shape.seq_len, shape.tied, shape.dim, shape.kv_heads) == (4, 512, True, 2048, 8)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"preset": "tiny", "heads": 5}, r"heads \(5\) must divide dim \(64\)"),
        ({"preset": "tiny", "kv_heads": 3}, r"kv_heads \(3\) must divide heads \(4\)"),
        ({"preset": "tiny", "loss_chunks": 5}, r"loss_chunks \(5\) must divide seq_len \(32\)"),
        ({"preset": "tiny", "dim": 0}, r"dim: expected an integer >= 1, got 0"),
        ({"preset": "huge"}, r"preset: expected one of 'tiny', '125m', '0.9b', 'llama3-8b', got 'huge'"),
        ({"preset": "tiny", "lr": 0}, r"lr: expected a number > 0"),
    ],
)
def test_bad_options_are_one_line_errors(values: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionError, match=message) as info:
        build_options(llm.LlmOptions, values)
    assert "\n" not in str(info.value)


def test_the_step_counts_tokens_and_names_its_blocks() -> None:
    step = build(batch_size=3)
    assert step.samples_per_step == 3 * 32
    assert step.blocks == "layers"
    assert len(step.model_blocks()) == 2


@pytest.mark.parametrize("tied", [False, True])
def test_the_convention_s_n_is_every_parameter_but_the_token_embedding(tied: bool) -> None:
    options = llm.LlmOptions(preset="tiny", tied=tied)
    model = build(options).model
    assert model is not None
    embedding = model.tok_embeddings.weight.numel()
    assert llm.non_embedding_params(options.shape) == sum(p.numel() for p in model.parameters()) - embedding


def test_model_flops_follow_6n_plus_12lhqt_per_token() -> None:
    shape = llm.LlmOptions(preset="0.9b").shape
    n = 822_151_168  # 16 blocks of 47.2M, the final norm and the 67.1M-parameter untied head
    assert llm.non_embedding_params(shape) == n
    assert llm.model_flops_per_token(shape) == 6 * n + 12 * 16 * 16 * 128 * 2048 == 5_738_213_376
    step = build(batch_size=2)
    assert step.model_flops_per_step == llm.model_flops_per_token(TINY.shape) * 2 * 32


def test_the_flop_counter_counts_linears_6x_and_attention_14x() -> None:
    """torch's figure beside the convention's: no norm weights, and a fused attention's backward recomputation."""
    step = build(batch_size=2)
    ctx = ProbeContext(step=step, run=step.compose(), cell={})  # type: ignore[arg-type]
    _flops.inspect(ctx)
    shape, tokens = TINY.shape, 2 * 32
    norms = (2 * shape.layers + 1) * shape.dim
    linear = 6 * (llm.non_embedding_params(shape) - norms) * tokens
    attention = 14 * shape.layers * shape.heads * shape.head_dim * shape.seq_len * tokens
    assert ctx.metrics["flops_per_step"] == linear + attention


def test_the_tiny_preset_learns_its_repeated_batches() -> None:
    step = build()
    run = step.compose()
    losses = [float(run(step.data())) for _ in range(24)]
    assert losses[0] == pytest.approx(torch.log(torch.tensor(256.0)).item(), abs=0.05)
    assert sum(losses[-4:]) / 4 < losses[0] - 0.25


def test_chunked_loss_gives_the_same_loss_and_gradients() -> None:
    plain, chunked = build(), build(llm.LlmOptions(preset="tiny", loss_chunks=4))
    for step in (plain, chunked):
        forward_backward, _ = step.phases()
        step.notes["loss"] = float(forward_backward(step.data()))
    assert chunked.notes["loss"] == pytest.approx(plain.notes["loss"], rel=1e-6)
    assert plain.model is not None and chunked.model is not None
    for (name, a), b in zip(plain.model.named_parameters(), chunked.model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7, msg=name)


def _llm_cell(combination: str, *, median: float, matmul_dtype: str, flops: float) -> dict[str, Any]:
    record = cell(combination, median=median, matmul_dtype=matmul_dtype)
    record["metrics"]["model_flops_per_step"] = flops
    return record


def test_model_mfu_against_the_datasheet_and_the_measured_bf16_peak() -> None:
    # The 0.9B decoder at batch 8: 61,300 tokens/s is 35.6% of an H200's 989.4 TFLOP/s.
    flops = llm.model_flops_per_token(llm.LlmOptions(preset="0.9b").shape) * 8 * 2048
    median = 8 * 2048 / 61_300
    d = analysis.derive(
        doc(
            _llm_cell("amp", median=median, matmul_dtype="bfloat16", flops=flops),
            _llm_cell("tf32", median=median * 2, matmul_dtype="tf32", flops=flops),
            cell("fp32", median=median * 3),
            peaks={"bfloat16": 700.0},
            gpu="NVIDIA H200",
        )
    )
    bf16 = d["toy/amp/bs32"]
    assert bf16.model_tflops == pytest.approx(351.8, abs=0.1)
    assert bf16.mfu_datasheet == pytest.approx(0.3555, abs=1e-4)
    assert bf16.mfu_measured == pytest.approx(bf16.model_tflops / 700.0)
    assert bf16.mfu_basis == "bf16"
    assert d["toy/tf32/bs32"].mfu_basis == "bf16-equivalent"  # its products were not 16-bit
    assert d["toy/tf32/bs32"].mfu_datasheet == pytest.approx(bf16.mfu_datasheet / 2)
    assert d["toy/fp32/bs32"].model_tflops is None  # no declared model FLOPs, no model MFU


def test_no_datasheet_mfu_for_a_gpu_not_in_the_table() -> None:
    d = analysis.derive(doc(_llm_cell("amp", median=0.1, matmul_dtype="bfloat16", flops=1e12), gpu="Mystery GPU"))
    assert d["toy/amp/bs32"].model_tflops == pytest.approx(10.0)
    assert d["toy/amp/bs32"].mfu_datasheet is None


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H200", 989.4),
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.5),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.05),
        ("NVIDIA GeForce RTX 4090", None),
        (None, None),
    ],
)
def test_datasheet_peaks_by_the_recorded_gpu_name(name: str | None, tflops: float | None) -> None:
    assert datasheet_bf16_tflops(name) == tflops


@pytest.mark.parametrize(
    ("suite", "cells"),
    [
        (
            "llm.toml",
            ["fp32", "tf32", "bf16", "bf16-ac", "bf16-compile", "bf16-compile-fp8", "bf16-compile-fp8-rowwise"],
        ),
        ("tune-llm.toml", ["fp32", "tf32", "amp-bf16", "amp-fp16", "fused", "compiled", "fp8", "checkpointed"]),
    ],
)
def test_the_gpu_suites_expand_to_the_table_s_recipes(
    suite: str, cells: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/gpu/llm.toml and tune-llm.toml (run on a GPU by hand) are valid: the 0.9B decoder at batch 8."""
    from pathlib import Path

    from ampsuite.host import environment, session
    from ampsuite.plugins.techniques import fp8

    monkeypatch.setattr(environment, "gpu_count", lambda: 1)
    monkeypatch.setattr(session, "resolve_device", lambda spec_device, device: "cuda")
    plan = session.plan(Path(__file__).parent / "gpu" / suite)
    expanded = {c.id: c for c in plan.cells if c.batch_size == 8}
    assert list(expanded) == [f"llm-900m/{name}/bs8" for name in cells]
    for one in expanded.values():
        assert one.options["preset"] == "0.9b"
        assert one.skip_reason is None or ("fp8" in one.technique_names and fp8.torchao_missing())
    compiled = [dict(c.techniques)["torch-compile"] for c in expanded.values() if "torch-compile" in c.technique_names]
    assert compiled and all(options["scope"] == "block" for options in compiled)


def test_the_multi_gpu_suite_is_torchtitan_s_table_at_two_four_and_eight_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/gpu/llm-8b-fsdp.toml (run where a machine of 8 GPUs is lent) expands as its header says."""
    from pathlib import Path

    from ampsuite.host import environment, session
    from ampsuite.plugins.techniques import fp8

    monkeypatch.setattr(environment, "gpu_count", lambda: 8)
    monkeypatch.setattr(session, "resolve_device", lambda spec_device, device: "cuda")
    plan = session.plan(Path(__file__).parent / "gpu" / "llm-8b-fsdp.toml")
    recipes = ["bf16", "bf16-compile", "bf16-compile-fp8", "bf16-compile-fp8-allgather", "bf16-compile-fp8-rowwise"]
    assert [c.id for c in plan.cells] == [f"llama3-8b/{r}/x{n}/bs2" for n in (2, 4, 8) for r in recipes]
    for one in plan.cells:
        techniques = dict(one.techniques)
        assert one.options["preset"] == "llama3-8b"
        assert techniques["fsdp2"]["param_dtype"] == "bfloat16" and techniques["fsdp2"]["reduce_dtype"] == "float32"
        assert techniques["activation-checkpointing"]["mode"] == "selective"
        assert "torch-compile" not in techniques or techniques["torch-compile"]["scope"] == "block"
        assert one.skip_reason is None or ("fp8" in techniques and fp8.torchao_missing())
    fp8_options = {c.combination: dict(c.techniques)["fp8"] for c in plan.cells if "fp8" in c.technique_names}
    assert fp8_options["bf16-compile-fp8-allgather"]["fsdp_all_gather"] is True
    assert fp8_options["bf16-compile-fp8-rowwise"]["recipe"] == "rowwise"
    assert fp8_options["bf16-compile-fp8"]["recipe"] == "tensorwise"
    assert fp8_options["bf16-compile-fp8"]["fsdp_all_gather"] is False
