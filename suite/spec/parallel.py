"""What the suite file's ``gpus`` and ``nodes`` mean before anything runs: ids and skip reasons of data-parallel cells.

Pure: the number of GPUs is a device fact handed in by the caller.

Cell ids. A cell on one node names its world size: ``/xN`` (N processes; none
for one process, so those ids never change). A cell spanning M > 1 nodes names
both factors as torchrun users write them, nodes first: ``/nMxN`` (M nodes x N
processes per node, world size M x N), so ``toy/fp32/n2x1/bs8`` and
``toy/fp32/x2/bs8`` -- both two processes -- stay distinct; ``-k x2`` (a
substring) picks every cell of two processes per node, ``-k n2x1`` one layout.
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


def id_part(world_size: int, nodes: int = 1) -> str:
    """The part of a cell id that names its world size (see the module docstring): ``""``, ``/xN`` or ``/nMxN``."""
    if nodes > 1:
        return f"/n{nodes}x{world_size // nodes}"
    return f"/x{world_size}" if world_size > 1 else ""


def skip_reason(
    world_size: int, device: str, techniques: Collection[str], gpu_count: int, nodes: int = 1
) -> str | None:
    """Why a cell of ``world_size`` processes on ``nodes`` nodes cannot run on ``device`` with ``techniques``.

    None: it can. The built-in executor runs every node of a multi-node cell on
    this machine (:mod:`ampsuite.run.nodes`), so a CUDA cell needs all of its
    ``world_size`` GPUs here.
    """
    if world_size <= 1:
        return None
    if device == "cuda" and world_size > gpu_count:
        how = f"gpus = {world_size}" if nodes <= 1 else f"nodes = {nodes} x gpus = {world_size // nodes}, all here"
        return f"needs {world_size} GPUs ({how}); this machine has {gpu_count}"
    for name in sorted(techniques):
        if name in UNSUPPORTED_TECHNIQUES:
            return UNSUPPORTED_TECHNIQUES[name]
    return None
