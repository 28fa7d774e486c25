"""The torch-dependent part of :mod:`ampsuite.plugins.workloads.llm` (imported on first use)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import Dataset

from ampsuite import Batch, BuildContext, TrainStep
from ampsuite.plugins.workloads._data import POOL_BATCHES, Shuffled, cycling, device_pool, held_out, real_data
from ampsuite.plugins.workloads._optim import make_optimizer
from ampsuite.plugins.workloads._text import TokenWindows, corpus_notes, prepare_corpus
from ampsuite.plugins.workloads.llm import LlmOptions, Shape, model_flops_per_token, non_embedding_params

__all__ = ["Decoder", "RandomTokens", "build", "prepare", "rope_tables"]


def rope_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotation angles, ``(seq_len, head_dim)`` each (the half-split layout)."""
    inverse = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inverse)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Real arithmetic rather than complex numbers: autocast, torch.compile and FSDP2 all take it as it is.
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + turned * sin).type_as(x)


class Attention(nn.Module):
    """Causal self-attention with grouped-query heads; no biases, as in Llama."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.wq = nn.Linear(shape.dim, shape.heads * shape.head_dim, bias=False)
        self.wk = nn.Linear(shape.dim, shape.kv_heads * shape.head_dim, bias=False)
        self.wv = nn.Linear(shape.dim, shape.kv_heads * shape.head_dim, bias=False)
        self.wo = nn.Linear(shape.heads * shape.head_dim, shape.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.kv_heads != self.heads:
            # Each key/value head serves heads // kv_heads query heads. Repeated by hand: every SDPA kernel
            # (flash, memory-efficient, cuDNN, CPU) takes equal head counts, not all of them enable_gqa.
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm decoder block: attention and feed-forward, each with a residual."""

    def __init__(self, shape: Shape, eps: float) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(shape.dim, eps=eps)
        self.attention = Attention(shape)
        self.ffn_norm = nn.RMSNorm(shape.dim, eps=eps)
        self.feed_forward = FeedForward(shape.dim, shape.ffn)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    """Embedding, blocks (``layers``: the step's ``blocks``), final norm, head.

    ``forward(tokens)`` returns the logits, ``(batch, seq_len, vocab)``; ``forward(tokens, labels)``
    (``loss_chunks`` > 1) returns the mean loss, computed a slice of the sequence at a time.
    """

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, shape: Shape, eps: float = 1e-5, loss_chunks: int = 1) -> None:
        super().__init__()
        self.loss_chunks = loss_chunks
        self.tok_embeddings = nn.Embedding(shape.vocab, shape.dim)
        self.layers = nn.ModuleList(Block(shape, eps) for _ in range(shape.layers))
        self.norm = nn.RMSNorm(shape.dim, eps=eps)
        self.output = nn.Linear(shape.dim, shape.vocab, bias=False)
        cos, sin = rope_tables(shape.head_dim, shape.seq_len, shape.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        if shape.tied:
            self.output.weight = self.tok_embeddings.weight

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        t = tokens.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        if labels is None:
            return self.output(x)
        total = x.new_zeros((), dtype=torch.float32)
        for h, y in zip(x.chunk(self.loss_chunks, dim=1), labels.chunk(self.loss_chunks, dim=1), strict=True):
            # Recomputed in backward: only this slice's logits are ever alive.
            total = total + checkpoint(self._slice_loss, h, y, use_reentrant=False)
        return total / labels.numel()

    def _slice_loss(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.output(h)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="sum")


class RandomTokens(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Seeded random token sequences: inputs and their next tokens (one sequence of ``seq_len + 1`` each)."""

    def __init__(self, count: int, seq_len: int, vocab: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (count, seq_len + 1), generator=gen)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[index]
        return row[:-1], row[1:]


def collate(item: list[torch.Tensor]) -> Batch:
    """``[tokens, next tokens]`` -> a Batch with flat labels (the loss flattens the logits to match)."""
    tokens, labels = item
    return Batch((tokens,), labels.reshape(-1))


def chunked_collate(item: list[torch.Tensor]) -> Batch:
    """``[tokens, next tokens]`` -> a Batch whose model computes the loss itself (``loss_chunks`` > 1)."""
    tokens, labels = item
    return Batch((tokens, labels))


class NextTokenLoss(nn.CrossEntropyLoss):
    """Cross-entropy of ``(batch, seq_len, vocab)`` logits against flat next-token labels.

    The model returns its logits unflattened: a view as the output of an FSDP2-sharded root would lose
    FSDP's pre-backward hook to any in-place op on it.
    """

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return super().forward(logits.flatten(0, -2), target)


class OwnLoss(nn.Module):
    """The loss of a model that returns its loss (``loss_chunks`` > 1): the model's output itself."""

    def forward(self, loss: torch.Tensor, target: object) -> torch.Tensor:
        return loss


def prepare(options: LlmOptions, data_dir: str) -> str:
    """Write the text corpus that ``data = "stdlib"`` reads (once); returns its folder ("" for random tokens)."""
    return str(prepare_corpus(data_dir)) if options.data == "stdlib" else ""


def build(options: LlmOptions, ctx: BuildContext) -> TrainStep:
    shape = options.shape
    torch.manual_seed(ctx.seed)
    model = Decoder(shape, options.norm_eps, options.loss_chunks).to(ctx.device)
    chunked = options.loss_chunks > 1
    batch_collate = chunked_collate if chunked else collate
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor]]
    eval_data = None
    if options.data == "stdlib":
        corpus = prepare_corpus(ctx.data_dir)
        dataset = Shuffled(TokenWindows(corpus, "train", shape.seq_len), ctx.seed)
        data = real_data(dataset, ctx.batch_size, batch_collate, ctx.device)
        eval_data = held_out(TokenWindows(corpus, "eval", shape.seq_len), ctx.batch_size, batch_collate, ctx.device)
    else:
        dataset = RandomTokens(POOL_BATCHES * ctx.batch_size, shape.seq_len, shape.vocab, ctx.seed)
        data = cycling(device_pool(dataset, ctx.batch_size, batch_collate, ctx.device, POOL_BATCHES))
    tokens = ctx.batch_size * shape.seq_len
    step = TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=tokens,
        data=data,
        eval_data=eval_data,
        classifies=not chunked,
        model=model,
        optimizer=make_optimizer(options.optimizer, model.parameters(), options.lr, options.weight_decay),
        loss_fn=OwnLoss() if chunked else NextTokenLoss(),
        dataset=dataset,
        collate=batch_collate,
        blocks="layers",
        model_flops_per_step=float(model_flops_per_token(shape) * tokens),
    )
    step.notes["model_flops"] = {
        "convention": "6 N + 12 L H Q T per token (torchtitan)",
        "non_embedding_params": non_embedding_params(shape),
        "layers": shape.layers,
        "heads": shape.heads,
        "head_dim": shape.head_dim,
        "seq_len": shape.seq_len,
        "tokens_per_step": tokens,
    }
    if options.data == "stdlib":
        step.notes["data"] = corpus_notes(corpus)
    return step
