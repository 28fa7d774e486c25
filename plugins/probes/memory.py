"""Peak memory during the timed steps: the CUDA allocator's, or the worker's resident set on a CPU.

Only the timed steps count. Everything a cell runs before them (the numerics
steps, the flops and tensor-core probes' eager counting step, the warm-up)
has its own footprint, often a larger one (an eager step beside a compiled
one), and would otherwise set the peak and hide what a technique saves. So
the peak is reset where the timed region starts and read where it ends:

* CUDA: the allocator's cache is emptied and its peak statistics reset.
* CPU: memory the C allocator holds free is handed back (glibc's
  ``malloc_trim``) after the other probes' counting steps and before the
  warm-up (the probe's ``inspect``: the warm-up steps, not the timed ones, pay
  for faulting the heap in again), then, where timing starts, the kernel's
  high-water mark of the resident set is reset to the current size
  (``/proc/self/clear_refs``, value 5) and read back as ``VmHWM`` from
  ``/proc/self/status``. Where the kernel refuses the reset
  (not Linux, an old kernel) the figure is the whole process's peak
  (``ru_maxrss``) and its ``memory_kind`` says so: ``cpu-rss-process``, never
  compared with ``cpu-rss``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import resource
from collections.abc import Iterator

from ampsuite import Probe, ProbeContext, hookimpl

__all__ = ["around", "high_water_bytes", "release", "reset_high_water"]

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _release_free_heap() -> None:
    # Freed blocks glibc keeps for reuse still count as resident; without this an earlier, larger step's
    # leftovers would be the floor of the timed steps' peak.
    name = ctypes.util.find_library("c")
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)


def release(ctx: ProbeContext) -> None:
    """Hand the heap that earlier, larger steps left free back to the system (a CPU cell's ``inspect``)."""
    if ctx.step.device.type == "cpu":
        _release_free_heap()


def reset_high_water() -> bool:
    """Reset this process's resident-set high-water mark to its current size; whether the kernel did."""
    try:
        with open(_CLEAR_REFS, "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return high_water_bytes() is not None


def high_water_bytes() -> int | None:
    """The resident set's high-water mark (``VmHWM``) in bytes, or None where /proc does not say."""
    try:
        with open(_STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def around(ctx: ProbeContext) -> Iterator[None]:
    import torch  # here, not at the top: registering the probe must not import torch

    device = ctx.step.device
    reset = False
    if device.type == "cuda":
        # Drop what the allocator cached for earlier phases (eager probe steps,
        # capture warm-up) so that the footprint is the timed step's own; blocks
        # a CUDA graph holds in its private pool stay, and count.
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset = reset_high_water()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        # Reserved, not allocated: a replayed CUDA graph allocates nothing, its
        # memory lives in the graph's pool, which only the reserved figure shows.
        ctx.metrics["peak_memory_bytes"] = torch.cuda.max_memory_reserved(device)
        ctx.metrics["peak_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        ctx.metrics["memory_kind"] = "cuda-reserved"
        return
    peak = high_water_bytes() if reset else None
    if peak is not None:
        ctx.metrics["peak_memory_bytes"] = peak
        ctx.metrics["memory_kind"] = "cpu-rss"
    else:
        # ru_maxrss is in KiB on Linux; it covers the whole worker, imports and untimed steps included.
        ctx.metrics["peak_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        ctx.metrics["memory_kind"] = "cpu-rss-process"


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="memory",
            summary=(
                "peak memory over the timed steps only: CUDA memory reserved (graph pools included), "
                "or the worker's resident set on CPU (its high-water mark reset where timing starts)"
            ),
            inspect=release,
            around=around,
            order=90,
        )
    ]
