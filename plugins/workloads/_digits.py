"""A real labelled image set that installs from the package index: scikit-learn's handwritten digits.

``sklearn.datasets.load_digits`` returns 1,797 8x8 greyscale digits (ten
classes, 16 grey levels) shipped inside scikit-learn's wheel, so no download
happens at run time. They are written once per image size under the data
folder, as uint8 NHWC images with the grey level in all three channels
(resized with antialiased bilinear interpolation when ``image_size`` is not 8),
split for evaluation by the SHA-256 of each image's own pixels: an image whose
hash, read as a number, falls in the first :data:`EVAL_PERCENT` of the range is
held out, so duplicates never straddle the split.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ampsuite.plugins.workloads._data import InMemoryImages, written_once

__all__ = ["CLASSES", "EVAL_PERCENT", "digits_notes", "digits_split", "prepare_digits"]

CLASSES = 10
EVAL_PERCENT = 20
DIGITS_FORMAT = 1


def _load() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise ImportError(
            "source = 'digits' reads scikit-learn's digits, and scikit-learn is not installed: "
            "pip install 'ampsuite[quality]'"
        ) from exc
    digits = load_digits()
    return np.asarray(digits.images), np.asarray(digits.target, dtype=np.int64)


def prepare_digits(data_dir: str | os.PathLike[str], image_size: int) -> Path:
    """Write the split digits at ``image_size`` pixels once (``{train,eval}_{images,labels}.npy``)."""

    def write(tmp: Path) -> None:
        images, labels = _load()
        grey = torch.from_numpy(images).float().div(16.0).unsqueeze(1)  # N, 1, 8, 8 in [0, 1]
        if image_size != grey.shape[-1]:
            grey = F.interpolate(grey, size=(image_size, image_size), mode="bilinear", antialias=True)
        pixels = grey.clamp(0, 1).mul(255).round().to(torch.uint8).squeeze(1).numpy()
        held = np.array([_held_out(raw) for raw in images.astype(np.uint8)])
        meta: dict[str, Any] = {"format": DIGITS_FORMAT, "image_size": image_size, "splits": {}}
        for split, mask in (("train", ~held), ("eval", held)):
            chosen = np.repeat(pixels[mask][..., None], 3, axis=-1)  # N, H, W, 3: grey in every channel
            np.save(tmp / f"{split}_images.npy", np.ascontiguousarray(chosen))
            np.save(tmp / f"{split}_labels.npy", labels[mask])
            meta["splits"][split] = {"images": int(mask.sum())}
        (tmp / "meta.json").write_text(json.dumps(meta) + "\n")

    return written_once(Path(data_dir) / f"digits-{DIGITS_FORMAT}-{image_size}px", write)


def _held_out(image: np.ndarray[Any, Any]) -> bool:
    number = int.from_bytes(hashlib.sha256(image.tobytes()).digest()[:8], "big")
    return number % 100 < EVAL_PERCENT


def digits_split(folder: Path, split: str) -> InMemoryImages:
    """One split of the written digits, in host memory."""
    images = torch.from_numpy(np.load(folder / f"{split}_images.npy"))
    labels = torch.from_numpy(np.load(folder / f"{split}_labels.npy"))
    return InMemoryImages(images, labels)


def digits_notes(folder: Path) -> dict[str, Any]:
    """What the cell's notes say of the data: its name and each split's size."""
    meta = json.loads((folder / "meta.json").read_text())
    return {"name": "sklearn-digits", "image_size": meta["image_size"], "splits": meta["splits"]}
