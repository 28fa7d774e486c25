"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.fsdp` (imported on first use)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques._checkpointing import blocks_of
from ampsuite.plugins.techniques._optimizer import by_name, parameter_names, rebuilt_optimizer
from ampsuite.plugins.techniques.fsdp import FsdpOptions

__all__ = ["apply", "one_rank_group"]


def one_rank_group(device: torch.device) -> bool:
    """Join a process group of this process alone unless one exists (a data-parallel rank's); whether it did."""
    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    # An in-process store: a group of one needs no rendezvous, and no port is taken.
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return True


def _dtype(name: str) -> torch.dtype | None:
    return None if name == "none" else getattr(torch, name)


def apply(step: TrainStep, options: FsdpOptions) -> TrainStep:
    blocks = blocks_of(step, "fsdp2")
    if step.model is None or step.optimizer is None:
        raise SkipCell("fsdp2 needs a workload with a model and an optimizer")
    if step.optimizer.state:
        raise SkipCell("fsdp2 shards the parameters and rebuilds the optimizer: it must have taken no step yet")
    started = one_rank_group(step.device)
    mesh = init_device_mesh(step.device.type, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(
        param_dtype=_dtype(options.param_dtype),
        reduce_dtype=_dtype(options.reduce_dtype),
        output_dtype=_dtype(options.output_dtype),
    )
    root = step.model
    names = parameter_names(root)
    for index, block in enumerate(blocks):
        # Backward starts with the last block: resharding it after forward would gather it again at once.
        reshard = options.reshard_after_forward and index < len(blocks) - 1
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(root, mesh=mesh, mp_policy=policy, reshard_after_forward=options.reshard_after_forward)
    step.optimizer = rebuilt_optimizer(step.optimizer, by_name(root, names))
    step.notes["fsdp2"] = {
        "world_size": dist.get_world_size(),
        "mesh": "one-rank group of this process" if started else "the data-parallel ranks",
        "backend": dist.get_backend(),
        "sharded_blocks": len(blocks),
        "param_dtype": options.param_dtype,
        "reduce_dtype": options.reduce_dtype,
        "output_dtype": options.output_dtype,
        "reshard_after_forward": options.reshard_after_forward,
    }
    return step
