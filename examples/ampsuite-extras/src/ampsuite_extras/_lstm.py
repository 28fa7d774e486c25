"""The torch-dependent part of :mod:`ampsuite_extras.lstm` (imported when a cell builds or applies it)."""

from __future__ import annotations

import torch
from ampsuite import Batch, BuildContext, TrainStep
from torch import nn
from torch.nn import functional as F

from ampsuite_extras.lstm import FOLLOW_PROBABILITY, POOL_BATCHES, LstmOptions


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
    """A DataLoader batch (inputs, targets) as a CPU :class:`ampsuite.Batch`."""
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
