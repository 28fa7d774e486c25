"""The device's own ceilings: dense matmul TFLOP/s per dtype class, and copy bandwidth.

MFU is only as honest as its denominator. Datasheet peaks are never reached
(an H200's 989 dense bf16 TFLOP/s measure as roughly 800), so ampsuite
measures the peak it divides by, on the device at hand, and says so.

* CUDA: ``torch.mm`` on 8192^3 operands for float32 (TF32 off), tf32 (TF32
  on), float16 and bfloat16, timed with CUDA events over several products per
  repetition, best repetition after a warm-up. Where the GPU has FP8 Tensor
  Cores (compute capability >= 8.9), ``float8_e4m3fn`` (e4m3 x e4m3) and
  ``float8_e5m2`` (e5m2 x e4m3, the gradient product of FP8 training) through
  ``torch._scaled_mm`` with per-tensor float32 scales, bfloat16 out and the
  second operand column-major, the faster of ``use_fast_accum`` off and on:
  the keys are the dtype class the tensor-cores probe reports for an FP8
  product (its left operand's dtype), so MFU finds them. Copy bandwidth is a 1 GiB
  device-to-device ``copy_``, counted as bytes read + bytes written.
* CPU: float32 and bfloat16 products at 512^3 and a 64 MiB copy, timed with
  ``perf_counter``, all within a couple of seconds.

Results are cached as JSON under ``$AMPSUITE_CACHE_DIR`` (default
``~/.cache/ampsuite``), one file per device name and torch version (and thread
count on CPU), since a new driver or torch may change the kernels.

TF32 is toggled with the legacy ``allow_tf32`` flag, as the worker and the tf32
technique do (torch refuses to read the TF32 state once the legacy and new
``fp32_precision`` APIs are mixed), and restored afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ampsuite.results.atomic import write_json_atomic

__all__ = ["CACHE_ENV", "CACHE_FORMAT", "cache_dir", "cache_file", "device_name", "measure_peaks", "mfu"]

CACHE_ENV = "AMPSUITE_CACHE_DIR"
CACHE_FORMAT = 2
"""Bumped when the method changes, so older cached figures are measured again (2: FP8 peaks)."""

CUDA_MATMUL = 8192
CUDA_COPY_BYTES = 1 << 30
CPU_MATMUL = 512
CPU_COPY_BYTES = 64 << 20
CPU_BUDGET_S = 0.3
"""Seconds of timed calls per CPU figure (at least 3 calls each)."""

_DTYPES = {"float32": torch.float32, "tf32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
FP8_MIN_CAPABILITY = (8, 9)
_FP8_LEFT = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
"""FP8 peak classes -> the left operand's dtype (the right one is float8_e4m3fn: cuBLAS has no e5m2 x e5m2)."""


def cache_dir() -> Path:
    """Where measured peaks are cached: ``$AMPSUITE_CACHE_DIR`` or ``~/.cache/ampsuite``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "ampsuite"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def device_name(device_type: str) -> str:
    """The name the peaks are cached under; on CPU it includes the thread count torch uses."""
    if device_type == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    if device_type == "cpu":
        return f"{_cpu_model()} ({torch.get_num_threads()} threads)"
    raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")


def cache_file(device_type: str) -> Path:
    """The file the current device's peaks are cached in (whether it exists yet or not)."""
    return _cache_file(device_name(device_type))


def _cache_file(name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{name}-torch-{torch.__version__}").strip("-")
    return cache_dir() / f"peaks-{slug}.json"


def _load(path: Path, name: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
        return None
    if doc.get("device") != name or doc.get("torch") != torch.__version__:
        return None
    if not isinstance(doc.get("matmul_tflops"), dict) or not isinstance(doc.get("copy_gbps"), int | float):
        return None
    return doc


def _store(path: Path, doc: dict[str, Any]) -> None:
    write_json_atomic(path, doc, indent=2)


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _product(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> Callable[[], Any]:
    return lambda: torch.mm(a, b, out=out)


def _scaled_product(left: torch.dtype, n: int, gen: torch.Generator, fast_accum: bool) -> Callable[[], Any]:
    a = torch.randn(n, n, device="cuda", generator=gen).to(left)
    b = torch.randn(n, n, device="cuda", generator=gen).to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


def _fp8_supported() -> bool:
    return torch.cuda.get_device_capability() >= FP8_MIN_CAPABILITY and hasattr(torch, "_scaled_mm")


def _copy(src: torch.Tensor, dst: torch.Tensor) -> Callable[[], Any]:
    return lambda: dst.copy_(src)


def _best_cuda_seconds(fn: Callable[[], Any], iters: int, reps: int, warmup: int = 3) -> float:
    """Best per-call time over ``reps`` repetitions of ``iters`` back-to-back calls, by CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000.0 / iters)
    return best


def _best_cpu_seconds(fn: Callable[[], Any], budget_s: float, min_reps: int = 3) -> float:
    """Best single-call time after one warm-up call, for at least ``min_reps`` calls or ``budget_s`` seconds."""
    fn()
    best, spent, reps = float("inf"), 0.0, 0
    while reps < min_reps or spent < budget_s:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
        if reps >= 50:
            break
    return best


def _measure_cuda() -> tuple[dict[str, float], float, dict[str, Any]]:
    n = CUDA_MATMUL
    gen = torch.Generator(device="cuda").manual_seed(0)
    tflops: dict[str, float] = {}
    for cls in ("float32", "tf32", "float16", "bfloat16"):
        a = torch.randn(n, n, device="cuda", generator=gen).to(_DTYPES[cls])
        b = torch.randn(n, n, device="cuda", generator=gen).to(_DTYPES[cls])
        out = torch.empty(n, n, device="cuda", dtype=_DTYPES[cls])
        with _tf32(cls == "tf32"):
            iters = 5 if cls == "float32" else 20
            seconds = _best_cuda_seconds(_product(a, b, out), iters=iters, reps=5)
        tflops[cls] = 2 * n**3 / seconds / 1e12
        del a, b, out
    if _fp8_supported():
        for cls, left in _FP8_LEFT.items():
            seconds = min(
                _best_cuda_seconds(_scaled_product(left, n, gen, fast_accum), iters=20, reps=5)
                for fast_accum in (False, True)
            )
            tflops[cls] = 2 * n**3 / seconds / 1e12
    src = torch.empty(CUDA_COPY_BYTES // 4, device="cuda", dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _best_cuda_seconds(_copy(src, dst), iters=20, reps=5)
    del src, dst
    torch.cuda.empty_cache()
    method = {"matmul": f"torch.mm {n}^3, best of 5 x (5-20 products), CUDA events", "copy_bytes": CUDA_COPY_BYTES}
    if _fp8_supported():
        method["fp8"] = "torch._scaled_mm, per-tensor scales, bf16 out, best of use_fast_accum off/on"
    return tflops, 2 * CUDA_COPY_BYTES / seconds / 1e9, method


def _measure_cpu() -> tuple[dict[str, float], float, dict[str, Any]]:
    n = CPU_MATMUL
    gen = torch.Generator().manual_seed(0)
    tflops: dict[str, float] = {}
    for cls in ("float32", "bfloat16"):
        a = torch.randn(n, n, generator=gen).to(_DTYPES[cls])
        b = torch.randn(n, n, generator=gen).to(_DTYPES[cls])
        out = torch.empty(n, n, dtype=_DTYPES[cls])
        seconds = _best_cpu_seconds(_product(a, b, out), budget_s=CPU_BUDGET_S)
        tflops[cls] = 2 * n**3 / seconds / 1e12
    src = torch.ones(CPU_COPY_BYTES // 4)
    dst = torch.empty_like(src)
    seconds = _best_cpu_seconds(_copy(src, dst), budget_s=CPU_BUDGET_S / 2)
    method = {"matmul": f"torch.mm {n}^3, best single product, perf_counter", "copy_bytes": CPU_COPY_BYTES}
    return tflops, 2 * CPU_COPY_BYTES / seconds / 1e9, method


def measure_peaks(device_type: str, *, refresh: bool = False) -> dict[str, Any]:
    """Measured dense matmul TFLOP/s per dtype class and copy bandwidth of the current device.

    :param device_type: ``"cpu"`` or ``"cuda"`` (the current CUDA device).
    :param refresh: measure even when a cached figure exists.
    :return: ``{"device", "torch", "matmul_tflops": {class: TFLOP/s}, "copy_gbps": GB/s
        (bytes read + written, 1e9 per GB), "method": {...}, "cached": bool}``; classes are
        float32, tf32, float16, bfloat16 on CUDA (and float8_e4m3fn, float8_e5m2 at compute
        capability >= 8.9) and float32, bfloat16 on CPU.
    :raises ValueError: for another device type; RuntimeError when CUDA is asked for and absent.
    """
    if device_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("measure_peaks('cuda'): CUDA is not available")
    name = device_name(device_type)
    path = _cache_file(name)
    if not refresh:
        cached = _load(path, name)
        if cached is not None:
            return {**cached, "cached": True}
    tflops, copy_gbps, method = _measure_cuda() if device_type == "cuda" else _measure_cpu()
    doc: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "device": name,
        "torch": torch.__version__,
        "matmul_tflops": tflops,
        "copy_gbps": copy_gbps,
        "method": method,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with contextlib.suppress(OSError):  # an unwritable cache costs a re-measurement next time, nothing else
        _store(path, doc)
    return {**doc, "cached": False}


def mfu(tflops: float | None, matmul_dtype: str | None, peaks: dict[str, Any] | None) -> float | None:
    """Model FLOPs utilisation: achieved TFLOP/s over the measured peak of the step's matmul dtype class.

    None when any part is missing (no FLOP count, a dtype class without a
    measured peak, e.g. tf32 on CPU, or no peaks at all).
    """
    if tflops is None or matmul_dtype is None or not peaks:
        return None
    table = peaks.get("matmul_tflops")
    peak = table.get(matmul_dtype) if isinstance(table, dict) else None
    if not isinstance(peak, int | float) or not peak > 0:
        return None
    return float(tflops) / float(peak)
