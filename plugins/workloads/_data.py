"""Data helpers shared by the built-in workloads.

One rule keeps every cell comparable: the batches a step sees depend only on
the workload options, the batch size and the seed. Each workload therefore
builds a host-side ``Dataset`` of CPU samples and derives its on-device pool
from the *same* dataset, read exactly as a ``DataLoader(dataset,
batch_size, shuffle=False)`` would read it. A loading technique that replaces
``step.data`` with such a loader over ``step.dataset`` then feeds identical
batches in the identical order.

Images are kept as uint8 HWC arrays (as decoded JPEGs are) and converted to
normalised float CHW per sample, so a loader has the host-side work a real
input pipeline has.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from ampsuite import Batch

__all__ = [
    "POOL_BATCHES",
    "DiskImages",
    "InMemoryImages",
    "Shuffled",
    "cycling",
    "device_pool",
    "disk_images_dir",
    "held_out",
    "image_collate",
    "loader_data",
    "normalize_image",
    "prepare_disk_images",
    "real_data",
    "synthetic_images",
    "written_once",
]

POOL_BATCHES = 4
"""Batches in a synthetic pool (and samples in its dataset: ``POOL_BATCHES * batch_size``).

Small enough to fit beside a full-size model on the device, large enough that
consecutive steps do not see the same batch."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_MEAN = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
_STD = torch.tensor(IMAGENET_STD).view(3, 1, 1)

DISK_FORMAT = 1
"""Bumped when the on-disk layout changes, so old files are never misread."""

DISK_SEED = 0
"""Seed of the on-disk data set: the file is shared by every cell and run, whatever their seed."""


def normalize_image(hwc: torch.Tensor) -> torch.Tensor:
    """uint8 HWC image -> contiguous float32 CHW, normalised with the ImageNet statistics."""
    return hwc.permute(2, 0, 1).contiguous().to(torch.float32).div_(255.0).sub_(_MEAN).div_(_STD)


class InMemoryImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images held in host memory as one uint8 NHWC tensor.

    Tensors (not NumPy arrays) so that DataLoader workers receive them through
    shared memory instead of a pickled copy each.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[-1] != 3:
            raise ValueError(f"images must be uint8 NHWC with 3 channels, got {images.dtype} {tuple(images.shape)}")
        if len(labels) != len(images):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return normalize_image(self.images[index]), self.labels[index]


def synthetic_images(count: int, image_size: int, classes: int, seed: int) -> InMemoryImages:
    """Deterministic random images and labels: the same ``seed`` gives the same data everywhere."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, image_size, image_size, 3), generator=gen, dtype=torch.uint8)
    labels = torch.randint(0, classes, (count,), generator=gen)
    return InMemoryImages(images, labels)


class DiskImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images read from a memory-mapped ``images.npy`` (uint8 NHWC) and ``labels.npy``.

    The memory maps are opened lazily in each process and dropped when the
    dataset is pickled, so DataLoader workers map the file themselves instead
    of receiving a copy of it. ``length`` may cut the data set short (whole
    batches only, so every step has the same shape).
    """

    def __init__(self, directory: str | os.PathLike[str], length: int | None = None) -> None:
        self.directory = Path(directory)
        labels = np.load(self.directory / "labels.npy", mmap_mode="r")
        available = len(labels)
        if length is not None and not 0 < length <= available:
            raise ValueError(f"length must be in 1..{available}, got {length}")
        self.length = available if length is None else length
        self._images: np.ndarray[Any, Any] | None = None
        self._labels: np.ndarray[Any, Any] | None = None

    def _open(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        if self._images is None or self._labels is None:
            self._images = np.load(self.directory / "images.npy", mmap_mode="r")
            self._labels = np.load(self.directory / "labels.npy", mmap_mode="r")
        return self._images, self._labels

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_images": None, "_labels": None}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        images, labels = self._open()
        image = torch.from_numpy(np.array(images[index]))  # the copy is the read from disk
        return normalize_image(image), torch.tensor(int(labels[index]), dtype=torch.int64)


def _disk_spec(count: int, image_size: int, classes: int) -> dict[str, int]:
    return {"format": DISK_FORMAT, "seed": DISK_SEED, "count": count, "image_size": image_size, "classes": classes}


def disk_images_dir(data_dir: str | os.PathLike[str], prefix: str, count: int, image_size: int, classes: int) -> Path:
    """Where that data set lives: named by a hash of everything that shapes its content."""
    key = json.dumps(_disk_spec(count, image_size, classes), sort_keys=True)
    return Path(data_dir) / f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def prepare_disk_images(
    data_dir: str | os.PathLike[str], prefix: str, count: int, image_size: int, classes: int
) -> Path:
    """Write ``count`` random uint8 NHWC images and their labels under ``data_dir``, once.

    Idempotent and safe against a concurrent writer: the files are written into
    a temporary folder that is renamed into place; ``meta.json`` is written last
    and marks a complete data set.
    """
    final = disk_images_dir(data_dir, prefix, count, image_size, classes)

    def write(tmp: Path) -> None:
        rng = np.random.default_rng(DISK_SEED)
        images = np.lib.format.open_memmap(
            tmp / "images.npy", mode="w+", dtype=np.uint8, shape=(count, image_size, image_size, 3)
        )
        chunk = max(1, (64 << 20) // (image_size * image_size * 3))  # about 64 MiB at a time
        for start in range(0, count, chunk):
            stop = min(count, start + chunk)
            images[start:stop] = rng.integers(0, 256, size=(stop - start, image_size, image_size, 3), dtype=np.uint8)
        images.flush()
        del images
        np.save(tmp / "labels.npy", rng.integers(0, classes, size=count, dtype=np.int64))
        (tmp / "meta.json").write_text(json.dumps(_disk_spec(count, image_size, classes)) + "\n")

    return written_once(final, write)


def image_collate(item: list[torch.Tensor]) -> Batch:
    """A default-collated ``[images, labels]`` -> CPU :class:`Batch`."""
    images, labels = item
    return Batch((images,), labels)


def device_pool(
    dataset: Dataset[Any], batch_size: int, collate: Callable[[Any], Batch], device: torch.device, batches: int
) -> list[Batch]:
    """The first ``batches`` batches of ``dataset`` on ``device``, read as a non-shuffling DataLoader would.

    Samples are collated by hand (no DataLoader iterator) so that building the
    pool draws nothing from the global random generator.
    """
    pool = []
    for b in range(batches):
        samples = [dataset[i] for i in range(b * batch_size, (b + 1) * batch_size)]
        pool.append(collate(default_collate(samples)).to(device))
    return pool


def cycling(pool: list[Batch]) -> Callable[[], Batch]:
    """A ``data()`` that returns the pool's batches in order, forever."""
    if not pool:
        raise ValueError("an empty pool has no batches to cycle")
    state = {"next": 0}

    def data() -> Batch:
        i = state["next"]
        state["next"] = (i + 1) % len(pool)
        return pool[i]

    return data


def loader_data(
    dataset: Dataset[Any], batch_size: int, collate: Callable[[Any], Batch], device: torch.device
) -> Callable[[], Batch]:
    """A ``data()`` that reads a plain DataLoader (main process, pageable memory) over and over.

    This is the untuned input pipeline that loading techniques improve on. The
    loader gets its own generator, so starting an epoch draws nothing from the
    global random generator (which dropout and initialisation use).
    """
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, generator=torch.Generator())
    return _endless(loader, collate, device, non_blocking=False)


def _endless(
    loader: DataLoader[Any], collate: Callable[[Any], Batch], device: torch.device, *, non_blocking: bool
) -> Callable[[], Batch]:
    """A ``data()`` that reads ``loader`` epoch after epoch: each batch collated and on ``device``."""
    it: Iterator[Any] = iter(())

    def data() -> Batch:
        nonlocal it
        try:
            item = next(it)
        except StopIteration:
            it = iter(loader)
            item = next(it)
        return collate(item).to(device, non_blocking=non_blocking)

    return data


SHUFFLED_EPOCHS = 10_000
"""Epochs a :class:`Shuffled` data set spans: far more than any budget trains."""


class Shuffled(Dataset[Any]):
    """``base`` in a new seeded order every epoch, epoch after epoch, as one long data set.

    A real training run shuffles its data; read in order, as loaders and device pools read a workload's
    data set, this gives every reader (the workload's own loader, a loading technique's) the same shuffled
    batches in the same order, and another seed another order.
    """

    def __init__(self, base: Dataset[Any], seed: int, epochs: int = SHUFFLED_EPOCHS) -> None:
        self.base, self.seed, self.epochs = base, seed % 2**63, epochs
        self.size = len(base)  # type: ignore[arg-type]
        self._orders: dict[int, np.ndarray[Any, Any]] = {}

    def __len__(self) -> int:
        return self.size * self.epochs

    def __getitem__(self, index: int) -> Any:
        epoch, within = divmod(index, self.size)
        if epoch not in self._orders:
            self._orders = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.size)}
        return self.base[int(self._orders[epoch][within])]


def real_data(
    dataset: Dataset[Any], batch_size: int, collate: Callable[[Any], Batch], device: torch.device
) -> Callable[[], Batch]:
    """A ``data()`` over a real data set: a DataLoader whose batches are pinned and copied without blocking
    on CUDA (two worker processes, a real input pipeline's shape), read in the main process on a CPU."""
    cuda = device.type == "cuda"
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        drop_last=True,
        num_workers=2 if cuda else 0,
        pin_memory=cuda,
        persistent_workers=cuda,
        generator=torch.Generator(),
    )
    return _endless(loader, collate, device, non_blocking=cuda)


def held_out(
    dataset: Dataset[Any], batch_size: int, collate: Callable[[Any], Batch], device: torch.device
) -> Callable[[int], list[Batch]]:
    """``TrainStep.eval_data`` over a held-out split: ``n`` batches of samples spread evenly over it (wrapping
    round when it holds fewer), made once per ``n`` and kept on the device, the same whatever the seed."""
    made: dict[int, list[Batch]] = {}
    count = len(dataset)  # type: ignore[arg-type]

    def eval_data(n: int) -> list[Batch]:
        if n not in made:
            total = n * batch_size
            index = [k * count // total if total <= count else k % count for k in range(total)]
            made[n] = [
                collate(default_collate([dataset[i] for i in index[b * batch_size : (b + 1) * batch_size]])).to(device)
                for b in range(n)
            ]
        return made[n]

    return eval_data


def written_once(final: Path, write: Callable[[Path], None]) -> Path:
    """``final``, written by ``write(folder)`` into a temporary folder renamed into place unless it holds a
    ``meta.json`` already (which ``write`` writes last): idempotent, and safe against a concurrent writer."""
    if (final / "meta.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "meta.json").is_file():  # not a concurrent writer that finished first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
