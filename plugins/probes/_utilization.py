"""How busy the GPU's memory and SMs were over the timed steps, from NVML (no torch, no CUPTI).

On Hopper and newer GPUs NVML's GPU Performance Monitoring (GPM) reads the
hardware's own activity counters between two samples, taken as the timed steps
begin and end: the share of the theoretical DRAM bandwidth used, the share of
SMs busy and the share of time any Tensor Core pipe was active (the figures
DCGM calls DRAM_ACTIVE, SM_ACTIVE and TENSOR_ACTIVE). Achieved DRAM throughput
is that share of the theoretical bandwidth, NVML's memory bus width times its
highest memory clock, both edges.

GPM's counters are sampled by the driver, not per kernel: over a window much
shorter than a second they read low or zero (an 8192^3 bf16 GEMM's 30 ms of
timed steps read 0% on an H200 whose ResNet-50 steps read 46% DRAM bandwidth).
A window shorter than :data:`MIN_WINDOW_SECONDS` therefore records no shares,
only its length and why.

Elsewhere (GPM unsupported, e.g. before Hopper or where the host does not
expose it), only NVML's utilization rates are left: the share of sample periods
in which a kernel ran, and in which memory was read or written. Those say
*whether* memory was busy, not how much of its bandwidth was used, so no
throughput is derived from them and the record names its source.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["GPM_METRICS", "MIN_WINDOW_SECONDS", "GpmWindow", "dram_peak_bytes_per_s", "summarize"]

MIN_WINDOW_SECONDS = 1.0
"""Shortest timed window whose utilization is recorded (module docstring)."""

GPM_METRICS: dict[str, str] = {
    "dram_bw": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}
"""Record key -> pynvml's constant name; each a percentage (0-100) over the window."""


def dram_peak_bytes_per_s(nvml: Any, handle: Any) -> float | None:
    """Theoretical DRAM bandwidth: bus width (bits) x highest memory clock x 2 (double data rate) / 8."""
    try:
        bits = nvml.nvmlDeviceGetMemoryBusWidth(handle)
        mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, getattr(nvml, "NVML_CLOCK_MEM", 2))
    except Exception:  # NVMLError_NotSupported and friends
        return None
    if not bits or not mhz:
        return None
    return float(bits) * float(mhz) * 1e6 * 2 / 8


class GpmWindow:
    """Two GPM samples around the timed steps; :meth:`close` gives each metric of :data:`GPM_METRICS` as a share."""

    def __init__(self, nvml: Any, handle: Any, first: Any) -> None:
        self.nvml, self.handle, self.first = nvml, handle, first

    @classmethod
    def open(cls, nvml: Any, handle: Any) -> GpmWindow | None:
        """The window's first sample, or None where this device or driver has no GPM."""
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
            first = nvml.nvmlGpmSampleAlloc()
            nvml.nvmlGpmSampleGet(handle, first)
        except Exception:  # an older pynvml or driver, a virtualised GPU without GPM
            return None
        return cls(nvml, handle, first)

    def close(self) -> dict[str, float] | None:
        nvml = self.nvml
        second = None
        try:
            second = nvml.nvmlGpmSampleAlloc()
            nvml.nvmlGpmSampleGet(self.handle, second)
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            request.sample1, request.sample2 = self.first, second
            for i, constant in enumerate(GPM_METRICS.values()):
                request.metrics[i].metricId = getattr(nvml, constant)
            nvml.nvmlGpmMetricsGet(request)
            shares = {}
            for i, key in enumerate(GPM_METRICS):
                metric = request.metrics[i]
                if metric.nvmlReturn == getattr(nvml, "NVML_SUCCESS", 0):
                    shares[key] = min(1.0, max(0.0, float(metric.value) / 100.0))
            return shares or None
        except Exception:
            return None
        finally:
            for sample in (self.first, second):
                if sample is not None:
                    with contextlib.suppress(Exception):
                        nvml.nvmlGpmSampleFree(sample)


def summarize(
    gpm: dict[str, float] | None,
    rates: Sequence[tuple[float, float]],
    dram_peak: float | None,
    window_seconds: float,
) -> dict[str, Any] | None:
    """``metrics["utilization"]``: GPM's shares when there are any, else the mean NVML utilization rates.

    ``rates``: (GPU busy %, memory busy %) samples of ``nvmlDeviceGetUtilizationRates`` over the timed steps,
    which lasted ``window_seconds``.
    """
    if window_seconds < MIN_WINDOW_SECONDS:
        return {
            "source": "none",
            "window_seconds": window_seconds,
            "why": f"timed steps of {window_seconds:.2f} s, too short for NVML's counters "
            f"(at least {MIN_WINDOW_SECONDS:g} s)",
        }
    if gpm:
        out: dict[str, Any] = {"source": "nvml-gpm", "window_seconds": window_seconds, **gpm}
        if "dram_bw" in gpm and dram_peak:
            out["dram_peak_bytes_per_s"] = dram_peak
            out["dram_bytes_per_s"] = gpm["dram_bw"] * dram_peak
        return out
    if not rates:
        return None
    return {
        "source": "nvml-utilization",
        "window_seconds": window_seconds,
        "gpu_busy": statistics.fmean(g for g, _ in rates) / 100.0,
        "memory_busy": statistics.fmean(m for _, m in rates) / 100.0,
    }
