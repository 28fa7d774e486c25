"""Feeding the step from a DataLoader: pinned with asynchronous copies, or the naive pageable loop.

Workloads hand the harness a pool of batches that already live on the device,
so the baseline measures the model alone. These two techniques put a host
data path back in front of it, over the workload's own CPU dataset
(``step.dataset``, converted by ``step.collate``), so a suite can measure what
the data path costs and what pinning buys:

* ``pinned-loading``: worker processes and prefetching, page-locked batches
  and ``non_blocking`` copies, so the copy overlaps the previous step's
  kernels. Default 4 workers: the workloads' samples are ready-made tensors
  (indexing and stacking, no decoding), which a few workers keep ahead of the
  GPU while leaving the host's other cores to the main process and the
  pin-memory thread.
* ``pageable-loading``: the loop users write first: no workers by default,
  pageable memory, a synchronous copy on every step.

Both iterate the dataset in order (no shuffling, last partial batch dropped),
so they feed exactly the batches of the workload's synthetic pool, through one
endless epoch: a loader restarted at every epoch's end drains its prefetch queue
there, and with a few batches an epoch the timed steps would measure those
restarts instead of the loader's steady state. Worker processes start at apply
time, so their start-up lands in the cell's build time, not in step time.

Workers use the platform's default start method (fork on Linux before Python
3.14, forkserver from 3.14; the record's ``notes.loading.start_method`` names
it): they only index a CPU dataset and never touch CUDA, so forking a process
that holds a CUDA context is safe for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ampsuite import CheckContext, Technique, hookimpl
from ampsuite.plugins.techniques.variants import Variant, variants


def _workers(default: int) -> Any:
    """The ``num_workers`` field: pageable-loading's options are pinned-loading's with another default here."""
    return field(
        default=default, metadata={"help": "DataLoader worker processes (0: load in the main process)", "ge": 0}
    )


@dataclass(frozen=True)
class LoadingOptions:
    """Options of ``pinned-loading``."""

    num_workers: int = _workers(4)
    prefetch_factor: int = field(
        default=2, metadata={"help": "batches each worker loads ahead (with workers)", "ge": 1}
    )
    start_method: Literal["", "fork", "spawn", "forkserver"] = field(
        # Not a tune variant: the start of workers that only index a CPU dataset is no recipe ingredient.
        default="",
        metadata={"help": "worker start method; empty for the platform default", "tune": ()},
    )


@dataclass(frozen=True)
class PageableOptions(LoadingOptions):
    """Options of ``pageable-loading``: the same knobs, defaulting to the naive loop."""

    num_workers: int = _workers(0)


def _pinned_check(ctx: CheckContext) -> str | None:
    if ctx.device_type != "cuda":
        return f"pinned memory only speeds up host-to-GPU copies; this run is on {ctx.device_type}"
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return variants(
        "ampsuite.plugins.techniques._loading",
        Variant(
            "pinned-loading",
            "pinned",
            "feed the step from a DataLoader: workers, prefetching, pinned memory, non_blocking copies",
            LoadingOptions,
            check=_pinned_check,
        ),
        Variant(
            "pageable-loading",
            "pageable",
            "feed the step from a DataLoader the naive way: pageable memory, synchronous copies",
            PageableOptions,
        ),
        order=10,
        requires_traits=frozenset({"data-path"}),
    )
