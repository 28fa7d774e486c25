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
convention the ``activation-checkpointing`` technique looks for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from suite import Batch, BuildContext, TrainStep, Workload, hookimpl
from torch import nn
from torch.nn import functional as F

AMPSUITE_PLUGIN_API = 1
"""The ampsuite plugin API this module was written for (checked when it is loaded)."""

NAME = "lstm-lm"
FOLLOW_PROBABILITY = 0.8
"""How often a token is its predecessor's fixed successor rather than a random one."""
POOL_BATCHES = 4
"""Distinct on-device batches cycled through by ``data()``: real data without a loader."""

__all__ = ["NAME", "LstmBlock", "LstmLanguageModel", "LstmOptions", "TokenDataset", "build", "make_tokens"]


@dataclass(frozen=True)
class LstmOptions:
    """Options of ``lstm-lm``; the defaults are a small model, suites set their own sizes."""

    vocab: int = field(default=512, metadata={"help": "vocabulary size; tokens are integers below it"})
    hidden: int = field(default=256, metadata={"help": "embedding and LSTM width"})
    layers: int = field(default=2, metadata={"help": "stacked LSTM blocks (each one checkpointable)"})
    seq_len: int = field(default=64, metadata={"help": "tokens per sequence"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on each block's output, in [0, 1)"})
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate"})

    def __post_init__(self) -> None:
        if self.vocab < 2:
            raise ValueError(f"vocab must be >= 2, got {self.vocab!r}")
        for name in ("hidden", "layers", "seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


class LstmBlock(nn.Module):
    """One LSTM layer with a residual connection and a LayerNorm: the unit that gets checkpointed."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(width, width, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.norm(x + self.drop(y))


class LstmLanguageModel(nn.Module):
    """Embedding, ``layers`` LSTM blocks, a linear head over the vocabulary."""

    def __init__(self, options: LstmOptions) -> None:
        super().__init__()
        self.embed = nn.Embedding(options.vocab, options.hidden)
        self.blocks = nn.ModuleList(LstmBlock(options.hidden, options.dropout) for _ in range(options.layers))
        self.head = nn.Linear(options.hidden, options.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class TokenCrossEntropy(nn.Module):
    """Cross-entropy over every position: logits (B, T, V) against targets (B, T)."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def make_tokens(sequences: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """``sequences`` rows of ``length`` tokens from a fixed random successor table (CPU, int64)."""
    gen = torch.Generator().manual_seed(seed)
    successor = torch.randint(0, vocab, (vocab,), generator=gen)
    tokens = torch.empty(sequences, length, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (sequences,), generator=gen)
    for t in range(1, length):
        follow = torch.rand(sequences, generator=gen) < FOLLOW_PROBABILITY
        noise = torch.randint(0, vocab, (sequences,), generator=gen)
        tokens[:, t] = torch.where(follow, successor[tokens[:, t - 1]], noise)
    return tokens


class TokenDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Next-token pairs: (tokens[:-1], tokens[1:]) of each sequence, on the host."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[index]
        return row[:-1], row[1:]


def collate(item: tuple[torch.Tensor, torch.Tensor]) -> Batch:
    """A DataLoader batch (inputs, targets) as a CPU :class:`suite.Batch`."""
    inputs, target = item
    return Batch((inputs,), target)


def build(options: LstmOptions, ctx: BuildContext) -> TrainStep:
    """The model, AdamW and a pool of on-device batches; runs in the cell's worker."""
    torch.manual_seed(ctx.seed)
    model = LstmLanguageModel(options).to(ctx.device)
    tokens = make_tokens(POOL_BATCHES * ctx.batch_size, options.seq_len + 1, options.vocab, ctx.seed)
    pool = [Batch((rows[:, :-1].to(ctx.device),), rows[:, 1:].to(ctx.device)) for rows in tokens.split(ctx.batch_size)]
    position = iter(range(1 << 62))

    def data() -> Batch:
        return pool[next(position) % len(pool)]

    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size * options.seq_len,
        data=data,
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=options.lr),
        loss_fn=TokenCrossEntropy(),
        dataset=TokenDataset(tokens),
        collate=collate,
    )


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name=NAME,
            summary="stacked-LSTM language model on a learnable synthetic token stream (blocks in model.blocks)",
            build=build,
            options=LstmOptions,
            unit="tokens",
            traits=frozenset({"model", "data-path", "recurrent"}),
        )
    ]
