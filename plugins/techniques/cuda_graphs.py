"""CUDA graphs: capture the training step once, then replay it with one launch.

Small batches are bound by kernel-launch overhead on the host; a replayed graph
launches the whole step at once. Replays read and write fixed addresses, so the
wrapper keeps static input buffers and copies each new batch into them.

Two capture strategies:

* whole-step (no GradScaler, or one whose optimizer takes the scale itself):
  forward, backward and optimizer step in one graph. Optimizers with a
  ``capturable`` flag (Adam, AdamW) get it set, so their step counter lives on
  the device; SGD needs nothing. A fused optimizer (``_step_supports_amp_scaling``)
  receives GradScaler's scale and inf check as device tensors and skips an
  overflowing step in its kernel, and ``GradScaler.update`` moves the scale on the
  device, so with one the scaler is captured too.
* forward-backward (a GradScaler with any other optimizer): ``scaler.step`` reads
  the inf check back to the host to decide whether to step, which cannot live
  in a graph. Only forward and backward are captured; the update runs eagerly
  after each replay. The gradients are the graph's static outputs:
  they are set to None before capture, so backward assigns (not accumulates)
  into them and every replay overwrites them; they must never be dropped
  afterwards, so the update here does not zero them.

Warm-up iterations (on a side stream, as capture requires) must not change the
training trajectory: parameters and buffers are restored in place afterwards,
optimizer state tensors are zeroed in place (a fresh SGD-momentum or Adam
state; SGD with dampening != 0 is the exception, its first step differs), the
scaler state and the CUDA RNG state are restored. The first replay is then the
cell's first training step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Technique, hookimpl, lazy

CUDAGRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")
"""torch.compile modes that already capture CUDA graphs (cudagraph trees)."""


@dataclass(frozen=True)
class GraphOptions:
    warmup_iters: int = field(default=3, metadata={"help": "eager iterations on a side stream before capture", "ge": 1})


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="cuda-graphs",
            summary="capture the step in a CUDA graph and replay it (whole step, or forward/backward with a scaler)",
            apply=lazy("ampsuite.plugins.techniques._cuda_graphs:apply"),
            options=GraphOptions,
            order=90,
            requires=frozenset({"cuda"}),
            check=lazy("ampsuite.plugins.techniques._cuda_graphs:check"),
        )
    ]
