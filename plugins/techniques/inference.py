"""Inference cells: the forward pass alone, under ``torch.inference_mode``, with the model in eval mode.

``inference`` turns a training cell into an inference cell of the same
workload and batch size: the step runs ``model(*inputs)`` under
``torch.inference_mode()`` (no autograd graph, no gradients, no optimizer
step; dropout off and batch norm on its running statistics through
``model.eval()``). The precision comes from the techniques it is combined
with, as for training: nothing (FP32), ``tf32``, ``amp-fp16``/``amp-bf16``
(autocast; their GradScaler is dropped, there is nothing to scale) or
``half-weights`` (the model itself in half; its FP32 masters are dropped).
``channels-last``, ``torch-compile`` and ``cuda-graphs`` (whole-step capture)
wrap it as they wrap a training step; ``int8`` and ``tensorrt`` require it.

What the step returns: by default (``loss = true``) the workload's loss on the
output, so that the numerics of an FP16 or INT8 cell are compared with the
FP32 inference cell like any cell's; ``loss = false`` returns the output
itself and times the forward alone (the numerics then compare output means).

The record says it is an inference cell: ``notes.inference`` (with
``technique = "inference"``). The analysis groups inference cells apart from
training cells, so an inference cell's speedups are against the FP32
*inference* cell (the one whose only technique is ``inference``), and the
report's best-per-workload lists inference separately. Latency percentiles
per batch size are the step-time percentiles of the record
(``metrics.step_time``: p10, median, p90, p99); throughput is per sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import CheckContext, Technique, TrainStep, hookimpl, lazy

__all__ = ["InferenceOptions", "check", "is_inference"]

TRAINING_ONLY = {
    "fused-optimizer": "there is no optimizer step",
    "grad-accumulation": "there are no gradients to accumulate",
}


@dataclass(frozen=True)
class InferenceOptions:
    loss: bool = field(
        default=True,
        metadata={"help": "return the loss on the output (numerics vs FP32 inference); false: the forward alone"},
    )


def is_inference(step: TrainStep) -> bool:
    return bool(step.notes.get("inference"))


def check(ctx: CheckContext) -> str | None:
    for name, why in TRAINING_ONLY.items():
        if name in ctx.techniques:
            return f"{name} is a training technique: in inference {why}"
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="inference",
            summary="the forward pass alone under torch.inference_mode, eval mode; precision from the combination",
            apply=lazy("ampsuite.plugins.techniques._inference:apply"),
            options=InferenceOptions,
            order=60,
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
