"""A BERT-base-style encoder with a masked-LM head, written with plain nn modules.

Every precision-sensitive piece is its own module so techniques can target it:
``nn.LayerNorm`` (embeddings, each sub-layer, the head), the attention's
``nn.Softmax`` (``SelfAttention.softmax``, used when ``fused_attention`` is
off) and the ``nn.CrossEntropyLoss`` loss (``ignore_index=-100``).

Choices, and why:

* The MLM head's vocabulary projection is **tied** to the word embeddings, as
  in BERT; the head scores every position (not only masked ones) so that
  shapes never change from step to step.
* The vocabulary is 30522 (bert-base-uncased), which is **not** a multiple of
  8: the head's products then miss the Tensor Core alignment rule and the
  tensor-core probe says so. ``pad_vocab_to=8`` pads the embedding table and
  the head to 30528, NVIDIA's fix; padded logits are never a target. The
  default (1, no padding) keeps the real-world shape, so the padding is a
  measurable choice instead of a silent one.
* Dropout defaults to 0 (BERT uses 0.1) so that cells differing only in
  precision compute the same function and their losses are comparable.
* Q, K and V come from one fused ``nn.Linear(hidden, 3 * hidden)``; the FLOPs
  equal three separate projections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ampsuite import Workload, hookimpl, lazy
from ampsuite.plugins.workloads import fields
from ampsuite.plugins.workloads.optimizers import OptimizerName, check_optimizer


@dataclass(frozen=True)
class BertOptions:
    layers: int = fields.encoder_layers(12)
    hidden: int = fields.hidden(768)
    heads: int = fields.heads(12)
    intermediate: int = field(default=3072, metadata={"help": "feed-forward inner size", "ge": 1})
    seq_len: int = field(default=128, metadata={"help": "tokens per sequence", "ge": 1})
    vocab: int = field(
        default=30522,
        metadata={"help": "vocabulary size (30522 = bert-base-uncased; one id is the mask token)", "ge": 2},
    )
    pad_vocab_to: int = field(
        default=1,
        metadata={"help": "round the embedding/head vocabulary up to a multiple of this (8 = 30528)", "ge": 1},
    )
    mask_prob: float = field(
        default=0.15, metadata={"help": "fraction of positions masked (at least one each)", "gt": 0, "le": 1}
    )
    fused_attention: bool = field(
        default=True, metadata={"help": "F.scaled_dot_product_attention; false: matmul + nn.Softmax + matmul"}
    )
    dropout: float = fields.dropout("BERT: 0.1")
    optimizer: OptimizerName = fields.optimizer("adamw")
    lr: float = fields.learning_rate(1e-4)
    weight_decay: float = fields.weight_decay(0.01)

    def __post_init__(self) -> None:
        fields.must_divide("heads", self.heads, "hidden", self.hidden)

    @property
    def padded_vocab(self) -> int:
        """Rows of the embedding table and columns of the head."""
        return math.ceil(self.vocab / self.pad_vocab_to) * self.pad_vocab_to


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="bert",
            summary="BERT-base-style encoder with a tied masked-LM head on random tokens; AdamW",
            build=lazy("ampsuite.plugins.workloads._transformer:build"),
            options=BertOptions,
            unit="sequences",
            traits=frozenset({"model", "data-path", "blocks"}),
            check=check_optimizer,
        )
    ]
