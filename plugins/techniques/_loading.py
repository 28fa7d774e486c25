"""The torch-dependent part of :mod:`plugins.techniques.loading` (imported when a cell builds or applies it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from plugins.techniques.loading import LoadingOptions, PageableOptions
from suite import Batch, CheckContext, SkipCell, TrainStep


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
