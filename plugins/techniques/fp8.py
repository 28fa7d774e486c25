"""FP8 training: torchao's float8 linear layers, and each FP8 cell held against its BF16 twin.

``fp8`` swaps the step's ``nn.Linear`` layers for torchao's ``Float8Linear``
(``torchao.float8.convert_to_float8_training`` with
``Float8LinearConfig.from_recipe_name(recipe)``). The weights stay float32
master copies, the same ``Parameter`` objects, so the optimizer (plain or
fused) is untouched; every forward casts input and weight to float8 with
dynamic scales and multiplies them with ``torch._scaled_mm``, and backward does
the same for the two gradient products:

* ``tensorwise`` (torchao's default, fastest): one scale per tensor; inputs
  and weights in e4m3, output gradients in e5m2.
* ``rowwise``: a scale per row (power-of-two scales), e4m3 everywhere.
* ``rowwise_with_gw_hp``: rowwise, but the weight-gradient product stays in
  high precision (most accurate).

Which layers stay in higher precision, besides those named in ``filter_fqns``
(torchtitan's list: a layer whose name contains one of them) and those with
``in_features`` or ``out_features`` under ``min_features`` (torchao measured
small products to lose more to FP8's casts than they gain, e.g. below 1024
inputs or 4096 outputs for tensorwise on an H100): the projections of an
``nn.MultiheadAttention`` (ViT's: the attention function reads their weights and
never calls a module, so swapping one would convert nothing) unless
``attention = true``, every ``nn.Linear`` whose
``in_features`` or ``out_features`` is not a multiple of 16 (``_scaled_mm``
refuses them: BERT's 30522-word decoder, ViT's 1000-class head) and, with
``keep_last`` (default), the model's last ``nn.Linear`` (the output head,
where FP8's error would land directly on the logits). Embeddings, norms,
convolutions (ViT's patch embedding), attention's batched products and the
loss are not ``nn.Linear`` and run as before, under autocast.

``attention = true`` replaces each ``nn.MultiheadAttention`` used for
self-attention (``batch_first``, one embedding size, no ``bias_k``/``bias_v``,
no zero attention) by :class:`~ampsuite.plugins.techniques._fp8.SelfAttention`: the
same parameters (the very ``Parameter`` objects, so the optimizer is
untouched), its input projection an ``nn.Linear`` over ``in_proj_weight``, the
product ``scaled_dot_product_attention`` as in the module's own fast path.
Calls it does not cover (masks, ``need_weights``, distinct key and value) go
through ``F.multi_head_attention_forward`` with the same weights, so the model
computes what it did. ViT-B/16 then converts 48 linears instead of 24: all of
its linear products but the head. The record's
``notes.fp8`` lists what was converted and what was kept.

Composition: ``fp8`` requires ``amp-bf16`` (torchao's float8 training is
built for a bfloat16 autocast model: the rowwise kernels produce bfloat16,
and everything that is not converted should run in bfloat16 like the BF16
cell it is compared with); it conflicts with ``amp-fp16`` (float16 outputs
are not what the recipes are built for) and with ``cuda-graphs`` (not
verified under capture: the dynamic scales are computed on the device, but
this plugin does not claim what it has not seen; use ``torch-compile``, which
torchao recommends for speed: it fuses the amax/scale/cast kernels). Order 35:
after ``amp-bf16`` (30), before the fused optimizer (50) and ``torch-compile``
(80), which then compiles the converted model.

``fsdp_all_gather`` (tensorwise, with ``fsdp2``): FSDP2 all-gathers the
converted weights already cast to float8, half the bytes of bf16, through
torchao's ``enable_fsdp_float8_all_gather``; after each optimizer step
``precompute_float8_dynamic_scale_for_fsdp`` computes every weight's scale in
one pass instead of one all-reduce per weight.

It is decided at expansion (so ``--dry-run`` says it) that a cell needs
torchao (``pip install 'ampsuite[fp8]'``) and a CUDA device; the compute
capability (FP8 Tensor Cores: 8.9, Ada, and newer) is checked when applied.

The report section holds every FP8 cell against its BF16 reference: the cell
with the same workload, options and batch whose combination is the FP8
cell's minus ``fp8`` (an FP8 GEMM cell: the same GEMM with ``dtype =
"bfloat16"``), giving the speedup and the loss difference. The pure function
behind it, :func:`bf16_comparisons`, lives here rather than in
``suite/analysis``: a plugin may import only ``suite``'s public API, and the
section is this plugin's.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ampsuite import CheckContext, ReportSection, Status, Technique, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1

__all__ = ["RECIPES", "Fp8Options", "bf16_comparisons", "check"]

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
ALIGN = 16
MIN_CAPABILITY = (8, 9)
INSTALL_HINT = "pip install 'ampsuite[fp8]'"
FP8_GEMM_DTYPES = ("float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class Fp8Options:
    recipe: Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"] = field(
        default="tensorwise",
        metadata={"help": "torchao float8 recipe: tensorwise (fastest), rowwise, rowwise_with_gw_hp (most accurate)"},
    )
    keep_last: bool = field(
        default=True, metadata={"help": "keep the model's last nn.Linear (the output head) in high precision"}
    )
    attention: bool = field(
        default=False,
        metadata={
            "help": "also convert nn.MultiheadAttention's input and output projections (the module becomes "
            "an equivalent one whose projections are nn.Linear layers over the same parameters)"
        },
    )
    filter_fqns: list[str] = field(
        default_factory=list,
        metadata={"help": "keep in high precision every nn.Linear whose name contains one of these (torchtitan)"},
    )
    min_features: int = field(
        default=0,
        metadata={"help": "convert only linears whose in_features and out_features are both at least this", "ge": 0},
    )
    fsdp_all_gather: bool = field(
        default=False,
        metadata={"help": "with fsdp2 and tensorwise: all-gather weights in FP8, their scales computed once per step"},
    )

    def __post_init__(self) -> None:
        if self.fsdp_all_gather and self.recipe != "tensorwise":
            raise ValueError(f"fsdp_all_gather takes the tensorwise recipe (torchao's), got {self.recipe!r}")


def torchao_missing() -> bool:
    """Whether torchao cannot be imported (looked up without importing it)."""
    return importlib.util.find_spec("torchao") is None


def check(ctx: CheckContext) -> str | None:
    if torchao_missing():
        return f"needs torchao, which is not installed: {INSTALL_HINT}"
    if ctx.device_type != "cuda":
        return f"needs a CUDA GPU of compute capability >= 8.9 (FP8 Tensor Cores); this run is on {ctx.device_type}"
    if ctx.technique_options["fp8"].fsdp_all_gather and "fsdp2" not in ctx.techniques:
        return "fsdp_all_gather needs fsdp2 in the combination (it changes how FSDP2 all-gathers the weights)"
    return None


# ---------------------------------------------------------------------------
# FP8 against BF16 (pure: results documents in, rows out)
# ---------------------------------------------------------------------------


def _names(record: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(t.get("name")) for t in record.get("techniques") or [] if isinstance(t, Mapping))


def _technique_options(record: Mapping[str, Any]) -> dict[str, Any]:
    return {str(t.get("name")): t.get("options") for t in record.get("techniques") or [] if isinstance(t, Mapping)}


def _key(record: Mapping[str, Any], options: Mapping[str, Any], names: Sequence[str], tech: Mapping[str, Any]) -> str:
    workload = record.get("workload") or {}
    return json.dumps(
        [
            workload.get("id"),
            workload.get("plugin"),
            options,
            record.get("batch_size"),
            record.get("world_size", 1),
            sorted(names),
            {n: tech.get(n) for n in sorted(names)},
        ],
        sort_keys=True,
        default=str,
    )


def _reference_key(record: Mapping[str, Any]) -> str | None:
    """The key of the BF16 twin of an FP8 cell, or None for a cell that is not FP8."""
    workload = record.get("workload") or {}
    options = dict(workload.get("options") or {})
    names = list(_names(record))
    tech = _technique_options(record)
    if "fp8" in names:
        names.remove("fp8")
        tech.pop("fp8", None)
    elif options.get("dtype") in FP8_GEMM_DTYPES and workload.get("plugin") == "gemm":
        options["dtype"] = "bfloat16"
    else:
        return None
    return _key(record, options, names, tech)


def _median(record: Mapping[str, Any]) -> float | None:
    step_time = (record.get("metrics") or {}).get("step_time") or {}
    value = step_time.get("median")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _loss(record: Mapping[str, Any]) -> float | None:
    numerics = record.get("numerics") or {}
    value = numerics.get("loss_at_n")
    if not isinstance(value, int | float):
        losses = numerics.get("losses") or []
        value = losses[-1] if losses else None
    return float(value) if isinstance(value, int | float) else None


def bf16_comparisons(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every FP8 cell of a results document against its BF16 reference.

    The reference has the same workload, options, batch, world size and
    techniques (with their options) minus ``fp8``; for an FP8 GEMM cell, the
    same GEMM with ``dtype = "bfloat16"``. Rows: ``id``, ``reference_id``
    (None when the run has no such cell), ``recipe``, ``status``,
    ``speedup`` (reference median / FP8 median), ``loss``, ``reference_loss``,
    ``loss_diff`` (FP8 - BF16 after the numerics steps) and ``loss_rel_diff``
    (its size relative to the BF16 loss); figures are None unless both passed.
    """
    cells = [c for c in doc.get("cells") or [] if isinstance(c, Mapping)]
    by_key: dict[str, Mapping[str, Any]] = {}
    for cell in cells:
        tech = _technique_options(cell)
        options = dict((cell.get("workload") or {}).get("options") or {})
        by_key.setdefault(_key(cell, options, list(_names(cell)), tech), cell)
    rows: list[dict[str, Any]] = []
    for cell in cells:
        key = _reference_key(cell)
        if key is None:
            continue
        ref = by_key.get(key)
        both = ref is not None and cell.get("status") == Status.PASSED and ref.get("status") == Status.PASSED
        own_t, ref_t = _median(cell), None if ref is None else _median(ref)
        own_l, ref_l = _loss(cell), None if ref is None else _loss(ref)
        fp8_notes = (cell.get("notes") or {}).get("fp8") or {}
        options = (cell.get("workload") or {}).get("options") or {}
        diff = own_l - ref_l if both and own_l is not None and ref_l is not None else None
        rows.append(
            {
                "id": cell.get("id"),
                "reference_id": None if ref is None else ref.get("id"),
                "recipe": fp8_notes.get("recipe") or options.get("dtype"),
                "status": str(cell.get("status")),
                "speedup": ref_t / own_t if both and own_t and ref_t else None,
                "loss": own_l,
                "reference_loss": ref_l,
                "loss_diff": diff,
                "loss_rel_diff": abs(diff) / abs(ref_l) if diff is not None and ref_l else None,
                "converted_linears": fp8_notes.get("converted_linears"),
                "kept_high_precision": fp8_notes.get("kept_high_precision"),
            }
        )
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "—" if not isinstance(value, int | float) else format(value, spec)


@hookimpl
def ampsuite_report_sections(results: Sequence[Mapping[str, Any]]) -> Iterable[ReportSection]:
    rows = [row for doc in results for row in bf16_comparisons(doc)]
    if not rows:
        return []
    head = ["FP8 cell", "BF16 reference", "recipe", "speedup vs BF16", "loss - BF16 loss", "relative", "FP8 linears"]
    body = []
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cols = [
            str(r["id"]),
            str(r["reference_id"] or "not in this run"),
            str(r["recipe"] or ""),
            _fmt(r["speedup"], ".2f") + ("\u00d7" if r["speedup"] is not None else ""),
            _fmt(r["loss_diff"], "+.4g"),
            _fmt(r["loss_rel_diff"], ".2%"),
            _fmt(r["converted_linears"], "d"),
        ]
        if r["status"] != Status.PASSED:
            cols[3] = r["status"]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cols) + "</tr>")
        md.append("| " + " | ".join(c.replace("|", "\\|") for c in cols) + " |")
    table = (
        "<p>Each FP8 cell against the same cell in BF16 (its combination without <code>fp8</code>; "
        "an FP8 GEMM against the bfloat16 GEMM). Speedup = BF16 median / FP8 median.</p>"
        "<table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )
    return [ReportSection(title="FP8 against BF16", html=table, markdown="\n".join(md), anchor="fp8")]


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="fp8",
            summary="torchao float8 training: nn.Linear layers (dims multiple of 16) in FP8 via torch._scaled_mm",
            apply=lazy("ampsuite.plugins.techniques._fp8:apply"),
            options=Fp8Options,
            order=35,
            requires=frozenset({"amp-bf16"}),
            conflicts=frozenset({"amp-fp16", "cuda-graphs"}),
            check=check,
            requires_traits=frozenset({"model"}),
        )
    ]
