"""Gradient accumulation: one optimizer update per ``steps`` micro-batches of ``batch / steps``.

The full batch that ``data()`` returns is split along its first dimension into
``steps`` equal micro-batches; each runs forward and backward with the loss
divided by ``steps`` (the gradients accumulate in ``.grad``), and the update
phase runs once. With a GradScaler this is PyTorch's AMP recipe for
accumulation: ``scaler.scale(loss / steps).backward()`` per micro-batch,
``scaler.step`` and ``scaler.update`` once per effective batch.

How: ``loss_fn`` is wrapped to divide by ``steps``, and ``forward_backward``
calls the phase it replaces once per micro-batch, so whatever that phase does
(autocast, a GradScaler, half weights) happens per micro-batch. The step
returns the sum of the micro-batch losses, i.e. the full batch's mean loss.

What it shows: the peak memory of activations for ``batch / steps`` samples,
at the cost of ``steps`` smaller kernels. Throughput is still per sample
(``samples_per_step`` stays the full batch). For a model without batch
statistics and a mean-reduced loss over equal micro-batches the losses equal
the full batch's within float rounding; batch norm sees ``batch / steps``
samples, so ResNet's trajectory differs slightly (as in real training).

Data parallelism: every micro-batch's backward all-reduces (no ``no_sync``),
as a naive loop would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import CheckContext, Technique, hookimpl, lazy

__all__ = ["AccumulationOptions", "check"]


@dataclass(frozen=True)
class AccumulationOptions:
    steps: int = field(
        default=4, metadata={"help": "micro-batches per optimizer update (must divide the batch size)", "ge": 1}
    )


def check(ctx: CheckContext) -> str | None:
    steps = getattr(ctx.technique_options.get("grad-accumulation"), "steps", AccumulationOptions().steps)
    if ctx.batch_size % steps:
        return f"steps ({steps}) must divide the batch size ({ctx.batch_size})"
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="grad-accumulation",
            summary="one optimizer update per `steps` micro-batches of batch/steps (loss / steps; scaler once)",
            apply=lazy("ampsuite.plugins.techniques._grad_accumulation:apply"),
            options=AccumulationOptions,
            order=45,
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
