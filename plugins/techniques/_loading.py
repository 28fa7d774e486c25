"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.loading` (imported on first use)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from ampsuite import Batch, SkipCell, TrainStep
from ampsuite.plugins.techniques.loading import LoadingOptions, PageableOptions


class EndlessSampler(Sampler[int]):
    """The dataset's indices in order, epoch after epoch, without end.

    A loader that ends at each epoch drains its prefetch queue there and starts the next epoch's batches
    from nothing, even with persistent workers: with a few batches an epoch, every epoch's first step waits
    for one worker to load a whole batch (on an H200, ResNet-50 at batch 256 and 4 batches an epoch: every
    fourth step 4.4x the median). One endless epoch keeps the workers' queue full, so the timed steps see
    the loader's steady state. The batches are those of a loader iterated epoch by epoch with its last
    partial batch dropped, as long as a batch divides the dataset; otherwise a batch spans two epochs.
    """

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Iterator[int]:
        while True:
            yield from range(self.size)


class LoaderData:
    """A replacement for ``step.data``: the next DataLoader batch, collated and on the device."""

    def __init__(
        self,
        loader: DataLoader[Any],
        collate: Callable[[Any], Batch],
        device: torch.device,
        non_blocking: bool,
        batches_per_epoch: int,
    ) -> None:
        self.loader = loader
        self.collate = collate
        self.device = device
        self.non_blocking = non_blocking
        self.batches_per_epoch = batches_per_epoch
        self.batches = 0
        self._iterator: Iterator[Any] = iter(loader)

    @property
    def epochs(self) -> int:
        """Whole epochs served so far."""
        return self.batches // self.batches_per_epoch

    def __call__(self) -> Batch:
        item = next(self._iterator)
        self.batches += 1
        return self.collate(item).to(self.device, non_blocking=self.non_blocking)


def _replace_data(step: TrainStep, name: str, options: LoadingOptions | PageableOptions, pinned: bool) -> TrainStep:
    if step.dataset is None or step.collate is None:
        raise SkipCell(f"{name} needs a host dataset and collate function; this workload's step has none")
    if pinned and step.device.type != "cuda":
        raise SkipCell(f"{name}: pinned memory only speeds up host-to-GPU copies; this step runs on {step.device.type}")
    workers = options.num_workers
    batches_per_epoch = len(step.dataset) // step.batch_size
    if batches_per_epoch == 0:
        raise SkipCell(
            f"{name}: the dataset has {len(step.dataset)} samples, fewer than one batch of {step.batch_size}"
        )
    loader: DataLoader[Any] = DataLoader(
        step.dataset,
        batch_size=step.batch_size,
        sampler=EndlessSampler(len(step.dataset)),
        drop_last=True,
        num_workers=workers,
        pin_memory=pinned,
        prefetch_factor=options.prefetch_factor if workers else None,
        persistent_workers=workers > 0,
        multiprocessing_context=(options.start_method or None) if workers else None,
    )
    step.data = LoaderData(loader, step.collate, step.device, non_blocking=pinned, batches_per_epoch=batches_per_epoch)
    step.notes["loading"] = {
        "loader": "pinned" if pinned else "pageable",
        "pin_memory": pinned,
        "non_blocking": pinned,
        "num_workers": workers,
        "prefetch_factor": options.prefetch_factor if workers else None,
        "start_method": options.start_method or multiprocessing.get_start_method(),
        "batches_per_epoch": batches_per_epoch,
        "sampler": "endless",
    }
    return step


def apply_pinned(step: TrainStep, options: LoadingOptions) -> TrainStep:
    return _replace_data(step, "pinned-loading", options, pinned=True)


def apply_pageable(step: TrainStep, options: PageableOptions) -> TrainStep:
    return _replace_data(step, "pageable-loading", options, pinned=False)
