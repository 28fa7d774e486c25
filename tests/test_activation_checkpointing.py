"""The built-in activation-checkpointing technique: same training, recomputation in backward, less peak memory."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ampsuite import BuildContext, SkipCell, TrainStep
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.plugins.techniques import _checkpointing, checkpointing
from ampsuite.plugins.workloads import llm, transformer, vit
from ampsuite.spec.options import build_options

CPU = torch.device("cpu")
REGISTRY = load_registry(PluginSettings(autoload=False))
TINY_LLM = llm.LlmOptions(preset="tiny", layers=4)
MODES = [{"mode": "full"}, {"mode": "full", "every": 2}, {"mode": "selective"}, {"mode": "selective", "every": 3}]


def build(workload: str = "llm", options: Any = TINY_LLM, batch_size: int = 4) -> TrainStep:
    return REGISTRY.workloads[workload].build(options, BuildContext(CPU, batch_size, 0, "unused"))


def checkpointed(step: TrainStep, **values: Any) -> TrainStep:
    return _checkpointing.apply(step, build_options(checkpointing.CheckpointOptions, values))


def loss_and_grads(step: TrainStep) -> tuple[float, dict[str, torch.Tensor]]:
    forward_backward, _ = step.phases()
    loss = float(forward_backward(step.data()))
    assert step.model is not None
    # Checkpointing puts ".block" into the wrapped blocks' parameter names; the parameters are the same.
    named = step.model.named_parameters()
    return loss, {n.replace(".block.", "."): p.grad.clone() for n, p in named if p.grad is not None}


@pytest.mark.parametrize("values", MODES, ids=lambda v: "-".join(map(str, v.values())))
def test_the_same_loss_and_gradients_as_without(values: dict[str, Any]) -> None:
    plain_loss, plain_grads = loss_and_grads(build())
    loss, grads = loss_and_grads(checkpointed(build(), **values))
    assert loss == plain_loss
    assert grads.keys() == plain_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, plain_grads[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize(
    ("workload", "options", "path"),
    [
        (
            "bert",
            transformer.BertOptions(layers=2, hidden=64, heads=4, intermediate=128, seq_len=16, vocab=100),
            "layers",
        ),
        (
            "vit",
            vit.ViTOptions(image_size=32, patch_size=8, layers=2, heads=4, hidden=64, mlp=128, classes=10),
            "encoder.layers",
        ),
    ],
)
def test_the_encoders_name_their_blocks_too(workload: str, options: Any, path: str) -> None:
    plain_loss, plain_grads = loss_and_grads(build(workload, options))
    step = checkpointed(build(workload, options))
    loss, grads = loss_and_grads(step)
    assert step.notes["activation_checkpointing"]["checkpointed"] == [f"{path}.0", f"{path}.1"]
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, plain_grads[name], rtol=1e-5, atol=1e-6, msg=name)


def test_parameters_stay_the_optimizer_s_objects() -> None:
    step = build()
    assert step.model is not None and step.optimizer is not None
    before = {id(p) for p in step.model.parameters()}
    checkpointed(step)
    assert {id(p) for p in step.model.parameters()} == before
    assert {id(p) for group in step.optimizer.param_groups for p in group["params"]} == before


class CountMatmuls(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += func == torch.ops.aten.mm.default
        return func(*args, **(kwargs or {}))


def backward_matmuls(step: TrainStep) -> int:
    assert step.model is not None and step.loss_fn is not None
    batch = step.data()
    loss = step.loss_fn(step.model(*batch.inputs), batch.target)
    with CountMatmuls() as counter:
        loss.backward()
    return counter.count


def test_full_recomputes_every_matmul_of_a_block_and_selective_half() -> None:
    plain = backward_matmuls(build())
    # A block's forward runs wq, wk, wv, wo, w1, w3, w2; recomputation stops once backward has what it
    # needs, before w2, whose output backward never reads.
    recomputed = 6
    layers = TINY_LLM.shape.layers
    assert backward_matmuls(checkpointed(build(), mode="full")) == plain + layers * recomputed
    assert backward_matmuls(checkpointed(build(), mode="full", every=2)) == plain + 2 * recomputed
    # Selective keeps the outputs of wq, wv, w1 and w2 and recomputes wk, wo and w3.
    assert backward_matmuls(checkpointed(build(), mode="selective")) == plain + layers * 3


def test_notes_say_what_was_wrapped() -> None:
    step = checkpointed(build(), mode="selective", every=3)
    notes = step.notes["activation_checkpointing"]
    assert notes["checkpointed"] == ["layers.0", "layers.3"] and notes["blocks"] == 4
    assert "aten.mm.default" in notes["saved_ops"]


def test_a_workload_without_blocks_is_skipped_with_the_reason() -> None:
    step = REGISTRY.workloads["toy"].build(REGISTRY.workloads["toy"].options(), BuildContext(CPU, 4, 0, "unused"))
    with pytest.raises(SkipCell, match=r"activation-checkpointing: the workload names no repeated blocks"):
        checkpointed(step)


def test_a_workload_without_blocks_is_skipped_at_expansion(ampsuite_run: Any) -> None:
    result = ampsuite_run(
        {
            "workloads": {"gemm": {"batch_size": 1, "m": 16, "n": 16, "k": 16}},
            "combinations": {"ckpt": [checkpointing.NAME]},
        }
    )
    result.assert_status(
        "gemm/ckpt/bs1",
        "skipped",
        reason="activation-checkpointing needs a workload with trait 'blocks'; 'gemm' has none",
    )


PEAK_LLM = {"plugin": "llm", "preset": "tiny", "layers": 4, "dim": 128, "seq_len": 512, "batch_size": 8}


@pytest.mark.slow
def test_peak_memory_shows_what_checkpointing_saves_on_cpu(ampsuite_run: Any) -> None:
    result = ampsuite_run(
        {"workloads": {"llm": PEAK_LLM}, "combinations": {"fp32": [], "ckpt": [checkpointing.NAME]}}, isolated=True
    )
    result.assert_all_passed()
    plain, ckpt = result.metrics("llm/fp32/bs8"), result.metrics("llm/ckpt/bs8")
    assert plain["memory_kind"] == ckpt["memory_kind"] == "cpu-rss"
    # Four blocks' activations at 4,096 tokens of width 128 are about 100 MiB; checkpointing keeps their inputs.
    assert plain["peak_memory_bytes"] - ckpt["peak_memory_bytes"] > 40 * 2**20
