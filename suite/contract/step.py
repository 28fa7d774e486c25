"""The training step that a workload builds and that techniques transform.

A workload returns a :class:`TrainStep`: plain fields (model, optimizer, loss,
data, autocast dtype, scaler) plus two phases, ``forward_backward`` and
``update``. Techniques change fields or replace a phase; the core composes
the final callable with :meth:`TrainStep.compose` once every technique has
been applied, so the order in which techniques touch fields does not matter
except where a technique wraps a phase (that is what ``Technique.order`` is for).

Techniques change the step in place and return the same object: phases that a
workload defines (GEMM's product) read fields such as ``autocast_dtype`` from
the step they were built with, so a copy would silently lose them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Batch", "StepFn", "TrainStep", "Wrapper"]


@dataclass
class Batch:
    """One step's inputs, already on the step's device.

    ``inputs`` are passed positionally to the model; ``target`` to the loss.
    """

    inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor | None = None

    def to(self, device: torch.device, *, non_blocking: bool = False) -> Batch:
        return Batch(
            tuple(t.to(device, non_blocking=non_blocking) for t in self.inputs),
            None if self.target is None else self.target.to(device, non_blocking=non_blocking),
        )


StepFn = Callable[[Batch], "torch.Tensor"]
"""One whole training step on a batch; returns the loss (or any tensor), not synchronised."""

Wrapper = Callable[[StepFn, "TrainStep"], StepFn]
"""Wraps the composed step (CUDA graphs, compilation); applied in technique order."""


@dataclass(eq=False)
class TrainStep:
    """Everything the harness needs to run and time one training step.

    Fields a workload sets:
        device, batch_size, samples_per_step (units of work per step, in the
        workload's unit), data (returns the next on-device batch), and either
        model + optimizer + loss_fn (the standard training step is built from
        them) or its own forward_backward/update (GEMM does this).
        dataset/collate: a host-side dataset of CPU samples, when the workload
        has a data path that loading techniques can act on.
        check_output: for a workload whose loss is no training loss (GEMM's
        is one element of a product), its own correctness check.

    Fields techniques set:
        autocast_dtype, scaler, forward_backward, update, wrappers, and
        anything in ``notes`` (facts for the cell's diagnostics).
    """

    device: torch.device
    batch_size: int
    samples_per_step: int
    data: Callable[[], Batch]
    model: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    loss_fn: nn.Module | None = None
    autocast_dtype: torch.dtype | None = None
    scaler: Any | None = None
    """A ``torch.amp.GradScaler`` when loss scaling is in play."""
    forward_backward: StepFn | None = None
    """Runs forward and backward on a batch and returns the (unscaled) loss."""
    update: Callable[[], None] | None = None
    """Applies the gradients (optimizer step, scaler update) and zeroes them."""
    wrappers: list[Wrapper] = field(default_factory=list)
    dataset: Any | None = None
    """A ``torch.utils.data.Dataset`` of CPU samples, or None without a data path."""
    collate: Callable[[Any], Batch] | None = None
    """Turns a default-collated DataLoader item into a CPU :class:`Batch`."""
    memory_format: torch.memory_format | None = None
    check_output: Callable[[], dict[str, Any]] | None = None
    """``check_output() -> {"rel_error": float, "tolerance": float, "reference": str, ...}``: the step's output
    held against a higher-precision reference (JSON-serialisable values). When set, the cell's numerics verdict is
    this check's (within the tolerance: "ok") instead of its loss against the FP32 cell's."""
    notes: dict[str, Any] = field(default_factory=dict)
    """Facts for the record (e.g. ``compile_seconds``); JSON-serialisable values only."""
    blocks: str | None = None
    """Where ``model`` keeps its repeated blocks (transformer layers): the dotted attribute path of an
    ``nn.ModuleList`` or ``nn.Sequential`` (``"layers"``, ``"encoder.layers"``), or None. Techniques that act per
    block (activation-checkpointing, per-block torch-compile, fsdp2) find them through :meth:`model_blocks`."""
    model_flops_per_step: float | None = None
    """FLOPs of one training step by the workload's own formula (an LLM's 6·N + 12·L·H·Q·T per token), recorded
    as ``metrics.model_flops_per_step`` beside the flop counter's figure; None when the workload declares none."""
    eval_data: Callable[[int], Iterable[Batch]] | None = None
    """``eval_data(n)``: ``n`` batches of the held-out split on the device, the same ones at every call, spread over
    the split; None when the workload trains on no data with a held-out split (a quality run needs one)."""
    classifies: bool = False
    """Whether the model's output scores classes over its last dimension for integer targets: a quality run then
    counts accuracy (argmax against the target) beside the eval loss."""
    forward: Callable[[Batch], torch.Tensor] | None = None
    """The model's output for a batch as the training step computes it, without backward (evaluation runs it);
    set by a technique that changes how a batch reaches the model (``half-weights`` casts inputs). None: the model
    under :meth:`autocast`."""

    # -- the standard phases -------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The autocast context for the forward pass (a no-op without a dtype)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def default_forward_backward(self, batch: Batch) -> torch.Tensor:
        """Forward under autocast, loss, backward through the scaler if any."""
        if self.model is None or self.loss_fn is None:
            raise TypeError("TrainStep needs model and loss_fn, or its own forward_backward")
        with self.autocast():
            out = self.model(*batch.inputs)
            loss = self.loss_fn(out, batch.target)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss.detach()

    def predict(self, batch: Batch) -> torch.Tensor:
        """The model's output for ``batch`` (:attr:`forward`, else the model under autocast); no gradient is taken."""
        if self.forward is not None:
            return self.forward(batch)
        if self.model is None:
            raise TypeError("TrainStep.predict needs a model, or a forward")
        with self.autocast():
            return self.model(*batch.inputs)

    def default_update(self) -> None:
        """Optimizer step (through the scaler if any), then zero the gradients."""
        if self.optimizer is None:
            return
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def phases(self) -> tuple[StepFn, Callable[[], None]]:
        """The forward_backward and update phases, defaults filled in."""
        return (
            self.forward_backward or self.default_forward_backward,
            self.update or self.default_update,
        )

    def compose(self) -> StepFn:
        """The final step: both phases, then every wrapper in order."""
        forward_backward, update = self.phases()

        def step(batch: Batch) -> torch.Tensor:
            loss = forward_backward(batch)
            update()
            return loss

        fn: StepFn = step
        for wrap in self.wrappers:
            fn = wrap(fn, self)
        return fn

    def model_blocks(self) -> Any:
        """The container of the model's repeated blocks (``nn.ModuleList`` or ``nn.Sequential``) at ``blocks``.

        Looked up through the model as it is now: a whole-model ``torch.compile`` wrapper forwards attribute
        reads to the module it wraps, so the blocks are found through it too.

        :raises LookupError: the step names no blocks, or nothing non-empty of that kind is at the path.
        """
        from torch import nn

        if self.model is None or self.blocks is None:
            raise LookupError("the workload names no repeated blocks (TrainStep.blocks is None)")
        found: Any = self.model
        for part in self.blocks.split("."):
            found = getattr(found, part, None)
        if not isinstance(found, nn.ModuleList | nn.Sequential) or len(found) == 0:
            raise LookupError(
                f"TrainStep.blocks is {self.blocks!r}, but model.{self.blocks} is "
                f"{type(found).__name__}, not a non-empty nn.ModuleList or nn.Sequential"
            )
        return found

    def batches(self) -> Iterator[Batch]:
        """An endless iterator over ``data()``."""
        while True:
            yield self.data()
