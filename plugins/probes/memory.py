"""Peak memory during the timed steps (CUDA allocator) or of the worker process (CPU RSS)."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator

from ampsuite import Probe, ProbeContext, hookimpl


@contextlib.contextmanager
def around(ctx: ProbeContext) -> Iterator[None]:
    import torch  # here, not at the top: registering the probe must not import torch

    device = ctx.step.device
    if device.type == "cuda":
        # Drop what the allocator cached for earlier phases (eager probe steps,
        # capture warm-up) so that the footprint is the timed step's own; blocks
        # a CUDA graph holds in its private pool stay, and count.
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        # Reserved, not allocated: a replayed CUDA graph allocates nothing, its
        # memory lives in the graph's pool, which only the reserved figure shows.
        ctx.metrics["peak_memory_bytes"] = torch.cuda.max_memory_reserved(device)
        ctx.metrics["peak_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        ctx.metrics["memory_kind"] = "cuda-reserved"
    else:
        # ru_maxrss is in KiB on Linux; it covers the whole worker, imports included.
        ctx.metrics["peak_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        ctx.metrics["memory_kind"] = "cpu-rss"


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="memory",
            summary=(
                "peak memory: CUDA memory reserved over the timed steps (graph pools included), "
                "or the worker's peak RSS on CPU"
            ),
            around=around,
            order=90,
        )
    ]
