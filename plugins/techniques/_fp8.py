"""The torch-dependent part of :mod:`ampsuite.plugins.techniques.fp8` (imported on first use)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ampsuite import SkipCell, TrainStep
from ampsuite.plugins.techniques._optimizer import by_name, parameter_names, rebuilt_optimizer
from ampsuite.plugins.techniques.fp8 import ALIGN, INSTALL_HINT, MIN_CAPABILITY, Fp8Options


class SelfAttention(nn.Module):
    """``nn.MultiheadAttention`` (batch first) with its projections as ``nn.Linear`` modules.

    ``nn.MultiheadAttention`` keeps its input projection as a bare parameter and reads its output
    projection's weight without calling the module, so a module swap (torchao's) cannot reach either.
    This module holds the same ``Parameter`` objects in two ``nn.Linear`` layers and computes the
    self-attention the way the original's fast path does; any other call goes through
    ``F.multi_head_attention_forward`` with the same weights.
    """

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        embed = mha.embed_dim
        self.num_heads = mha.num_heads
        self.dropout = mha.dropout
        self.in_proj = nn.Linear(embed, 3 * embed, bias=mha.in_proj_bias is not None, device="meta")
        self.in_proj.weight = mha.in_proj_weight
        if mha.in_proj_bias is not None:
            self.in_proj.bias = mha.in_proj_bias
        self.out_proj = mha.out_proj

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        dropout = self.dropout if self.training else 0.0
        plain = key_padding_mask is None and attn_mask is None and not is_causal and not need_weights
        if plain and query is key is value and query.dim() == 3:
            batch, length, embed = query.shape
            heads = self.in_proj(query).view(batch, length, 3, self.num_heads, embed // self.num_heads)
            q, k, v = heads.permute(2, 0, 3, 1, 4).unbind(0)
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
            return self.out_proj(out.transpose(1, 2).reshape(batch, length, embed)), None
        out, weights = F.multi_head_attention_forward(
            query.transpose(0, 1),
            key.transpose(0, 1),
            value.transpose(0, 1),
            self.out_proj.in_features,
            self.num_heads,
            self.in_proj.weight,
            self.in_proj.bias,
            None,
            None,
            False,
            dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        return out.transpose(0, 1), weights


def _why_not_split(mha: nn.MultiheadAttention) -> str | None:
    if not mha.batch_first:
        return "not batch_first"
    if not mha._qkv_same_embed_dim:
        return "key or value dimension differs from the embedding's"
    if mha.bias_k is not None or mha.add_zero_attn:
        return "has bias_k/bias_v or add_zero_attn"
    return None


def split_attention(model: nn.Module) -> tuple[list[str], list[str]]:
    """Replace each self-attention ``nn.MultiheadAttention`` by :class:`SelfAttention` (names replaced, kept)."""
    replaced: list[str] = []
    kept: list[str] = []
    for name, mha in [(n, m) for n, m in model.named_modules() if isinstance(m, nn.MultiheadAttention)]:
        why = "it is the model itself" if not name else _why_not_split(mha)
        if why is not None:
            kept.append(f"{name}: {why}")
            continue
        model.set_submodule(name, SelfAttention(mha))
        replaced.append(name)
    return replaced, kept


def linear_plan(
    model: nn.Module, keep_last: bool = True, filter_fqns: Sequence[str] = (), min_features: int = 0
) -> tuple[list[str], list[str]]:
    """The ``nn.Linear`` layers that become FP8 (by name) and those kept in high precision (``"name: why"``)."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    # nn.MultiheadAttention reads its out_proj's weight in F.multi_head_attention_forward and never
    # calls the module: swapping it would change nothing but the count.
    mha = {
        f"{name}.out_proj" if name else "out_proj"
        for name, m in model.named_modules()
        if isinstance(m, nn.MultiheadAttention)
    }
    converted: list[str] = []
    kept: list[str] = []
    for i, (name, m) in enumerate(linears):
        bad = [f"{d} {getattr(m, d)}" for d in ("in_features", "out_features") if getattr(m, d) % ALIGN]
        if name in mha:
            kept.append(f"{name}: nn.MultiheadAttention's output projection (used by weight, not called)")
        elif bad:
            kept.append(f"{name}: {', '.join(bad)} not a multiple of {ALIGN}")
        elif any(part in name for part in filter_fqns):
            kept.append(f"{name}: named in filter_fqns")
        elif min(m.in_features, m.out_features) < min_features:
            kept.append(f"{name}: {m.in_features} x {m.out_features} under min_features {min_features}")
        elif keep_last and i == len(linears) - 1:
            kept.append(f"{name}: the last layer (keep_last)")
        else:
            converted.append(name)
    return converted, kept


def _precompute_scales_after_update(step: TrainStep, precompute: Callable[[nn.Module], None]) -> None:
    """After each optimizer step, every FP8-gathered weight's scale for the next step, in one pass (torchao's
    ``precompute_float8_dynamic_scale_for_fsdp``; the model is read when called: fsdp2 shards it after this)."""
    _, update = step.phases()

    def update_then_scales() -> None:
        update()
        if step.model is not None:
            precompute(step.model)

    step.update = update_then_scales


def apply(step: TrainStep, options: Fp8Options) -> TrainStep:
    if step.model is None:
        raise SkipCell("fp8 needs a workload with a model (this step has its own phases)")
    if step.device.type != "cuda":
        raise SkipCell(f"fp8 needs a CUDA GPU; this cell is on {step.device.type}")
    capability = torch.cuda.get_device_capability(step.device)
    if capability < MIN_CAPABILITY:
        raise SkipCell(
            f"fp8 needs FP8 Tensor Cores (compute capability >= 8.9); "
            f"{torch.cuda.get_device_name(step.device)} has {capability[0]}.{capability[1]}"
        )
    try:
        torchao = importlib.import_module("torchao")
        float8 = importlib.import_module("torchao.float8")
    except ImportError as exc:
        raise SkipCell(f"fp8 needs torchao ({INSTALL_HINT}): {exc}") from exc
    split, unsplit = split_attention(step.model) if options.attention else ([], [])
    converted, kept = linear_plan(step.model, options.keep_last, options.filter_fqns, options.min_features)
    kept += [f"{k} (nn.MultiheadAttention left whole)" for k in unsplit]
    if not converted:
        raise SkipCell(f"fp8: no nn.Linear layer of this model can run in FP8 (kept: {'; '.join(kept) or 'none'})")
    chosen = set(converted)
    config = float8.Float8LinearConfig.from_recipe_name(options.recipe)
    if options.fsdp_all_gather:
        config = dataclasses.replace(config, enable_fsdp_float8_all_gather=True)
        _precompute_scales_after_update(step, float8.precompute_float8_dynamic_scale_for_fsdp)
    names = parameter_names(step.model)
    float8.convert_to_float8_training(step.model, module_filter_fn=lambda module, fqn: fqn in chosen, config=config)
    if step.optimizer is not None and parameter_names(step.model).keys() != names.keys():
        # The FP8 all-gather wraps each converted weight in a new Parameter.
        step.optimizer = rebuilt_optimizer(step.optimizer, by_name(step.model, names))
    step.notes["fp8"] = {
        "recipe": options.recipe,
        "converted_linears": len(converted),
        "attention_modules_split": len(split),
        "kept_high_precision": kept,
        "torchao": str(getattr(torchao, "__version__", "unknown")),
        "fsdp_float8_all_gather": options.fsdp_all_gather,
        "bf16_reference": "the same workload, options, batch and combination without fp8",
    }
    return step
