"""What the suite file's ``gpus`` means before anything runs: cell ids and skip reasons of data-parallel cells.

Pure: the number of GPUs is a device fact handed in by the caller.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["UNSUPPORTED_TECHNIQUES", "id_part", "skip_reason"]

UNSUPPORTED_TECHNIQUES: dict[str, str] = {
    "cuda-graphs": (
        "cuda-graphs is not supported with gpus > 1: capturing DistributedDataParallel needs DDP built on a "
        "side stream, 11+ eager warm-up iterations and NCCL async error handling off, and the capture's warm-up "
        "restores weights behind DDP's back"
    ),
}
"""Techniques a data-parallel cell refuses, with the reason its record gives."""


def id_part(world_size: int) -> str:
    """The part of a cell id that names its world size: empty for one process, so those ids never change."""
    return f"/x{world_size}" if world_size > 1 else ""


def skip_reason(world_size: int, device: str, techniques: Collection[str], gpu_count: int) -> str | None:
    """Why a cell of ``world_size`` processes cannot run on ``device`` with ``techniques`` (None: it can)."""
    if world_size <= 1:
        return None
    if device == "cuda" and world_size > gpu_count:
        return f"needs {world_size} GPUs (gpus = {world_size}); this machine has {gpu_count}"
    for name in sorted(techniques):
        if name in UNSUPPORTED_TECHNIQUES:
            return UNSUPPORTED_TECHNIQUES[name]
    return None
