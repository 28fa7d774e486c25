"""The clocks probe, against a scripted stand-in for pynvml (no GPU needed).

The fake module is put into ``sys.modules`` for one test; ``around`` imports
pynvml when a cell starts, so it picks the fake up. The step's device is
``cuda:0`` only as a label: nothing runs on it.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import torch

from ampsuite import ProbeContext, analysis
from ampsuite.analysis import instability_warnings, power_cap_note
from ampsuite.plugins.probes import clocks


class FakeNVMLError(Exception):
    pass


class FakeNVML(types.ModuleType):
    """pynvml as the probe uses it: SM clocks follow a script (the last value repeats)."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVMLError = FakeNVMLError

    def __init__(self, sm: list[int], reasons: int = 0, power_mw: int | None = 500_000, init_fails: bool = False):
        super().__init__("pynvml")
        self.sm = list(sm)
        self.reasons = reasons
        self.power_mw = power_mw
        self.init_fails = init_fails
        self.calls: list[str] = []
        self.sm_reads = 0

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_fails:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.calls.append(f"handle {index}")
        return f"gpu{index}"

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        if kind == self.NVML_CLOCK_MEM:
            return 3201
        value = self.sm[min(self.sm_reads, len(self.sm) - 1)]
        self.sm_reads += 1
        return value

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        if self.power_mw is None:
            raise FakeNVMLError("Not Supported")
        return self.power_mw

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return self.reasons


@pytest.fixture
def use_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(fake: Any) -> Any:
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    yield install


def _ctx(device: str = "cuda:0") -> ProbeContext:
    step = types.SimpleNamespace(device=torch.device(device))
    return ProbeContext(step=step, run=lambda batch: None, cell={"id": "x/fp32/bs8"})  # type: ignore[arg-type]


def _measure(ctx: ProbeContext, seconds: float = 0.0) -> ProbeContext:
    with clocks.around(ctx):
        time.sleep(seconds)
    return ctx


def test_steady_clocks_are_summarised_without_warnings(use_nvml) -> None:
    fake = use_nvml(FakeNVML(sm=[1980]))
    ctx = _measure(_ctx())
    c = ctx.metrics["clocks"]
    assert c["sm_mhz"] == {"start": 1980.0, "min": 1980.0, "median": 1980.0, "end": 1980.0}
    assert c["mem_mhz"]["median"] == 3201.0
    assert c["power_w"] == {"start": 500.0, "median": 500.0, "max": 500.0, "end": 500.0}
    assert c["temp_c"] == {"start": 61.0, "max": 61.0, "end": 61.0}
    assert c["throttle_reasons"] == []
    assert c["samples"] >= 2  # one when the timed steps start, one when they end
    assert ctx.warnings == []
    assert fake.calls == ["init", "handle 0", "shutdown"]


def test_a_falling_sm_clock_flags_the_cell(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1980, 1600]))
    ctx = _measure(_ctx())
    assert ctx.metrics["clocks"]["sm_mhz"]["start"] == 1980.0
    assert ctx.metrics["clocks"]["sm_mhz"]["min"] == 1600.0
    assert ctx.warnings == [
        "clocks throttled: the SM clock fell to 1600 MHz, 19% below 1980 MHz, during the timed steps"
    ]
    assert instability_warnings({"warnings": ctx.warnings}) == ctx.warnings  # the analysis counts it as untrusted


def test_a_small_dip_is_not_throttling(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1980, 1900]))
    assert _measure(_ctx()).warnings == []


def test_a_thermal_reason_flags_the_cell(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1980], reasons=0x20 | 0x1))
    ctx = _measure(_ctx())
    assert ctx.metrics["clocks"]["throttle_reasons"] == ["gpu_idle", "sw_thermal_slowdown"]
    assert ctx.warnings == ["clocks throttled: sw_thermal_slowdown during the timed steps"]


def test_the_power_cap_alone_is_recorded_not_flagged(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1980], reasons=0x4))
    ctx = _measure(_ctx())
    assert ctx.metrics["clocks"]["throttle_reasons"] == ["sw_power_cap"]
    assert ctx.warnings == []


def test_clocks_lowered_by_the_power_cap_are_noted_not_flagged(use_nvml) -> None:
    # An H200 at its 700 W cap running compiled ViT-B/16: 1,830 MHz, dips to 1,545.
    use_nvml(FakeNVML(sm=[1830, 1830, 1545, 1830], reasons=0x4))
    ctx = _measure(_ctx(), 0.2)
    assert ctx.warnings == [
        "power-capped: the SM clock fell to 1545 MHz, 16% below 1830 MHz (median 1830 MHz) at up to 500 W "
        "(sw_power_cap; power: NVML's 1-second average) during the timed steps"
    ]
    assert instability_warnings({"warnings": ctx.warnings}) == []  # the analysis keeps trusting the cell
    assert power_cap_note({"warnings": ctx.warnings, "metrics": ctx.metrics}) == (
        "SM clock lowered with NVML's software power cap (sw_power_cap) as the reason: median 1,830 MHz, "
        "lowest 1,545 MHz, up to 500 W (NVML's 1-second average) over the timed steps; trusted: the clocks probe "
        "counts a slowdown at the power cap as the speed the GPU sustains"
    )


class InstantPowerNVML(FakeNVML):
    """A driver with NVML's field values: the instantaneous board power (690 W at the cap) beside the 1-second
    average that ``nvmlDeviceGetPowerUsage`` gives (223 W: the window began idle)."""

    NVML_FI_DEV_POWER_INSTANT = 186

    def __init__(self, *args: Any, instant_return: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.instant_return = instant_return
        self.power_mw = 223_000

    def nvmlDeviceGetFieldValues(self, handle: str, fields: list[int]) -> list[Any]:
        assert fields == [self.NVML_FI_DEV_POWER_INSTANT]
        value = types.SimpleNamespace(uiVal=690_000, dVal=0.0)
        return [types.SimpleNamespace(nvmlReturn=self.instant_return, valueType=1, value=value)]


def test_the_power_of_a_power_capped_window_is_the_instant_reading_where_nvml_has_it(use_nvml) -> None:
    use_nvml(InstantPowerNVML(sm=[1980, 1980, 1620, 1980], reasons=0x4))
    ctx = _measure(_ctx(), 0.2)
    assert ctx.metrics["clocks"]["power_reading"] == "instant"
    assert ctx.metrics["clocks"]["power_w"]["max"] == 690.0
    assert ctx.warnings == [
        "power-capped: the SM clock fell to 1620 MHz, 18% below 1980 MHz (median 1980 MHz) at up to 690 W "
        "(sw_power_cap) during the timed steps"
    ]
    note = power_cap_note({"warnings": ctx.warnings, "metrics": ctx.metrics})
    assert note is not None and "up to 690 W over the timed steps" in note  # an instant reading is not averaged
    # A driver that has the field but not for this GPU answers per field (NVML_ERROR_NOT_SUPPORTED = 3).
    use_nvml(InstantPowerNVML(sm=[1980], instant_return=3))
    ctx = _measure(_ctx())
    assert ctx.metrics["clocks"]["power_reading"] == "average"
    assert ctx.metrics["clocks"]["power_w"]["max"] == 223.0


def test_a_cell_without_the_power_cap_note_has_no_power_cap_mark(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1830, 1830, 1830], reasons=0x4))
    ctx = _measure(_ctx(), 0.2)
    assert power_cap_note({"warnings": ctx.warnings, "metrics": ctx.metrics}) is None
    # A record without the clocks summary (an older probe's) still shows the probe's own words.
    assert power_cap_note({"warnings": ["power-capped: the SM clock fell"], "metrics": {}}) == (
        "power-capped: the SM clock fell"
    )


def test_a_drop_with_a_flagged_reason_beside_the_power_cap_is_throttling(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1980, 1600], reasons=0x4 | 0x8))
    ctx = _measure(_ctx())
    assert ctx.warnings[0].startswith("clocks throttled: the SM clock fell to 1600 MHz")
    assert "clocks throttled: hw_slowdown during the timed steps" in ctx.warnings
    assert instability_warnings({"warnings": ctx.warnings}) == ctx.warnings


def test_an_unsupported_quantity_is_none_and_the_rest_is_kept(use_nvml) -> None:
    use_nvml(FakeNVML(sm=[1980], power_mw=None))
    c = _measure(_ctx()).metrics["clocks"]
    assert c["power_w"] is None
    assert c["sm_mhz"]["median"] == 1980.0


def test_samples_are_taken_in_the_background_while_the_steps_run(use_nvml, monkeypatch) -> None:
    monkeypatch.setattr(clocks, "SAMPLE_SECONDS", 0.01)
    fake = use_nvml(FakeNVML(sm=[1980]))
    ctx = _measure(_ctx(), seconds=0.2)
    assert ctx.metrics["clocks"]["samples"] >= 5
    assert fake.sm_reads == ctx.metrics["clocks"]["samples"]


def test_nothing_on_a_cpu(use_nvml) -> None:
    fake = use_nvml(FakeNVML(sm=[1980]))
    ctx = _measure(_ctx("cpu"))
    assert "clocks" not in ctx.metrics and ctx.warnings == []
    assert fake.calls == []


def test_nothing_without_nvml(use_nvml) -> None:
    fake = use_nvml(FakeNVML(sm=[1980], init_fails=True))
    ctx = _measure(_ctx())
    assert "clocks" not in ctx.metrics and ctx.warnings == []
    assert fake.calls == ["init"]


def test_nothing_without_nvidia_ml_py(use_nvml) -> None:
    use_nvml(None)  # sys.modules[name] = None makes the import fail
    ctx = _measure(_ctx())
    assert "clocks" not in ctx.metrics and ctx.warnings == []


def test_an_error_in_the_timed_steps_stops_the_sampler_and_propagates(use_nvml) -> None:
    fake = use_nvml(FakeNVML(sm=[1980]))
    ctx = _ctx()
    with pytest.raises(RuntimeError, match="step failed"), clocks.around(ctx):
        raise RuntimeError("step failed")
    assert fake.calls[-1] == "shutdown"
    assert not any(t.name == "ampsuite-clocks" for t in threading.enumerate())


@pytest.mark.parametrize(
    ("mask", "names"),
    [(0, []), (0x1, ["gpu_idle"]), (0x8 | 0x40, ["hw_slowdown", "hw_thermal_slowdown"]), (0x400, ["0x400"])],
)
def test_reason_bits_have_names(mask: int, names: list[str]) -> None:
    assert clocks._reason_names(mask) == names


def test_registered_as_a_probe(registry) -> None:
    probe = registry.probes["clocks"]
    assert probe.around is clocks.around
    assert probe.inspect is None


class OldDriverNVML(FakeNVML):
    """A driver before 535: only the older name of the reasons query works."""

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        raise FakeNVMLError("Function Not Found")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return self.reasons


def test_reasons_come_from_the_older_query_on_older_drivers(use_nvml) -> None:
    use_nvml(OldDriverNVML(sm=[1980], reasons=0x40))
    ctx = _measure(_ctx())
    assert ctx.metrics["clocks"]["throttle_reasons"] == ["hw_thermal_slowdown"]
    assert ctx.warnings == ["clocks throttled: hw_thermal_slowdown during the timed steps"]


# ---------------------------------------------------------------------------
# utilization over the same window: NVML GPM (Hopper and newer), else NVML's rates
# ---------------------------------------------------------------------------

BUS_BITS, MEM_MHZ = 6144, 3201
DRAM_PEAK = BUS_BITS * MEM_MHZ * 1e6 * 2 / 8  # 4.92 TB/s: an H200's HBM3e as NVML describes it


class GpmNVML(FakeNVML):
    """A Hopper as NVML's GPM sees it: DRAM 62.5% busy, SMs 90%, Tensor Cores 40% between two samples."""

    NVML_SUCCESS = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    VALUES: ClassVar[dict[int, float]] = {10: 62.5, 2: 90.0, 5: 40.0}

    def __init__(self, supported: bool = True, **kw: Any) -> None:
        super().__init__(sm=[1980], **kw)
        self.supported = supported
        self.samples: list[Any] = []
        self.freed: list[Any] = []

    def nvmlGpmQueryDeviceSupport(self, handle: str) -> Any:
        return types.SimpleNamespace(isSupportedDevice=int(self.supported))

    def nvmlGpmSampleAlloc(self) -> Any:
        sample = object()
        self.samples.append(sample)
        return sample

    def nvmlGpmSampleGet(self, handle: str, sample: Any) -> Any:
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed.append(sample)

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.metrics = [types.SimpleNamespace(metricId=0, nvmlReturn=1, value=0.0) for _ in range(8)]

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        assert request.sample1 is self.samples[0] and request.sample2 is self.samples[1]
        for metric in request.metrics[: request.numMetrics]:
            metric.value, metric.nvmlReturn = self.VALUES[metric.metricId], 0
        return request

    def nvmlDeviceGetMemoryBusWidth(self, handle: str) -> int:
        return BUS_BITS

    def nvmlDeviceGetMaxClockInfo(self, handle: str, kind: int) -> int:
        return MEM_MHZ

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return types.SimpleNamespace(gpu=97, memory=55)


@pytest.fixture
def any_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Utilization recorded however short the timed steps (the tests' windows last microseconds)."""
    from ampsuite.plugins.probes import _utilization

    monkeypatch.setattr(_utilization, "MIN_WINDOW_SECONDS", 0.0)


def test_gpm_gives_the_dram_bandwidth_used_over_the_timed_steps(use_nvml, any_window) -> None:
    fake = use_nvml(GpmNVML())
    util = _measure(_ctx()).metrics["utilization"]
    assert util["source"] == "nvml-gpm"
    assert util["dram_bw"] == 0.625 and util["sm_active"] == 0.9 and util["tensor_active"] == 0.4
    assert util["dram_peak_bytes_per_s"] == DRAM_PEAK
    assert util["dram_bytes_per_s"] == pytest.approx(0.625 * DRAM_PEAK)
    assert sorted(map(id, fake.freed)) == sorted(map(id, fake.samples))  # both samples given back


def test_without_gpm_only_nvmls_rates_are_recorded_and_no_throughput_is_made_up(use_nvml, any_window) -> None:
    use_nvml(GpmNVML(supported=False))
    util = _measure(_ctx()).metrics["utilization"]
    assert util.pop("window_seconds") >= 0
    assert util == {"source": "nvml-utilization", "gpu_busy": 0.97, "memory_busy": 0.55}


def test_timed_steps_too_short_for_the_counters_record_why_and_no_shares(use_nvml) -> None:
    use_nvml(GpmNVML())
    util = _measure(_ctx()).metrics["utilization"]
    assert util["source"] == "none" and "too short for NVML's counters" in util["why"]
    assert "dram_bytes_per_s" not in util


def test_an_nvml_without_either_records_no_utilization(use_nvml, any_window) -> None:
    use_nvml(FakeNVML(sm=[1980]))
    ctx = _measure(_ctx())
    assert "clocks" in ctx.metrics and "utilization" not in ctx.metrics


def _doc(dram: float | None, copy_gbps: float | None) -> dict[str, Any]:
    metrics: dict[str, Any] = {"step_time": {"median": 0.1, "noise": 0.001}, "throughput": 10.0}
    if dram is not None:
        metrics["utilization"] = {"source": "nvml-gpm", "dram_bw": 0.5, "dram_bytes_per_s": dram}
    peaks = {"matmul_tflops": {}, "copy_gbps": copy_gbps} if copy_gbps is not None else None
    return {
        "run": {"suite": {"name": "s"}, "noise_target": 0.01},
        "environment": {"peaks": peaks},
        "cells": [
            {
                "id": "w/fp32/bs8",
                "status": "passed",
                "combination": "fp32",
                "baseline": "fp32",
                "batch_size": 8,
                "world_size": 1,
                "workload": {"id": "w", "plugin": "toy", "options": {}, "axes": {}, "unit": "samples"},
                "techniques": [],
                "metrics": metrics,
            }
        ],
    }


@pytest.mark.parametrize(
    ("dram", "copy_gbps", "expected"),
    [(2.15e12, 4300.0, 0.5), (None, 4300.0, None), (2.15e12, None, None)],
)
def test_bandwidth_utilization_is_achieved_dram_throughput_over_the_measured_copy_bandwidth(
    dram: float | None, copy_gbps: float | None, expected: float | None
) -> None:
    d = analysis.derive(_doc(dram, copy_gbps))["w/fp32/bs8"]
    assert d.bandwidth_util == (None if expected is None else pytest.approx(expected))


def test_the_probe_says_what_it_measures(registry) -> None:
    assert "DRAM bandwidth" in registry.probes["clocks"].summary
    assert clocks.around is registry.probes["clocks"].around
