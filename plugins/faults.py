"""Fault injection: a technique that makes its cell fail in a chosen way.

Used by ampsuite's own tests and by anyone checking that a harness keeps
every other cell's record intact. Every fault fires at a chosen place: while
the technique is applied ("apply") or in the N-th call of the step ("step").
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Literal

import torch

from suite import Batch, StepFn, TrainStep, Technique, hookimpl

Fault = Literal["raise", "abort", "segfault", "exit", "hang", "oom", "nan", "cuda-assert"]


@dataclass(frozen=True)
class FaultOptions:
    kind: Fault = field(default="raise", metadata={"help": "what goes wrong"})
    at: Literal["apply", "step"] = field(default="step", metadata={"help": "when: while applying, or in a step"})
    after_steps: int = field(default=0, metadata={"help": "with at='step': healthy steps before the fault"})
    oom_limit_gb: float = field(default=64.0, metadata={"help": "with kind='oom': give up allocating past this"})

    def __post_init__(self) -> None:
        if self.after_steps < 0:
            raise ValueError(f"after_steps must be >= 0, got {self.after_steps}")


class InjectedFault(RuntimeError):
    """The error raised by kind='raise'."""


def _exhaust_memory(device: torch.device, limit_gb: float) -> None:
    hoard = []
    chunk = 256 * 2**20
    for _ in range(int(limit_gb * 2**30 // chunk) + 1):
        hoard.append(torch.ones(chunk // 4, dtype=torch.float32, device=device))
    raise InjectedFault(f"allocated {limit_gb} GiB without running out of memory")


def fire(kind: str, step: TrainStep, options: FaultOptions) -> None:
    if kind == "raise":
        raise InjectedFault("injected fault")
    if kind == "abort":
        os.abort()
    if kind == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "exit":
        os._exit(3)
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "oom":
        _exhaust_memory(step.device, options.oom_limit_gb)
    if kind == "cuda-assert":
        # An out-of-range index trips a device-side assert: a sticky error that
        # leaves the CUDA context unusable for the rest of the process.
        x = torch.zeros(4, device=step.device)
        x[torch.tensor([1 << 20], device=step.device)] = 1.0
        torch.cuda.synchronize(step.device)


def apply(step: TrainStep, options: FaultOptions) -> TrainStep:
    if options.at == "apply" and options.kind != "nan":
        fire(options.kind, step, options)
        return step
    calls = {"n": 0}

    def wrap(fn: StepFn, step: TrainStep) -> StepFn:
        def faulty(batch: Batch) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] > options.after_steps:
                if options.kind == "nan":
                    if step.model is not None:
                        with torch.no_grad():
                            next(step.model.parameters()).fill_(float("nan"))
                    return fn(batch) * float("nan")
                fire(options.kind, step, options)
            return fn(batch)

        return faulty

    step.wrappers.append(wrap)
    return step


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="inject-fault",
            summary="makes the cell fail on purpose (raise, abort, segfault, exit, hang, oom, nan, cuda-assert)",
            apply=apply,
            options=FaultOptions,
            order=99,
        )
    ]
