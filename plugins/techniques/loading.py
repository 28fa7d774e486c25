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
so they feed exactly the batches of the workload's synthetic pool, and cycle
endlessly by re-creating the iterator at the end of an epoch (persistent
workers survive it). Worker processes start at apply time, so their start-up
lands in the cell's build time, not in step time.

Workers use the platform's default start method (fork on Linux): they only
index a CPU dataset and never touch CUDA, so forking a process that holds a
CUDA context is safe for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from suite import Batch, CheckContext, SkipCell, Technique, TrainStep, hookimpl

__all__ = ["LoaderData", "LoadingOptions", "PageableOptions", "apply_pageable", "apply_pinned"]

START_METHODS = ("", "fork", "spawn", "forkserver")


def _validate(num_workers: int, prefetch_factor: int, start_method: str) -> None:
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers!r}")
    if prefetch_factor < 1:
        raise ValueError(f"prefetch_factor must be >= 1, got {prefetch_factor!r}")
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {', '.join(map(repr, START_METHODS))}, got {start_method!r}")


@dataclass(frozen=True)
class LoadingOptions:
    """Options of ``pinned-loading``."""

    num_workers: int = field(default=4, metadata={"help": "DataLoader worker processes (0: load in the main process)"})
    prefetch_factor: int = field(default=2, metadata={"help": "batches each worker loads ahead"})
    start_method: str = field(default="", metadata={"help": "worker start method; empty for the platform default"})

    def __post_init__(self) -> None:
        _validate(self.num_workers, self.prefetch_factor, self.start_method)


@dataclass(frozen=True)
class PageableOptions:
    """Options of ``pageable-loading``: the same knobs, defaulting to the naive loop."""

    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes (0: load in the main process)"})
    prefetch_factor: int = field(default=2, metadata={"help": "batches each worker loads ahead (with workers)"})
    start_method: str = field(default="", metadata={"help": "worker start method; empty for the platform default"})

    def __post_init__(self) -> None:
        _validate(self.num_workers, self.prefetch_factor, self.start_method)


class LoaderData:
    """A replacement for ``step.data``: the next DataLoader batch, collated and on the device."""

    def __init__(
        self,
        loader: DataLoader[Any],
        collate: Callable[[Any], Batch],
        device: torch.device,
        non_blocking: bool,
    ) -> None:
        self.loader = loader
        self.collate = collate
        self.device = device
        self.non_blocking = non_blocking
        self.epochs = 0
        self._iterator: Iterator[Any] = iter(loader)

    def __call__(self) -> Batch:
        try:
            item = next(self._iterator)
        except StopIteration:
            self.epochs += 1
            self._iterator = iter(self.loader)
            item = next(self._iterator)
        return self.collate(item).to(self.device, non_blocking=self.non_blocking)


def _replace_data(step: TrainStep, name: str, options: LoadingOptions | PageableOptions, pinned: bool) -> TrainStep:
    if step.dataset is None or step.collate is None:
        raise SkipCell(f"{name} needs a host dataset and collate function; this workload's step has none")
    if pinned and step.device.type != "cuda":
        raise SkipCell(f"{name}: pinned memory only speeds up host-to-GPU copies; this step runs on {step.device.type}")
    workers = options.num_workers
    loader: DataLoader[Any] = DataLoader(
        step.dataset,
        batch_size=step.batch_size,
        shuffle=False,
        drop_last=True,
        num_workers=workers,
        pin_memory=pinned,
        prefetch_factor=options.prefetch_factor if workers else None,
        persistent_workers=workers > 0,
        multiprocessing_context=(options.start_method or None) if workers else None,
    )
    if len(loader) == 0:
        raise SkipCell(
            f"{name}: the dataset has {len(step.dataset)} samples, fewer than one batch of {step.batch_size}"
        )
    step.data = LoaderData(loader, step.collate, step.device, non_blocking=pinned)
    step.notes["loading"] = {
        "loader": "pinned" if pinned else "pageable",
        "pin_memory": pinned,
        "non_blocking": pinned,
        "num_workers": workers,
        "prefetch_factor": options.prefetch_factor if workers else None,
        "start_method": options.start_method or "default",
        "batches_per_epoch": len(loader),
    }
    return step


def apply_pinned(step: TrainStep, options: LoadingOptions) -> TrainStep:
    return _replace_data(step, "pinned-loading", options, pinned=True)


def apply_pageable(step: TrainStep, options: PageableOptions) -> TrainStep:
    return _replace_data(step, "pageable-loading", options, pinned=False)


def _needs_data_path(ctx: CheckContext) -> str | None:
    if "data-path" not in ctx.workload.traits:
        return f"needs a workload with a host data path (trait 'data-path'); {ctx.workload.name!r} has none"
    return None


def check_pinned(ctx: CheckContext) -> str | None:
    if ctx.device_type != "cuda":
        return f"pinned memory only speeds up host-to-GPU copies; this run is on {ctx.device_type}"
    return _needs_data_path(ctx)


def check_pageable(ctx: CheckContext) -> str | None:
    return _needs_data_path(ctx)


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="pinned-loading",
            summary="feed the step from a DataLoader: workers, prefetching, pinned memory, non_blocking copies",
            apply=apply_pinned,
            options=LoadingOptions,
            order=10,
            conflicts=frozenset({"pageable-loading"}),
            check=check_pinned,
        ),
        Technique(
            name="pageable-loading",
            summary="feed the step from a DataLoader the naive way: pageable memory, synchronous copies",
            apply=apply_pageable,
            options=PageableOptions,
            order=10,
            conflicts=frozenset({"pinned-loading"}),
            check=check_pageable,
        ),
    ]
