"""The torch-dependent part of :mod:`ampsuite.plugins.workloads.transformer` (imported on first use)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ampsuite import Batch, BuildContext, TrainStep
from ampsuite.plugins.workloads._data import POOL_BATCHES, cycling, device_pool
from ampsuite.plugins.workloads._optim import trained_step
from ampsuite.plugins.workloads.transformer import BertOptions


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
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    return trained_step(
        ctx, options, model, data=cycling(pool), loss_fn=loss_fn, dataset=dataset, collate=collate, blocks="layers"
    )
