"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.cuda_graphs` (imported on first use)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch

from ampsuite import Batch, CaptureFailed, CheckContext, SkipCell, TrainStep
from ampsuite.plugins.techniques.cuda_graphs import CUDAGRAPH_COMPILE_MODES, GraphOptions


class _Snapshot:
    """What warm-up changes, saved before it and put back in place after capture."""

    def __init__(self, step: TrainStep) -> None:
        self.step = step
        seen: dict[int, torch.Tensor] = {}
        if step.model is not None:
            for t in (*step.model.parameters(), *step.model.buffers()):
                seen.setdefault(id(t), t)
        if step.optimizer is not None:
            for group in step.optimizer.param_groups:
                for p in group["params"]:
                    seen.setdefault(id(p), p)
        self.tensors = list(seen.values())
        self.saved = [t.detach().clone() for t in self.tensors]
        self.scaler_state = step.scaler.state_dict() if step.scaler is not None else None
        self.rng = torch.cuda.get_rng_state(step.device)

    def restore_rng(self) -> None:
        torch.cuda.set_rng_state(self.rng, self.step.device)

    def restore(self) -> None:
        with torch.no_grad():
            for t, saved in zip(self.tensors, self.saved, strict=True):
                t.copy_(saved)
        if self.step.optimizer is not None:
            for state in self.step.optimizer.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
                    elif isinstance(value, int | float) and not isinstance(value, bool):
                        state[key] = type(value)(0)
        if self.step.scaler is not None and self.scaler_state is not None:
            self.step.scaler.load_state_dict(self.scaler_state)  # fills the scale tensors in place
        self.saved = []


class GraphedStep:
    """The composed step, captured on its first call and replayed afterwards."""

    def __init__(self, fn: Callable[[Batch], torch.Tensor], step: TrainStep, warmup_iters: int) -> None:
        self.step = step
        self.warmup_iters = warmup_iters
        self.partial = needs_eager_update(step)
        forward_backward, update = step.phases()
        self.captured: Callable[[Batch], torch.Tensor] = forward_backward if self.partial else fn
        self.custom_update = step.update is not None
        self.update = update
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_batch: Batch | None = None
        self.static_loss: torch.Tensor | None = None
        self.static_grads: list[tuple[torch.Tensor, torch.Tensor]] = []

    # -- replay ----------------------------------------------------------------

    def __call__(self, batch: Batch) -> torch.Tensor:
        if self.graph is None:
            self._capture(batch)
        assert self.graph is not None and self.static_loss is not None
        self._load(batch)
        self.graph.replay()
        if self.partial:
            self._eager_update()
        return self.static_loss

    def _load(self, batch: Batch) -> None:
        static = self.static_batch
        assert static is not None
        if batch is static:
            return
        pairs = list(zip(static.inputs, batch.inputs, strict=True))
        if static.target is not None and batch.target is not None:
            pairs.append((static.target, batch.target))
        for dst, src in pairs:
            if dst.shape != src.shape:
                raise ValueError(
                    f"cuda-graphs: batch shape changed from {tuple(dst.shape)} to {tuple(src.shape)}; "
                    "a captured graph needs static shapes"
                )
            dst.copy_(src, non_blocking=True)

    def _eager_update(self) -> None:
        # The replay wrote the static grads; re-attach any that eager code (a custom
        # update, a probe's eager backward followed by zero_grad) has dropped or replaced.
        for p, grad in self.static_grads:
            if p.grad is not grad:
                p.grad = grad
        scaler, optimizer = self.step.scaler, self.step.optimizer
        if self.custom_update:
            self.update()
        elif optimizer is not None and scaler is not None:
            # The default update without zero_grad: the next replay overwrites the grads.
            scaler.step(optimizer)
            scaler.update()

    # -- capture ---------------------------------------------------------------

    def _capture(self, batch: Batch) -> None:
        step, device = self.step, self.step.device
        t0 = time.perf_counter()
        try:
            self.static_batch = Batch(
                tuple(t.clone() for t in batch.inputs), None if batch.target is None else batch.target.clone()
            )
            if not self.partial and step.optimizer is not None:
                for group in step.optimizer.param_groups:
                    if "capturable" in group:
                        group["capturable"] = True
            snapshot = _Snapshot(step)
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side), warnings.catch_warnings():
                # capturable optimizers warn when they step outside a capture: expected here.
                warnings.filterwarnings("ignore", message=".*capturable=True.*")
                for _ in range(self.warmup_iters):
                    self.captured(self.static_batch)
                    if self.partial:
                        self.update()
            torch.cuda.current_stream(device).wait_stream(side)
            snapshot.restore_rng()
            self._drop_grads()
            graph = torch.cuda.CUDAGraph()
            # thread_local: a DataLoader's pin-memory thread may call CUDA while we capture.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.static_loss = self.captured(self.static_batch)
            snapshot.restore()
            if self.partial:
                self.static_grads = [(p, p.grad) for p in snapshot.tensors if p.grad is not None]
            torch.cuda.synchronize(device)
        except Exception as exc:
            raise CaptureFailed(f"capture failed: {type(exc).__name__}: {exc}") from exc
        self.graph = graph
        step.notes.setdefault("cuda_graphs", {})["capture_seconds"] = time.perf_counter() - t0

    def _drop_grads(self) -> None:
        # Grads set to None before capture are allocated inside the graph's pool
        # and overwritten by every replay (the pattern of the PyTorch docs).
        if self.step.optimizer is not None:
            self.step.optimizer.zero_grad(set_to_none=True)
        if self.step.model is not None:
            for p in self.step.model.parameters():
                p.grad = None


def needs_eager_update(step: TrainStep) -> bool:
    """Whether the update must run outside the graph: a GradScaler whose optimizer does not take its inf check.

    An optimizer with ``_step_supports_amp_scaling`` (the fused ones) receives the scale and the inf
    check as device tensors and skips an overflowing step in its kernel, and ``GradScaler.update``
    moves the scale on the device: the whole step, scaler included, can then be captured.
    """
    if step.scaler is None:
        return False
    return not (step.update is None and getattr(step.optimizer, "_step_supports_amp_scaling", False))


def check(ctx: CheckContext) -> str | None:
    if "dynamic-shapes" in ctx.workload.traits:
        return f"a captured graph needs static shapes; workload {ctx.workload.name!r} has dynamic shapes"
    return None


def apply(step: TrainStep, options: GraphOptions) -> TrainStep:
    if step.device.type != "cuda":
        raise SkipCell(f"cuda-graphs needs a CUDA device; this step runs on {step.device.type}")
    mode = step.notes.get("torch_compile", {}).get("mode")
    if mode in CUDAGRAPH_COMPILE_MODES:
        raise SkipCell(
            f"cuda-graphs conflicts with torch-compile mode {mode!r}, which already captures CUDA graphs "
            "(cudagraph trees); use one or the other, or a compile mode without cudagraphs"
        )
    partial = needs_eager_update(step)
    if partial and step.wrappers:
        raise SkipCell(
            "cuda-graphs with a GradScaler captures forward and backward alone and would bypass "
            f"{len(step.wrappers)} step wrapper(s) of earlier techniques"
        )
    step.notes["cuda_graphs"] = {
        "capture": "forward-backward" if partial else "whole-step",
        "warmup_iters": options.warmup_iters,
    }

    def wrap(fn: Callable[[Batch], torch.Tensor], st: TrainStep) -> Callable[[Batch], torch.Tensor]:
        return GraphedStep(fn, st, options.warmup_iters)

    step.wrappers.append(wrap)
    return step
