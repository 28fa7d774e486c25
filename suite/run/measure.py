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
from typing import TYPE_CHECKING, Any

from ampsuite.contract.wire import StepTime

if TYPE_CHECKING:
    import torch

    from ampsuite.contract.step import Batch
    from ampsuite.spec.suitespec import MeasureSpec

__all__ = [
    "UNSTABLE_REL_IQR",
    "between_process_noise",
    "first_warm_up_chunk",
    "next_warm_up_chunk",
    "pool",
    "rates",
    "relative_noise",
    "summarize",
    "time_steps",
    "timing_warnings",
    "warm_up",
]

# A median's standard error is about 1.2533 sigma/sqrt(n) for normal data; the
# IQR/1.349 estimate of sigma keeps one slow outlier from dominating it.
_MEDIAN_SE = 1.2533
_IQR_TO_SIGMA = 1.349

UNSTABLE_REL_IQR = 0.10
"""An interquartile range above this fraction of the median makes a figure unstable (untrusted)."""


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


def summarize(samples: Sequence[float]) -> StepTime:
    """A record's ``metrics.step_time``: the samples and their statistics, in seconds.

    ``noise`` is the relative standard error of the median (what the stopping rule compares with the target);
    ``rel_iqr`` the spread, IQR/median; ``p10``/``p90``/``p99`` percentiles (p99: inference tail latency).
    """
    if not samples:
        raise ValueError("no samples to summarize")
    q1, med, q3 = _quantiles(samples, 4)
    deciles = _quantiles(samples, 10)
    percentiles = _quantiles(samples, 100)
    return StepTime(
        samples=list(samples),
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
        p99=percentiles[98],
    )


def timing_warnings(stats: StepTime, noise_target: float) -> list[str]:
    """The warnings that say a step-time figure is not to be trusted: noise above the target, a wide IQR.

    The one place for their wording: the worker writes them for one process, the
    runner rewrites them for samples pooled over several (``[measure] processes``).
    """
    warnings = []
    if stats["noise"] > noise_target:
        warnings.append(
            f"noise {stats['noise']:.2%} above the target {noise_target:.2%} after {stats['n']} steps: "
            "figure not trusted"
        )
    if stats["rel_iqr"] > UNSTABLE_REL_IQR:
        warnings.append(f"unstable: interquartile range is {stats['rel_iqr']:.0%} of the median")
    return warnings


def rates(metrics: dict[str, Any], median: float) -> None:
    """Set ``throughput`` (``samples_per_step`` / median) and, where FLOPs were counted, ``tflops``
    (``flops_per_step`` / median / 1e12) in a record's ``metrics``; ``model_tflops`` likewise from the
    workload's declared ``model_flops_per_step``.

    The one place for both: a worker's own timing, pooled processes and a
    data-parallel cell's slowest rank all derive them from their median this way.
    """
    metrics["throughput"] = metrics["samples_per_step"] / median
    if metrics.get("flops_per_step") is not None:
        metrics["tflops"] = metrics["flops_per_step"] / median / 1e12
    if metrics.get("model_flops_per_step") is not None:
        metrics["model_tflops"] = metrics["model_flops_per_step"] / median / 1e12


def between_process_noise(medians: Sequence[float], median: float) -> float:
    """Relative standard error of a median from how the per-process ``medians`` scatter around it.

    ``stdev(medians) / sqrt(len(medians)) / median``: what within-process noise
    cannot see (clocks, placement, allocator state that differ per process);
    0 with fewer than two processes, infinite when ``median`` is not positive.
    """
    if len(medians) < 2:
        return 0.0
    if median <= 0:
        return math.inf
    return statistics.stdev(medians) / math.sqrt(len(medians)) / median


def pool(runs: Sequence[Sequence[float]]) -> StepTime:
    """Statistics of the samples of several processes pooled in order.

    ``noise`` is the larger of the pooled samples' own noise and
    :func:`between_process_noise` of the processes' medians, so a figure is
    trusted only when the processes also agree with each other.
    """
    samples = [s for run in runs for s in run]
    stats = summarize(samples)
    between = between_process_noise([summarize(run)["median"] for run in runs], stats["median"])
    return StepTime(**{**stats, "noise": max(stats["noise"], between)})


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


def warm_up(run: Callable[[Batch], Any], data: Callable[[], Batch], device: torch.device, spec: MeasureSpec) -> int:
    """The untimed warm-up: ``spec.warmup_steps`` steps, then more until ``spec.warmup_seconds`` have passed since it
    began; returns how many steps ran. The device is synchronised after each chunk of steps, so the time that passes
    is the device's; a chunk is sized by the steps' observed rate to what is left (:func:`next_warm_up_chunk`), so
    the queue stays full."""
    from ampsuite.run.numerics import sync

    start, steps = time.perf_counter(), 0
    chunk = first_warm_up_chunk(spec)
    while chunk > 0:
        for _ in range(chunk):
            run(data())
        sync(device)
        steps += chunk
        chunk = next_warm_up_chunk(spec, steps, time.perf_counter() - start)
    return steps


def first_warm_up_chunk(spec: MeasureSpec) -> int:
    """The warm-up's first chunk: ``warmup_steps``, or one step to measure the rate by."""
    return spec.warmup_steps or int(spec.warmup_seconds > 0)


def next_warm_up_chunk(spec: MeasureSpec, steps: int, elapsed: float) -> int:
    """The steps of the warm-up's next chunk after ``steps`` steps in ``elapsed`` seconds; 0 once its seconds have
    passed. Sized by the observed rate to what is left, but at most doubling the steps so far: a rate measured on a
    few steps that a cache or the clocks made fast need not hold."""
    left = spec.warmup_seconds - elapsed
    if left <= 0:
        return 0
    if steps <= 0 or elapsed <= 0:
        return 1
    return max(1, min(math.ceil(left * steps / elapsed), steps))


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
