"""``lstm-lm``: a stacked-LSTM language model trained on a synthetic token stream.

Recurrent models are where mixed precision behaves differently from the
convolution and attention workloads ampsuite ships: the cuDNN LSTM kernels
have their own reduced-precision paths, and the sequential dependency limits
how much a faster matmul helps. Throughput is reported in tokens per second
(``batch_size`` sequences of ``seq_len`` tokens each per step).

The data is learnable on purpose: each token follows a fixed random
successor table most of the time, so the loss falls well below ln(vocab)
within tens of steps and the numerics comparison between techniques means
something. Random tokens would leave every technique at the same flat loss.

The model keeps its layers in ``model.blocks`` (an ``nn.ModuleList``), the
convention the ``extras-checkpointing`` technique looks for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Workload, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1
"""The ampsuite plugin API this module was written for (checked when it is loaded)."""


NAME = "lstm-lm"


FOLLOW_PROBABILITY = 0.8
"""How often a token is its predecessor's fixed successor rather than a random one."""


POOL_BATCHES = 4
"""Distinct on-device batches cycled through by ``data()``: real data without a loader."""


@dataclass(frozen=True)
class LstmOptions:
    """Options of ``lstm-lm``; the defaults are a small model, suites set their own sizes."""

    vocab: int = field(default=512, metadata={"help": "vocabulary size; tokens are integers below it", "ge": 2})
    hidden: int = field(default=256, metadata={"help": "embedding and LSTM width", "ge": 1})
    layers: int = field(default=2, metadata={"help": "stacked LSTM blocks (each one checkpointable)", "ge": 1})
    seq_len: int = field(default=64, metadata={"help": "tokens per sequence", "ge": 1})
    dropout: float = field(default=0.0, metadata={"help": "dropout on each block's output", "ge": 0, "lt": 1})
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate", "gt": 0})


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name=NAME,
            summary="stacked-LSTM language model on a learnable synthetic token stream (blocks in model.blocks)",
            build=lazy("ampsuite_extras._lstm:build"),
            options=LstmOptions,
            unit="tokens",
            traits=frozenset({"model", "data-path", "recurrent"}),
        )
    ]
