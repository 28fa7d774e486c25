"""The device's peak rates before the first cell: read from their cache or measured, in a worker, and said which."""

from __future__ import annotations

import time
from collections.abc import Callable
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from ampsuite.run.attempt import in_worker

__all__ = ["PEAKS_TIMEOUT", "measure_peaks"]

PEAKS_TIMEOUT = {"cpu": 60.0, "cuda": 300.0}


def measure_peaks(
    ctx: BaseContext, device: str, refresh: bool, log: Path, message: Callable[[str], None]
) -> dict[str, Any] | None:
    """The peaks (:func:`ampsuite.run.peaks.measure_peaks` in a worker of ``ctx``), or None when the worker gave
    none; ``message`` is told, in one line, whether they came from the cache or were measured, and the cache file."""
    from ampsuite.run import worker

    t0 = time.perf_counter()
    kind, value = in_worker(ctx, worker.peaks_main, (device, refresh, str(log)), PEAKS_TIMEOUT[device], log)
    if kind == "result" and "peaks" in value:
        peaks = dict(value["peaks"])
        cache = value.get("cache")
        if peaks.get("cached"):
            message(f"device peaks: from the cache, {cache} (--refresh-peaks measures them again)")
        else:
            message(f"device peaks: measured in {time.perf_counter() - t0:.1f} s, cached in {cache}")
        return peaks
    if kind == "result":
        why = f"{kind}: {value.get('error') if isinstance(value, dict) else value}"
    elif kind == "timed out":  # the value is the process's stack dump, too long for a one-line message
        why = f"timed out after {PEAKS_TIMEOUT[device]:g} s"
    else:
        why = f"{kind}: exit code {value}"
    message(f"device peaks not measured ({why})")
    return None
