"""FP32 islands: numerically sensitive layers keep computing in float32 under autocast.

Normalisations, softmax and the loss reduce over many values; in float16 or
bfloat16 their sums lose precision or overflow. autocast already promotes some
of them on CUDA (``layer_norm``, ``softmax`` and the losses are on its float32
list), but not batch norm, and on CPU none of them: an island makes the choice
explicit and the same on every device.

How: each matching module's ``forward`` is replaced, on the instance, by one
that disables autocast and casts float16/bfloat16 tensor inputs to float32.
Parameters are untouched (they stay float32). The module structure, parameter
names and ``isinstance`` checks are unchanged, so probes and ``torch.compile``
see the same model.

Output dtype: an island returns float32, as autocast's own float32-list ops do.
Consumers that autocast handles (linear, conv, matmul) cast it back down
themselves; element-wise consumers (a residual add) then run in float32, which
is the price of the island and shows up in the memory figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import CheckContext, Technique, hookimpl, lazy

LAYER_NAMES = ("layernorm", "softmax", "batchnorm", "loss")
"""Layer kinds (the module types of each are ``_islands.ISLAND_TYPES``); ``"loss"`` means the step's ``loss_fn``."""


AMP_TECHNIQUES = ("amp-fp16", "amp-bf16")


@dataclass(frozen=True)
class IslandsOptions:
    layers: tuple[str, ...] = field(
        default=LAYER_NAMES,
        metadata={"help": "layer kinds kept in float32", "choices": LAYER_NAMES, "min_length": 1},
    )


def check(ctx: CheckContext) -> str | None:
    if not any(name in ctx.techniques for name in AMP_TECHNIQUES):
        return "needs amp-fp16 or amp-bf16 in the same combination (without autocast everything is float32 already)"
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="fp32-islands",
            summary="under autocast, keep layer norm, softmax, batch norm and the loss computing in float32",
            apply=lazy("ampsuite.plugins.techniques._islands:apply"),
            options=IslandsOptions,
            order=40,
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
