"""A Llama-style decoder-only language model on random token ids: the workload of LLM training recipes.

The model (``_llm.py``) is the Llama 3 block as torchtitan writes it: a token
embedding, ``layers`` blocks of RMSNorm, causal self-attention with rotary
position embeddings (RoPE) and grouped-query heads (``kv_heads`` key/value
heads shared by ``heads`` query heads) through
``F.scaled_dot_product_attention``, RMSNorm, a SwiGLU feed-forward of width
``ffn``, then a final RMSNorm and the output head (untied from the embedding
unless ``tied``). The loss is next-token cross-entropy over every position.

Presets name whole shapes (``preset``); any dimension option given replaces the
preset's value (an option left unset is the preset's):

    preset      dim   layers heads kv_heads  ffn    vocab   seq_len  parameters
    tiny        64    2      4     2         176    256     32       0.13M (a CPU test)
    125m        768   12     12    12        2048   32768   2048     135M
    0.9b        2048  16     16    8         5632   32768   2048     0.89B
    llama3-8b   4096  32     32    8         14336  128256  8192     8.0B (rope_theta 500000)

``data = "stdlib"`` trains on real text instead: byte tokens of the Python
standard library's own sources, with a held-out split that quality suites
evaluate (``_text.py``, docs/quality.md).

Throughput is in tokens (``batch_size * seq_len`` a step); a data-parallel
cell also reports tokens/s per GPU. The step declares its model FLOPs by
torchtitan's convention (``docs/llm.md``): ``6 N + 12 L H Q T`` per token,
N the parameters but the token embedding's, L layers, H query heads, Q the
head size, T the sequence length; the analysis turns it into MFU against the
GPU's published bf16 peak and ampsuite's measured one.

``loss_chunks`` > 1 computes the head and the cross-entropy a slice of the
sequence at a time, each slice recomputed in backward, so the float32 logits
(``batch * seq_len * vocab * 4`` bytes: 2 GiB at batch 8, seq 2048, vocab
32768) never exist all at once. The model then takes the labels as a second
input and returns the loss itself; the head stays inside the model, where
FSDP2 shards it and FP8 sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ampsuite import Workload, hookimpl, lazy
from ampsuite.plugins.workloads import fields
from ampsuite.plugins.workloads.optimizers import OptimizerName, check_optimizer

__all__ = ["PRESETS", "LlmOptions", "Shape", "model_flops_per_token"]


@dataclass(frozen=True)
class Shape:
    """Every dimension of one decoder."""

    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    rope_theta: float = 10000.0
    tied: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


PRESETS: dict[str, Shape] = {
    "tiny": Shape(dim=64, layers=2, heads=4, kv_heads=2, ffn=176, vocab=256, seq_len=32),
    "125m": Shape(dim=768, layers=12, heads=12, kv_heads=12, ffn=2048, vocab=32768, seq_len=2048),
    "0.9b": Shape(dim=2048, layers=16, heads=16, kv_heads=8, ffn=5632, vocab=32768, seq_len=2048),
    "llama3-8b": Shape(
        dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq_len=8192, rope_theta=500000.0
    ),
}

PresetName = Literal["tiny", "125m", "0.9b", "llama3-8b"]
BYTES = 256
"""Token ids of ``data = "stdlib"``: one per byte."""
_FROM_PRESET = " (unset: the preset's)"


def _dimension(help_text: str) -> int | None:
    return field(default=None, metadata={"help": help_text + _FROM_PRESET, "ge": 1})


@dataclass(frozen=True)
class LlmOptions:
    preset: PresetName = field(default="125m", metadata={"help": "named shape: " + ", ".join(PRESETS)})
    dim: int | None = _dimension("model width")
    layers: int | None = _dimension("decoder blocks")
    heads: int | None = _dimension("query heads (must divide dim)")
    kv_heads: int | None = _dimension("key/value heads (grouped-query attention; must divide heads)")
    ffn: int | None = _dimension("SwiGLU hidden width")
    vocab: int | None = field(default=None, metadata={"help": "vocabulary size" + _FROM_PRESET, "ge": 2})
    seq_len: int | None = _dimension("tokens per sequence")
    rope_theta: float | None = field(default=None, metadata={"help": "RoPE base" + _FROM_PRESET, "gt": 0})
    tied: bool | None = field(
        default=None, metadata={"help": "tie the output head to the token embedding" + _FROM_PRESET}
    )
    norm_eps: float = field(default=1e-5, metadata={"help": "RMSNorm epsilon", "gt": 0})
    loss_chunks: int = field(
        default=1,
        metadata={
            "help": "compute head and cross-entropy over this many slices of the sequence, each recomputed in "
            "backward (1: all at once)",
            "ge": 1,
        },
    )
    optimizer: OptimizerName = fields.optimizer("adamw")
    lr: float = fields.learning_rate(3e-4)
    weight_decay: float = fields.weight_decay(0.1)
    data: Literal["random", "stdlib"] = field(
        default="random",
        metadata={
            "help": "random: seeded random token ids; stdlib: byte tokens of Python's own .py sources, shuffled "
            "by the seed, with a held-out split (docs/quality.md; needs vocab >= 256)"
        },
    )

    def __post_init__(self) -> None:
        shape = self.shape
        if self.data == "stdlib" and shape.vocab < BYTES:
            raise ValueError(
                f"data = 'stdlib' feeds byte tokens (ids 0-255): vocab must be >= {BYTES}, got {shape.vocab}"
            )
        fields.must_divide("heads", shape.heads, "dim", shape.dim)
        fields.must_divide("kv_heads", shape.kv_heads, "heads", shape.heads)
        if shape.head_dim % 2:
            raise ValueError(f"dim / heads ({shape.head_dim}) must be even: RoPE rotates pairs of features")
        fields.must_divide("loss_chunks", self.loss_chunks, "seq_len", shape.seq_len)

    @property
    def shape(self) -> Shape:
        """The preset's shape with every option given on top."""
        base = PRESETS[self.preset]
        given = {
            name: getattr(self, name)
            for name in ("dim", "layers", "heads", "kv_heads", "ffn", "vocab", "seq_len", "rope_theta", "tied")
            if getattr(self, name) is not None
        }
        return Shape(**{**base.__dict__, **given})


def non_embedding_params(shape: Shape) -> int:
    """Parameters but the token embedding's (torchtitan's N): blocks, final norm, and the head unless tied."""
    attention = shape.dim * shape.dim * 2 + 2 * shape.dim * shape.kv_heads * shape.head_dim
    block = attention + 3 * shape.dim * shape.ffn + 2 * shape.dim
    head = 0 if shape.tied else shape.dim * shape.vocab
    return shape.layers * block + shape.dim + head


def model_flops_per_token(shape: Shape) -> int:
    """``6 N + 12 L H Q T``: a training step's FLOPs per token by torchtitan's convention (docs/llm.md).

    6 N: forward (2) and backward (4) of every product with a weight; 12 L H Q T: per layer, ``Q K^T`` and
    the product with V, forward and backward, over the whole causal sequence (the mask's skipped half
    counted, as the convention does; a fused kernel's recomputation in backward not counted).
    """
    return 6 * non_embedding_params(shape) + 12 * shape.layers * shape.heads * shape.head_dim * shape.seq_len


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [
        Workload(
            name="llm",
            summary="Llama-style decoder (RoPE, grouped-query SDPA, RMSNorm, SwiGLU) on random tokens; AdamW",
            build=lazy("ampsuite.plugins.workloads._llm:build"),
            options=LlmOptions,
            unit="tokens",
            traits=frozenset({"model", "data-path", "blocks"}),
            check=check_optimizer,
            prepare=lazy("ampsuite.plugins.workloads._llm:prepare"),
        )
    ]
