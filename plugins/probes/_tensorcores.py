"""The torch-dependent part of :mod:`ampsuite.plugins.probes.tensorcores` (imported on first use)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

from ampsuite import ProbeContext

ALIGN = 8
FP8_ALIGN = 16
"""FP8 products (``torch._scaled_mm``) need K and N multiples of 16."""
FLOAT8_DTYPES = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})
aten = torch.ops.aten


def _cpu_sdpa_flops(query: Sequence[int], key: Sequence[int], value: Sequence[int], *args: Any, **kwargs: Any) -> int:
    return int(flop_counter.sdpa_flop_count(query, key, value))


def _cpu_sdpa_backward_flops(
    grad_out: Sequence[int], query: Sequence[int], key: Sequence[int], value: Sequence[int], *args: Any, **kwargs: Any
) -> int:
    return int(flop_counter.sdpa_backward_flop_count(grad_out, query, key, value))


EXTRA_FLOP_FORMULAS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops,
}
"""Shape formulas (``FlopCounterMode(custom_mapping=...)`` form) for attention kernels that
``torch.utils.flop_counter`` does not count: the CPU flash kernel. Same arithmetic as its GPU twins."""


_FORMULAS: dict[Any, Callable[..., int]] = {
    **flop_counter.flop_registry,
    **{k: flop_counter.shape_wrapper(v) for k, v in EXTRA_FLOP_FORMULAS.items()},
}


def _precision_chain(kind: str) -> list[Callable[[], str]]:
    # torch >= 2.9: each setting may be "none", meaning "inherit from the parent"
    b: Any = torch.backends
    if kind == "conv":
        return [lambda: b.cudnn.conv.fp32_precision, lambda: b.cudnn.fp32_precision, lambda: b.fp32_precision]
    return [lambda: b.cuda.matmul.fp32_precision, lambda: b.fp32_precision]


def tf32_enabled(kind: str) -> bool:
    """Whether float32 ``kind`` ("matmul" or "conv") ops on CUDA may use TF32 right now.

    Reads the legacy ``allow_tf32`` flag (what ampsuite's worker and tf32
    technique set); torch refuses that read once legacy and ``fp32_precision``
    settings were mixed, and then the newer setting decides.
    """
    with contextlib.suppress(RuntimeError):
        if kind == "conv":
            return bool(torch.backends.cudnn.allow_tf32)
        return bool(torch.backends.cuda.matmul.allow_tf32)
    for read in _precision_chain(kind):
        with contextlib.suppress(AttributeError, RuntimeError):
            value = read()
            if value in ("tf32", "ieee"):
                return value == "tf32"
    return False


def _is_conv(op: str) -> bool:
    return "conv" in op


def dtype_class(op: str, dtype: torch.dtype, device_type: str) -> str:
    """The precision class in which ``op`` computes: float16, bfloat16, tf32, float32, ...

    Fused attention kernels are reported as float32 for float32 inputs whatever
    the TF32 flags say: they do not consult them (the memory-efficient kernel
    keeps float32 accuracy on its own). Nor do norms, softmax and losses: TF32
    is a mode of matmuls and convolutions only.
    """
    if dtype == torch.float32:
        products = "attention" not in op and op not in PRECISION_FAMILIES
        if device_type == "cuda" and products and tf32_enabled("conv" if _is_conv(op) else "matmul"):
            return "tf32"
        return "float32"
    return str(dtype).removeprefix("torch.")


PRECISION_FAMILIES: dict[str, str] = {
    "native_layer_norm": "layer_norm",
    "native_layer_norm_backward": "layer_norm",
    "_fused_rms_norm": "rms_norm",
    "_fused_rms_norm_backward": "rms_norm",
    "_softmax": "softmax",
    "_softmax_backward_data": "softmax",
    "_safe_softmax": "softmax",
    "native_batch_norm": "batch_norm",
    "native_batch_norm_backward": "batch_norm",
    "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "_native_batch_norm_legit_functional": "batch_norm",
    "_batch_norm_with_update": "batch_norm",
    "_batch_norm_no_update": "batch_norm",
    "batch_norm_backward": "batch_norm",
    "cudnn_batch_norm": "batch_norm",
    "cudnn_batch_norm_backward": "batch_norm",
    "miopen_batch_norm": "batch_norm",
    "miopen_batch_norm_backward": "batch_norm",
    "_log_softmax": "log_softmax",
    "_log_softmax_backward_data": "log_softmax",
    "nll_loss_forward": "nll_loss",
    "nll_loss_backward": "nll_loss",
    "nll_loss2d_forward": "nll_loss",
    "nll_loss2d_backward": "nll_loss",
    "binary_cross_entropy": "binary_cross_entropy",
    "binary_cross_entropy_backward": "binary_cross_entropy",
    "binary_cross_entropy_with_logits": "binary_cross_entropy",
    "mse_loss": "mse_loss",
    "mse_loss_backward": "mse_loss",
}
"""ATen op name -> the family reported in ``precision_ops`` (cross entropy arrives as log_softmax + nll_loss)."""


def _op_name(func: Any) -> str:
    return str(func.overloadpacket.__name__)


def _attention_operands(name: str, args: Sequence[Any]) -> tuple[Any, Any]:
    # forward kernels take (query, key, value, ...); backward kernels (grad_out, query, key, value, ...)
    return (args[1], args[3]) if "backward" in name else (args[0], args[2])


def checked_dims(name: str, args: Sequence[Any]) -> dict[str, int]:
    """The dimensions the alignment rule applies to, by name (empty when the op is not understood)."""
    with contextlib.suppress(IndexError, AttributeError, TypeError):
        if name in ("mm", "bmm", "_scaled_mm"):
            a, b = args[0], args[1]
            return {"M": a.shape[-2], "K": a.shape[-1], "N": b.shape[-1]}
        if name in ("addmm", "baddbmm"):
            a, b = args[1], args[2]
            return {"M": a.shape[-2], "K": a.shape[-1], "N": b.shape[-1]}
        if _is_conv(name):
            if name == "convolution_backward":
                inp, weight, transposed, groups = args[1], args[2], args[7], args[9]
            elif name in ("convolution", "_convolution", "convolution_overrideable"):
                inp, weight, transposed, groups = args[0], args[1], args[6], args[8]
            else:
                inp, weight, transposed, groups = args[0], args[1], False, 1
            c_out = weight.shape[1] * groups if transposed else weight.shape[0]
            dims = {"C_out": int(c_out)}
            if inp.shape[1] > 4:
                dims["C_in"] = int(inp.shape[1])
            return dims
        if "attention" in name:
            query, value = _attention_operands(name, args)
            return {"head_dim": query.shape[-1], "value_head_dim": value.shape[-1]}
    return {}


def _operand(name: str, args: Sequence[Any]) -> torch.Tensor | None:
    """The tensor whose dtype says in which precision the op computes."""
    if name in ("addmm", "baddbmm"):
        return args[1] if isinstance(args[1], torch.Tensor) else None
    if name == "convolution_backward" or ("attention" in name and "backward" in name):
        return args[1] if isinstance(args[1], torch.Tensor) else None
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


OpRecord = tuple[str, tuple[tuple[int, ...], ...], str, str]
"""(op, shapes of the tensor arguments, dtype class, phase): the key ops are deduplicated by."""


class MatmulRecorder(TorchDispatchMode):
    """Records matrix-class and precision-sensitive ops with their shapes, dtype and phase.

    ``phase`` is ``backward`` while the autograd engine runs a graph task (on
    any thread), ``forward`` otherwise. ``flops`` attributes each product's
    FLOPs (flop-counter formulas) to its dtype class.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[OpRecord] = Counter()
        self.dims: dict[OpRecord, dict[str, int]] = {}
        self.precision: Counter[tuple[str, str, str, str]] = Counter()
        self.flops: Counter[str] = Counter()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        name = _op_name(func)
        if packet in _FORMULAS or name in PRECISION_FAMILIES:
            phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            operand = _operand(name, args)
            if operand is not None:
                dtype = dtype_class(name, _payload_dtype(operand), operand.device.type)
                if name in PRECISION_FAMILIES:
                    self.precision[(name, PRECISION_FAMILIES[name], dtype, phase)] += 1
                else:
                    shapes = tuple(_shape_tuple(a) for a in args if isinstance(a, torch.Tensor))
                    key: OpRecord = (f"aten.{name}", shapes, dtype, phase)
                    self.ops[key] += 1
                    self.dims.setdefault(key, checked_dims(name, args))
                    with contextlib.suppress(Exception):  # a formula that cannot read these args counts nothing
                        self.flops[dtype] += int(_FORMULAS[packet](*args, **kwargs, out_val=out))
        return out


def _payload_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype the kernel computes in: an FP8 training tensor subclass (torchao's
    ``Float8TrainingTensor``) advertises its original dtype but carries float8 ``_data``."""
    data = getattr(t, "_data", None)
    if isinstance(data, torch.Tensor) and data.dtype in FLOAT8_DTYPES:
        return data.dtype
    return t.dtype


def _shape_tuple(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def run_eager_step(ctx: ProbeContext, *modes: contextlib.AbstractContextManager[Any]) -> None:
    """One eager forward+backward of the cell's step inside ``modes``, then the gradients are dropped.

    Uses the step's own phase (not the composed, possibly captured callable)
    on the step's next batch; nothing is applied to the weights. A compiled
    model runs as its original module here: the dispatch modes must see the
    eager ops, and on CUDA (torch 2.11, seen on an H200) a compiled module
    called once under such a mode runs eagerly ever after, which silently
    turned torch-compile cells into eager ones.
    """
    forward_backward, _ = ctx.step.phases()
    batch = ctx.step.data()
    compiled = ctx.step.model
    original = getattr(compiled, "_orig_mod", None)  # torch.compile's OptimizedModule keeps the module it wraps
    try:
        if isinstance(original, torch.nn.Module):
            ctx.step.model = original
        with contextlib.ExitStack() as stack:
            # Compiled parts the swap above cannot reach (blocks compiled one by one) run their eager code too.
            stack.enter_context(torch.compiler.set_stance("force_eager"))
            for mode in modes:
                stack.enter_context(mode)
            forward_backward(batch)
    finally:
        ctx.step.model = compiled
        if ctx.step.optimizer is not None:
            ctx.step.optimizer.zero_grad(set_to_none=True)
        elif ctx.step.model is not None:
            ctx.step.model.zero_grad(set_to_none=True)


def _misaligned(dims: dict[str, int], align: int = ALIGN) -> dict[str, int]:
    return {k: v for k, v in dims.items() if v % align}


def _align(dtype: str) -> int:
    return FP8_ALIGN if dtype.startswith("float8") else ALIGN


def _tables(rec: MatmulRecorder) -> Iterator[dict[str, Any]]:
    for key, count in rec.ops.items():
        op, shapes, dtype, phase = key
        dims = rec.dims.get(key, {})
        yield {
            "op": op,
            "shapes": [list(s) for s in shapes],
            "dtype": dtype,
            "count": count,
            "aligned": not _misaligned(dims, _align(dtype)),
            "dims": dims,
            "phase": phase,
        }


def has_tensor_cores(device: torch.device) -> bool:
    """Whether misalignment costs anything here: Tensor Cores are a CUDA GPU's (a CPU has none)."""
    return device.type == "cuda"


def inspect(ctx: ProbeContext) -> None:
    rec = MatmulRecorder()
    try:
        run_eager_step(ctx, rec)
    except Exception as exc:  # a probe must not void the cell's timing; the warning is the evidence
        ctx.warn(f"tensor-cores probe could not trace the step: {type(exc).__name__}: {exc}")
        return
    ops = sorted(_tables(rec), key=lambda r: (r["phase"] != "forward", r["op"], str(r["shapes"]), r["dtype"]))
    misaligned = 0
    # On a CPU the shapes are still recorded, with the count, but warning about Tensor Cores
    # there is noise: 17 warnings on one cell, hundreds in a report, none of them actionable.
    warn = has_tensor_cores(ctx.step.device)
    for row in ops:
        align = _align(row["dtype"])
        bad = _misaligned(row["dims"], align)
        if bad and (row["dtype"] in ("float16", "bfloat16") or align == FP8_ALIGN):
            misaligned += 1
            what = ", ".join(f"{k}={v}" for k, v in bad.items())
            if warn:
                ctx.warn(
                    f"Tensor Cores: {row['op']} {row['shapes']} in {row['dtype']} ({row['phase']}) "
                    f"has {what}, not a multiple of {align}"
                )
    ctx.diagnostics["tensor_cores"] = {"ops": ops, "misaligned": misaligned}
    ctx.diagnostics["precision_ops"] = [
        {"op": f"aten.{name}", "family": family, "dtype": dtype, "phase": phase, "count": count}
        for (name, family, dtype, phase), count in sorted(rec.precision.items(), key=_precision_order)
    ]


def _precision_order(item: tuple[tuple[str, str, str, str], int]) -> tuple[bool, tuple[str, str, str, str]]:
    return item[0][3] != "forward", item[0]
