"""The torch-dependent part of :mod:`ampsuite.plugins.faults` (imported when a cell builds or applies it)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ampsuite import Batch, SkipCell, StepFn, TrainStep
from ampsuite.plugins.faults import (
    BAD_ADDRESS,
    CORRUPTION,
    LEAK_FIRST_BYTES,
    OOM_CHUNK_BYTES,
    OVERFLOW_FACTOR,
    FaultOptions,
    InjectedFault,
    KindOptions,
)
from ampsuite.plugins.techniques._loss import MappedLoss


def _exhaust_memory(device: torch.device, limit_gb: float) -> None:
    hoard = []
    for _ in range(int(limit_gb * 2**30 // OOM_CHUNK_BYTES) + 1):
        # Untouched: a CPU cell's cap is on address space (and a GPU's allocation is real either way), so writing
        # gigabytes of pages would only cost seconds of a loaded machine's time before the same failure.
        hoard.append(torch.empty(OOM_CHUNK_BYTES // 4, dtype=torch.float32, device=device))
    raise InjectedFault(f"allocated {limit_gb} GiB without running out of memory")


class _Leak:
    """Memory kept forever, more in each step: what a step that holds on to its tensors does."""

    def __init__(self, device: torch.device, limit_gb: float) -> None:
        self.device = device
        self.limit = int(limit_gb * 2**30)
        self.kept: list[torch.Tensor] = []
        self.total = 0
        self.next = LEAK_FIRST_BYTES

    def grow(self) -> None:
        if self.total + self.next > self.limit:
            raise InjectedFault(f"leaked {self.total / 2**30:.2f} GiB without running out of memory")
        self.kept.append(torch.empty(self.next, dtype=torch.uint8, device=self.device))
        self.total += self.next
        self.next *= 2


def _read_bad_address(device: torch.device) -> None:
    # A tensor over memory nobody allocated; reading it runs a kernel on an
    # unmapped address: a sticky "illegal memory access" on CUDA, SIGSEGV on a CPU.
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # storages need the explicit index
    storage = torch._C._construct_storage_from_data_pointer(BAD_ADDRESS, device, 4096)
    bad = torch.empty(0, dtype=torch.float32, device=device).set_(storage, 0, (1024,), (1,))
    float(bad.sum())
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _launch_forever(device: torch.device) -> None:
    # The host never blocks for long: the stack a timeout dumps must show this loop,
    # not a wait inside the driver.
    x = torch.ones(1024, device=device)
    while True:
        for _ in range(1000):
            x = x * 1.0000001
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def fire(kind: str, step: TrainStep, options: FaultOptions | KindOptions) -> None:
    """Make the fault happen now (the kinds that are not tied to a phase of the step)."""
    if kind == "raise":
        raise InjectedFault("injected fault")
    if kind == "abort":
        os.abort()
    if kind == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "exit":
        os._exit(3)
    if kind == "kill-launcher":
        # A rank's parent is its launcher; without RANK this is the worker, whose parent (the fork server) is spared.
        os.kill(os.getppid() if "RANK" in os.environ else os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the rank itself dies with its launcher (PR_SET_PDEATHSIG)
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "delay":
        time.sleep(options.seconds)
    if kind == "launch-hang":
        _launch_forever(step.device)
    if kind == "oom":
        _exhaust_memory(step.device, options.oom_limit_gb)
    if kind == "corrupt":
        step.notes["injected_corruption"] = dict(CORRUPTION)
    if kind == "cuda-assert":
        # An out-of-range index trips a device-side assert: a sticky error that
        # leaves the CUDA context unusable for the rest of the process.
        x = torch.zeros(4, device=step.device)
        x[torch.tensor([1 << 20], device=step.device)] = 1.0
        if step.device.type == "cuda":
            torch.cuda.synchronize(step.device)
    if kind == "illegal-address":
        _read_bad_address(step.device)


class _Overflow(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient past float16's (and float32's) range."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * OVERFLOW_FACTOR


def overflowing(loss_fn: nn.Module, fires: Callable[[], bool]) -> nn.Module:
    """The workload's loss, whose gradient overflows once ``fires()`` says so; the value is unchanged."""
    return MappedLoss(loss_fn, lambda loss: _Overflow.apply(loss) if fires() else loss)


def _this_rank() -> int:
    """This process's rank in a data-parallel cell (the launcher's ``RANK``); 0 in a single-process cell."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def apply(step: TrainStep, options: FaultOptions | KindOptions) -> TrainStep:
    kind = options.kind
    rank = getattr(options, "rank", -1)
    if rank >= 0 and rank != _this_rank():
        return step  # another rank's fault
    if kind == "graph-capture" and step.device.type != "cuda":
        raise SkipCell(f"fault graph-capture needs a CUDA device; this step runs on {step.device.type}")
    if kind == "scale-collapse" and (step.scaler is None or step.loss_fn is None):
        raise SkipCell("fault scale-collapse needs a GradScaler (amp-fp16) and a workload with a loss_fn")
    if options.at == "apply":
        fire(kind, step, options)
        return step
    calls = {"n": 0}

    def fires() -> bool:
        calls["n"] += 1
        return calls["n"] > options.after_steps

    if kind == "scale-collapse":
        assert step.loss_fn is not None
        step.loss_fn = overflowing(step.loss_fn, fires)
        return step
    if kind == "graph-capture":
        inner, _ = step.phases()

        def synced(batch: Batch) -> torch.Tensor:
            loss = inner(batch)
            if fires():
                float(loss)  # a host sync: fine eagerly, refused while a CUDA graph is being captured
            return loss

        step.forward_backward = synced
        return step
    leak = _Leak(step.device, options.oom_limit_gb) if kind == "leak" else None
    slept = {"done": False}  # delay: once

    def wrap(fn: StepFn, step: TrainStep) -> StepFn:
        def faulty(batch: Batch) -> torch.Tensor:
            if not fires():
                return fn(batch)
            if kind == "nan":
                if step.model is not None:
                    with torch.no_grad():
                        next(step.model.parameters()).fill_(float("nan"))
                return fn(batch) * float("nan")
            if leak is not None:
                leak.grow()
                return fn(batch)
            if kind == "delay":
                if not slept["done"]:
                    slept["done"] = True
                    fire(kind, step, options)
                return fn(batch)
            fire(kind, step, options)
            return fn(batch)

        return faulty

    step.wrappers.append(wrap)
    return step
