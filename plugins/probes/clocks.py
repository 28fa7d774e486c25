"""GPU clocks, power, temperature and utilization during the timed steps (NVML, through nvidia-ml-py).

A GPU that heats up or reaches a power limit lowers its clocks in the middle of
a measurement, and the step time then says more about the cooling than about
the technique. A background thread samples the SM and memory clocks, the
board power, the temperature and NVML's clock event ("throttle") reasons every
``SAMPLE_SECONDS`` while the timed steps run; the record gets a summary in
``metrics["clocks"]``, and a warning containing "throttled" (which the analysis
counts as "not trusted") when

* the SM clock fell more than ``CLOCK_DROP`` below the larger of its first
  sample and its median, or
* a thermal, hardware-slowdown or power-brake reason appeared.

Power is NVML's instantaneous board power where the driver reports it
(``NVML_FI_DEV_POWER_INSTANT``): ``nvmlDeviceGetPowerUsage`` is, on Ampere and
newer, the average of the last second, which over a timed window of a fraction
of a second reads the idle moments before it (an H100's TF32 GEMM cell at its
power cap read 223 W). ``metrics["clocks"]["power_reading"]`` says which one
was read: ``instant`` or ``average``. A window shorter than ``SAMPLE_SECONDS``
is sampled only at its two ends, where the host has just synchronised with the
GPU: its power reads low even so (163 W for an H100's 28-ms fp16 GEMM window).

The software power cap is not flagged, even when it lowers the clocks: a busy
H100/H200 sits at its power cap, and the clocks it trades for power are the
speed the GPU sustains, not a disturbed measurement. On an H200 at ~690 of
700 W, compiled BERT-base and ViT-B/16 steps swung between 1,545 and 1,830 MHz
while repeated measurements of one recipe agreed within 0.5% (4,332 and 4,324
seq/s; 3,313, 3,326 and 3,297 img/s). Such a drop gets a "power-capped" note
instead, which the analysis does not count against the cell; a drop without the
power cap among the reasons, or with a flagged reason, is "throttled".

The same window gives ``metrics["utilization"]`` (plugins/probes/_utilization.py):
on Hopper and newer, NVML's GPU Performance Monitoring counters for the share of
the DRAM bandwidth used (and the achieved DRAM throughput it implies), SMs busy
and Tensor Cores active; elsewhere NVML's coarser utilization rates, named as
such.

NVML calls are host-side driver queries: they do not synchronise the GPU or
enter its stream. On a CPU, without nvidia-ml-py or without a working NVML,
the probe does nothing and records nothing. pynvml is imported when a cell
starts, never at import time, so the fork server that preloads this module
holds no NVML state.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from ampsuite import Probe, ProbeContext, hookimpl
from ampsuite.plugins.probes import _utilization

__all__ = ["CLOCK_DROP", "FLAGGED_REASONS", "REASONS", "SAMPLE_SECONDS", "around", "summarize"]

SAMPLE_SECONDS = 0.05
CLOCK_DROP = 0.10

REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML's clock event reason bits (nvml.h ``nvmlClocksEventReason*``; the values are part of its ABI)."""
POWER_CAP = "sw_power_cap"
FLAGGED_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})

Sample = dict[str, Any]

_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
"""NVML's ``nvmlValueType_t`` -> the member of ``nvmlValue_t`` that holds a field value of that type (ABI values)."""


def _reason_names(mask: int) -> list[str]:
    return [REASONS.get(1 << bit, f"0x{1 << bit:x}") for bit in range(mask.bit_length()) if mask >> bit & 1]


class _Sampler:
    """Reads one device's clocks; each quantity that NVML does not support on this device stays None."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ampsuite-clocks", daemon=True)
        self._reasons = self._reasons_function()
        self._power, self.power_reading = self._power_function()

    def _reasons_function(self) -> Any:
        # Drivers before 535 have only the older name; newer pynvml may drop it.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.nvml, name, None)
            if fn is not None and self._read(fn) is not None:
                return fn
        return None

    def _power_function(self) -> tuple[Any, str]:
        fields = getattr(self.nvml, "nvmlDeviceGetFieldValues", None)
        field = getattr(self.nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if fields is not None and field is not None:

            def instant(handle: Any) -> float:
                value = fields(handle, [field])[0]
                if value.nvmlReturn != 0:
                    raise RuntimeError(f"NVML_FI_DEV_POWER_INSTANT: NVML return {value.nvmlReturn}")
                kind = int(value.valueType)
                if kind not in _VALUE_FIELDS:
                    raise RuntimeError(f"NVML_FI_DEV_POWER_INSTANT: value type {kind}")
                return float(getattr(value.value, _VALUE_FIELDS[kind]))

            if self._read(instant) is not None:
                return instant, "instant"
        return self.nvml.nvmlDeviceGetPowerUsage, "average"

    def _read(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(self.handle, *args)
        except Exception:  # NVMLError_NotSupported and friends: that quantity is unknown here
            return None

    def sample(self) -> None:
        nvml = self.nvml
        power = self._read(self._power)
        self.samples.append(
            {
                "sm_mhz": self._read(nvml.nvmlDeviceGetClockInfo, getattr(nvml, "NVML_CLOCK_SM", 1)),
                "mem_mhz": self._read(nvml.nvmlDeviceGetClockInfo, getattr(nvml, "NVML_CLOCK_MEM", 2)),
                "power_w": None if power is None else power / 1000.0,
                "temp_c": self._read(nvml.nvmlDeviceGetTemperature, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
                "reasons": None if self._reasons is None else self._read(self._reasons),
                "util": self._utilization(),
            }
        )

    def _utilization(self) -> tuple[float, float] | None:
        read = getattr(self.nvml, "nvmlDeviceGetUtilizationRates", None)
        rates = None if read is None else self._read(read)
        return None if rates is None else (float(rates.gpu), float(rates.memory))

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _series(samples: list[Sample], key: str) -> list[float]:
    return [float(s[key]) for s in samples if s.get(key) is not None]


def _stats(values: list[float], *names: str) -> dict[str, float] | None:
    if not values:
        return None
    pick = {
        "start": values[0],
        "end": values[-1],
        "min": min(values),
        "max": max(values),
        "median": statistics.median(values),
    }
    return {name: pick[name] for name in names}


def summarize(samples: list[Sample], power_reading: str = "instant") -> tuple[dict[str, Any], list[str]]:
    """The ``metrics["clocks"]`` summary of a list of samples, and the warnings it calls for; ``power_reading``:
    whether their power is NVML's ``instant`` reading or its 1-second ``average``."""
    sm, power = _series(samples, "sm_mhz"), _series(samples, "power_w")
    seen = 0
    for s in samples:
        if s.get("reasons") is not None:
            seen |= int(s["reasons"])
    reasons = _reason_names(seen)
    summary = {
        "samples": len(samples),
        "interval_seconds": SAMPLE_SECONDS,
        "sm_mhz": _stats(sm, "start", "min", "median", "end"),
        "mem_mhz": _stats(_series(samples, "mem_mhz"), "start", "min", "median", "end"),
        "power_w": _stats(power, "start", "median", "max", "end"),
        "power_reading": power_reading if power else None,
        "temp_c": _stats(_series(samples, "temp_c"), "start", "max", "end"),
        "throttle_reasons": reasons,
    }
    warnings = []
    flagged = [r for r in reasons if r in FLAGGED_REASONS]
    if sm:
        reference = max(sm[0], statistics.median(sm))
        if reference > 0 and min(sm) < (1 - CLOCK_DROP) * reference:
            fell = f"the SM clock fell to {min(sm):.0f} MHz, {1 - min(sm) / reference:.0%} below {reference:.0f} MHz"
            if POWER_CAP in reasons and not flagged:
                # The sustained speed at the power limit (module docstring): noted in words the analysis's
                # instability rule does not match.
                watts = f" at up to {max(power):.0f} W" if power else ""
                average = "; power: NVML's 1-second average" if power and power_reading == "average" else ""
                median = f" (median {statistics.median(sm):.0f} MHz)"
                warnings.append(f"power-capped: {fell}{median}{watts} (sw_power_cap{average}) during the timed steps")
            else:
                warnings.append(f"clocks throttled: {fell}, during the timed steps")
    if flagged:
        warnings.append(f"clocks throttled: {', '.join(flagged)} during the timed steps")
    return summary, warnings


def _handle(nvml: Any, device: torch.device) -> Any:
    import torch  # here, not at the top: registering the probe must not import torch

    index = device.index
    if torch.cuda.is_available():
        index = torch.cuda.current_device() if index is None else index
        # CUDA_VISIBLE_DEVICES renumbers devices for CUDA, not for NVML: match by UUID.
        with contextlib.suppress(Exception):
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    return nvml.nvmlDeviceGetHandleByIndex(index or 0)


@contextlib.contextmanager
def around(ctx: ProbeContext) -> Iterator[None]:
    device = ctx.step.device
    if device.type != "cuda":
        yield
        return
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, no driver library, no permission: nothing to record
        yield
        return
    try:
        handle = _handle(nvml, device)
        sampler = _Sampler(nvml, handle)
        window = _utilization.GpmWindow.open(nvml, handle)
        started = time.monotonic()
        sampler.start()
    except Exception:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
        yield
        return
    try:
        yield
    finally:
        sampler.stop()
        seconds = time.monotonic() - started
        gpm = window.close() if window is not None else None
        dram_peak = _utilization.dram_peak_bytes_per_s(nvml, handle)
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    summary, warnings = summarize(sampler.samples, sampler.power_reading)
    ctx.metrics["clocks"] = summary
    rates = [s["util"] for s in sampler.samples if s.get("util") is not None]
    utilization = _utilization.summarize(gpm, rates, dram_peak, seconds)
    if utilization is not None:
        ctx.metrics["utilization"] = utilization
    for w in warnings:
        ctx.warn(w)


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="clocks",
            summary="GPU clocks, power, temperature, throttle reasons and utilization (DRAM bandwidth, SM and "
            "Tensor Core activity) over the timed steps (NVML)",
            around=around,
            order=95,
        )
    ]
