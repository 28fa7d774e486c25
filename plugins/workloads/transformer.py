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

import torch
import torch.nn.functional as F
from torch import nn

from plugins.workloads._data import POOL_BATCHES, cycling, device_pool
from suite import Batch, BuildContext, TrainStep, Workload, hookimpl


@dataclass(frozen=True)
class BertOptions:
    layers: int = field(default=12, metadata={"help": "encoder layers"})
    hidden: int = field(default=768, metadata={"help": "hidden size"})
    heads: int = field(default=12, metadata={"help": "attention heads (must divide hidden)"})
    intermediate: int = field(default=3072, metadata={"help": "feed-forward inner size"})
    seq_len: int = field(default=128, metadata={"help": "tokens per sequence"})
    vocab: int = field(default=30522, metadata={"help": "vocabulary size (30522 = bert-base-uncased)"})
    pad_vocab_to: int = field(
        default=1, metadata={"help": "round the embedding/head vocabulary up to a multiple of this (8 = 30528)"}
    )
    mask_prob: float = field(default=0.15, metadata={"help": "fraction of positions masked (at least one each)"})
    fused_attention: bool = field(
        default=True, metadata={"help": "F.scaled_dot_product_attention; false: matmul + nn.Softmax + matmul"}
    )
    dropout: float = field(default=0.0, metadata={"help": "dropout probability (BERT: 0.1)"})
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "intermediate", "seq_len", "pad_vocab_to"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.vocab < 2:
            raise ValueError(f"vocab must be >= 2 (one id is the mask token), got {self.vocab!r}")
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads!r}) must divide hidden ({self.hidden!r})")
        if not 0.0 < self.mask_prob <= 1.0:
            raise ValueError(f"mask_prob must be in (0, 1], got {self.mask_prob!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")

    @property
    def padded_vocab(self) -> int:
        """Rows of the embedding table and columns of the head."""
        return math.ceil(self.vocab / self.pad_vocab_to) * self.pad_vocab_to


class SelfAttention(nn.Module):
    """Multi-head self-attention; ``softmax`` is a distinct module on the unfused path."""

    def __init__(self, hidden: int, heads: int, dropout: float, fused: bool) -> None:
        super().__init__()
        self.heads = heads
        self.fused = fused
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused:
            p = self.dropout.p if self.training else 0.0
            context = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(h // self.heads))
            context = torch.matmul(self.dropout(self.softmax(scores)), v)
        return self.out(context.transpose(1, 2).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """A post-LayerNorm BERT layer: attention, then the feed-forward block, each with a residual."""

    def __init__(self, options: BertOptions) -> None:
        super().__init__()
        h = options.hidden
        self.attention = SelfAttention(h, options.heads, options.dropout, options.fused_attention)
        self.attention_dropout = nn.Dropout(options.dropout)
        self.attention_norm = nn.LayerNorm(h, eps=1e-12)
        self.ffn_in = nn.Linear(h, options.intermediate)
        self.activation = nn.GELU()
        self.ffn_out = nn.Linear(options.intermediate, h)
        self.ffn_dropout = nn.Dropout(options.dropout)
        self.ffn_norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention_dropout(self.attention(x)))
        return self.ffn_norm(x + self.ffn_dropout(self.ffn_out(self.activation(self.ffn_in(x)))))


class BertForMaskedLM(nn.Module):
    """Embeddings, encoder, MLM head; returns logits flattened to ``(batch * seq_len, padded_vocab)``.

    Flat logits let the loss be a plain ``nn.CrossEntropyLoss`` over flat labels.
    """

    position_ids: torch.Tensor

    def __init__(self, options: BertOptions) -> None:
        super().__init__()
        h, v = options.hidden, options.padded_vocab
        self.word_embeddings = nn.Embedding(v, h)
        self.position_embeddings = nn.Embedding(options.seq_len, h)
        self.embedding_norm = nn.LayerNorm(h, eps=1e-12)
        self.embedding_dropout = nn.Dropout(options.dropout)
        self.layers = nn.ModuleList(EncoderLayer(options) for _ in range(options.layers))
        self.head_dense = nn.Linear(h, h)
        self.head_activation = nn.GELU()
        self.head_norm = nn.LayerNorm(h, eps=1e-12)
        self.decoder = nn.Linear(h, v)
        self.register_buffer("position_ids", torch.arange(options.seq_len), persistent=False)
        self.apply(self._init)
        self.decoder.weight = self.word_embeddings.weight  # tied, as in BERT

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids[: input_ids.shape[1]])
        x = self.embedding_dropout(self.embedding_norm(x))
        for layer in self.layers:
            x = layer(x)
        x = self.head_norm(self.head_activation(self.head_dense(x)))
        logits = self.decoder(x)
        return logits.reshape(-1, logits.shape[-1])


class MaskedTokens(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random token sequences with masked-LM labels (-100 where a position is not masked).

    Each sequence masks ``max(1, round(mask_prob * seq_len))`` positions (a
    fixed count, like BERT's ``max_predictions_per_seq``, so no batch is ever
    without a target); a masked input becomes the mask token ``vocab - 1``,
    which ordinary tokens never use.
    """

    def __init__(self, count: int, seq_len: int, vocab: int, mask_prob: float, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, vocab - 1, (count, seq_len), generator=gen)
        masked = max(1, round(mask_prob * seq_len))
        positions = torch.rand(count, seq_len, generator=gen).argsort(dim=1)[:, :masked]
        self.labels = torch.full_like(tokens, -100).scatter_(1, positions, tokens.gather(1, positions))
        self.input_ids = tokens.scatter(1, positions, vocab - 1)

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.input_ids[index], self.labels[index]


def collate(item: list[torch.Tensor]) -> Batch:
    """``[input_ids, labels]`` -> a Batch with flat labels, matching the model's flat logits."""
    input_ids, labels = item
    return Batch((input_ids,), labels.reshape(-1))


def build(options: BertOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    model = BertForMaskedLM(options).to(ctx.device)
    dataset = MaskedTokens(POOL_BATCHES * ctx.batch_size, options.seq_len, options.vocab, options.mask_prob, ctx.seed)
    pool = device_pool(dataset, ctx.batch_size, collate, ctx.device, POOL_BATCHES)
    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size,
        data=cycling(pool),
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=options.weight_decay, fused=False),
        loss_fn=nn.CrossEntropyLoss(ignore_index=-100),
        dataset=dataset,
        collate=collate,
    )


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="bert",
            summary="BERT-base-style encoder with a tied masked-LM head on random tokens; AdamW",
            build=build,
            options=BertOptions,
            unit="sequences",
            traits=frozenset({"model", "data-path"}),
        )
    ]
