"""Timing a step: warm-up, timed steps with a stopping rule, and robust statistics.

On CUDA one event pair brackets each step and the host synchronises once per
chunk of steps, outside the bracketed region, so the figures carry no host
synchronisation that a plain training loop would not have. On the CPU a
monotonic clock brackets each step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from suite.step import Batch
    from suite.suitefile import MeasureSpec

__all__ = ["StepStats", "relative_noise", "summarize", "time_steps"]

# A median's standard error is about 1.2533 sigma/sqrt(n) for normal data; the
# IQR/1.349 estimate of sigma keeps one slow outlier from dominating it.
_MEDIAN_SE = 1.2533
_IQR_TO_SIGMA = 1.349


@dataclass(frozen=True)
class StepStats:
    """Statistics of the timed step durations, in seconds.

    ``noise`` is the relative standard error of the median (what the stopping
    rule compares with the target); ``rel_iqr`` the spread, IQR/median.
    """

    n: int
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float
    iqr: float
    rel_iqr: float
    noise: float

    def as_dict(self, samples: Sequence[float]) -> dict[str, Any]:
        return {**asdict(self), "samples": list(samples)}


def _quantiles(samples: Sequence[float], n: int) -> list[float]:
    if len(samples) == 1:
        return [samples[0]] * (n - 1)
    return statistics.quantiles(samples, n=n, method="inclusive")


def relative_noise(samples: Sequence[float]) -> float:
    """Relative standard error of the median; infinite with fewer than 3 samples."""
    if len(samples) < 3:
        return math.inf
    q1, med, q3 = _quantiles(samples, 4)
    if med <= 0:
        return math.inf
    return _MEDIAN_SE * ((q3 - q1) / _IQR_TO_SIGMA) / math.sqrt(len(samples)) / med


def summarize(samples: Sequence[float]) -> StepStats:
    if not samples:
        raise ValueError("no samples to summarize")
    q1, med, q3 = _quantiles(samples, 4)
    deciles = _quantiles(samples, 10)
    return StepStats(
        n=len(samples),
        median=med,
        mean=statistics.fmean(samples),
        min=min(samples),
        max=max(samples),
        p10=deciles[0],
        p90=deciles[-1],
        iqr=q3 - q1,
        rel_iqr=(q3 - q1) / med if med > 0 else math.inf,
        noise=relative_noise(samples),
    )


def _should_stop(samples: Sequence[float], spec: MeasureSpec, elapsed: float) -> bool:
    n = len(samples)
    if n >= spec.max_steps or (n >= 3 and elapsed >= spec.max_seconds):
        return True
    return n >= spec.min_steps and relative_noise(samples) <= spec.noise_target


def _next_chunk(done: int, spec: MeasureSpec, elapsed: float) -> int:
    if done == 0:
        return spec.min_steps
    # Grow chunks geometrically (fewer synchronisations) but never past the
    # step budget or, by the steps' observed rate, the time budget.
    per_step = elapsed / done if done else 0.0
    by_time = int((spec.max_seconds - elapsed) / per_step) + 1 if per_step > 0 else spec.max_steps
    return max(1, min(max(done // 2, 5), spec.max_steps - done, by_time))


def time_steps(
    run: Callable[[Batch], Any],
    data: Callable[[], Batch],
    device: torch.device,
    spec: MeasureSpec,
) -> list[float]:
    """Time steps of ``run`` until the stopping rule says enough; returns seconds per step."""
    import torch

    samples: list[float] = []
    start = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        while True:
            k = _next_chunk(len(samples), spec, time.perf_counter() - start)
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(k)]
            for begin, end in events:
                begin.record()
                run(data())
                end.record()
            events[-1][1].synchronize()
            samples.extend(b.elapsed_time(e) / 1e3 for b, e in events)
            if _should_stop(samples, spec, time.perf_counter() - start):
                return samples
    clock = time.perf_counter
    while True:
        k = _next_chunk(len(samples), spec, clock() - start)
        for _ in range(k):
            t0 = clock()
            run(data())
            samples.append(clock() - t0)
        if _should_stop(samples, spec, clock() - start):
            return samples
