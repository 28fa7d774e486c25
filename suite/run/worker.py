"""What runs inside one cell's process: build, apply, numerics, probes, timing.

:func:`run_cell` returns the measured parts of the cell's record; any
exception escapes to :func:`main`, which turns it into evidence. The module
imports torch at import time on purpose: the runner preloads it in the fork
server, so workers start without paying for the import.
"""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from suite.contract.errors import SkipCell
from suite.contract.plugin import BuildContext, ProbeContext
from suite.contract.step import TrainStep
from suite.contract.wire import Cell
from suite.host.manager import PluginSettings, Registry, load_registry
from suite.run.measure import rates, summarize, time_steps, timing_warnings
from suite.spec.options import build_options
from suite.spec.suitefile import MeasureSpec

__all__ = [
    "build_step",
    "classify",
    "limit_memory",
    "main",
    "mapped_bytes",
    "measure_cell",
    "run_cell",
    "unsendable",
]

TRACEBACK_LINES = 30
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _baseline_precision() -> None:
    # The FP32 baseline must be plain IEEE FP32: cuDNN allows TF32 by default.
    # Only the legacy flags are used, here and in the tf32 technique: torch
    # refuses to read the TF32 state once the legacy and new APIs are mixed.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _grads_finite(step: TrainStep) -> bool:
    if step.model is None:
        return True
    grads = [p.grad for p in step.model.parameters() if p.grad is not None]
    return all(bool(torch.isfinite(g).all()) for g in grads)


SCALE_FLOOR = 1.0
SCALE_COLLAPSE_FACTOR = 2.0**10


def scale_collapsed(scale: float, start: float | None) -> bool:
    """Whether a GradScaler's scale has collapsed: below 1.0, or 2**10 below where it started.

    Each step with inf/NaN gradients halves the scale (by default); ten halvings
    in a row, or a scale that no longer amplifies at all, mean the gradients
    overflow whatever the scale, and fp16 training is lost.
    """
    return scale < SCALE_FLOOR or (start is not None and scale <= start / SCALE_COLLAPSE_FACTOR)


def _numerics(step: TrainStep, run: Callable[..., torch.Tensor], n: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """Run the first ``n`` steps from the seeded start and read every loss.

    The first call is timed on its own: compilation and graph capture happen
    there and must never leak into step time. Gradients are checked between
    the phases when the step is eager (no wrappers), where they are reachable.
    """
    losses: list[float | None] = []
    scaler = step.scaler
    start_scale = float(scaler.get_scale()) if scaler is not None else None
    # The scale before the first step leads the history, so that a skip in the
    # very first step shows as a decrease like any other.
    scales: list[float] | None = [start_scale] if start_scale is not None else None
    collapsed_step: int | None = None
    collapsed_scale: float | None = None
    nonfinite_step: int | None = None
    nonfinite_what: str | None = None
    eager = not step.wrappers
    forward_backward, update = step.phases()
    for i in range(n):
        t0 = time.perf_counter()
        batch = step.data()
        if eager:
            loss = forward_backward(batch)
            grads_ok = step.scaler is not None or _grads_finite(step)
            update()
        else:
            loss = run(batch)
            grads_ok = True
        value = float(loss.float().mean())
        if i == 0:
            _sync(step.device)
            metrics["first_step_seconds"] = time.perf_counter() - t0
        losses.append(_finite(value))
        if nonfinite_step is None and not math.isfinite(value):
            nonfinite_step, nonfinite_what = i, "loss"
        elif nonfinite_step is None and not grads_ok:
            nonfinite_step, nonfinite_what = i, "gradients"
        if scaler is not None and scales is not None:
            scales.append(float(scaler.get_scale()))
            if collapsed_step is None and scale_collapsed(scales[-1], start_scale):
                collapsed_step, collapsed_scale = i, scales[-1]
    skipped = None
    if scales is not None:
        skipped = sum(1 for a, b in itertools.pairwise(scales) if b < a)
    return {
        "losses": losses,
        "loss_at_n": losses[-1] if losses else None,
        "nonfinite_step": nonfinite_step,
        "nonfinite_what": nonfinite_what,
        "scale_history": scales,
        "skipped_steps": skipped,
        "scale_start": start_scale,
        "scale_collapsed_step": collapsed_step,
        "scale_at_collapse": collapsed_scale,
    }


def _peak_memory(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        return {
            "allocated_bytes": torch.cuda.memory_allocated(device),
            "reserved_bytes": torch.cuda.memory_reserved(device),
            "max_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "total_bytes": torch.cuda.get_device_properties(device).total_memory,
        }
    import resource

    return {"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def build_step(
    registry: Registry,
    cell: dict[str, Any],
    device: torch.device,
    seed: int,
    data_dir: str,
    state: dict[str, Any] | None = None,
) -> TrainStep:
    """Build the cell's workload and apply its techniques in order (the cell as plain data)."""
    state = state if state is not None else {}
    _baseline_precision()
    torch.manual_seed(seed)
    state["phase"] = "build"
    workload = registry.workloads[cell["workload"]]
    step = workload.build(
        build_options(workload.options, cell["options"]), BuildContext(device, cell["batch_size"], seed, data_dir)
    )
    for t in cell["techniques"]:
        state["phase"] = f"apply {t['name']}"
        technique = registry.techniques[t["name"]]
        step = technique.apply(step, build_options(technique.options, t["options"]))
    return step


def run_cell(
    payload: dict[str, Any], state: dict[str, Any] | None = None, registry: Registry | None = None
) -> dict[str, Any]:
    """Measure one cell; returns the record parts (status ``passed``).

    A cell of world size > 1 (suite-file ``gpus``) is handed to
    :func:`suite.run.distributed.run_cell`, which launches its ranks from here; each
    rank loads its own plugins, so ``registry`` does not reach them.

    :param state: filled as the cell progresses (phase, partial metrics), so that
        an exception can still be reported with what was known.
    :param registry: the parent's registry when running in-process (it may hold
        plugin objects registered directly); workers load their own.
    """
    if int(payload["cell"].get("world_size", 1)) > 1:
        from suite.run import distributed

        return distributed.run_cell(payload, state if state is not None else {})
    return measure_cell(payload, state, registry)


def measure_cell(
    payload: dict[str, Any],
    state: dict[str, Any] | None = None,
    registry: Registry | None = None,
    *,
    prepare: Callable[[TrainStep], TrainStep] | None = None,
    timer: Callable[..., list[float]] = time_steps,
) -> dict[str, Any]:
    """The measurement of one process: :func:`run_cell` for a single-process cell, and each rank's part of a
    data-parallel one.

    :param prepare: applied to the step after its techniques and before it is composed
        (a rank wraps the model in DistributedDataParallel here).
    :param timer: times the steps (:func:`suite.run.measure.time_steps`'s signature); ranks
        pass one whose stopping rule every rank agrees on.
    """
    state = state if state is not None else {}
    cell = payload["cell"]
    spec = MeasureSpec(**payload["measure"])
    device = torch.device(cell["device"])
    state["device"] = device
    if registry is None:
        registry = load_registry(PluginSettings.from_dict(payload["plugins"]))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif payload.get("cpu_threads"):
        # Fewer threads than cores keeps tiny CPU cells from measuring the scheduler.
        torch.set_num_threads(int(payload["cpu_threads"]))
    metrics: dict[str, Any] = state.setdefault("metrics", {})
    metrics["torch_threads"] = torch.get_num_threads()
    t0 = time.perf_counter()
    step = build_step(registry, cell, device, payload["seed"], payload["data_dir"], state)
    if prepare is not None:
        state["phase"] = "prepare"
        step = prepare(step)
    _sync(device)
    metrics["build_seconds"] = time.perf_counter() - t0
    run = step.compose()

    state["phase"] = "numerics"
    numerics = _numerics(step, run, spec.numerics_steps, metrics)
    state["numerics"] = numerics

    ctx = ProbeContext(step=step, run=run, cell=Cell.from_dict(cell), metrics=metrics)
    probes = sorted(registry.probes.values(), key=lambda p: (p.order, p.name))
    for probe in probes:
        if probe.inspect is not None:
            state["phase"] = f"probe {probe.name}"
            probe.inspect(ctx)

    state["phase"] = "warm-up"
    for _ in range(spec.warmup_steps):
        run(step.data())
    _sync(device)

    state["phase"] = "timed steps"
    with contextlib.ExitStack() as stack:
        for probe in probes:
            if probe.around is not None:
                stack.enter_context(probe.around(ctx))
        samples = timer(run, step.data, device, spec)
    last = run(step.data())
    final_loss = float(last.float().mean())
    numerics["final_loss"] = _finite(final_loss)
    if numerics["nonfinite_step"] is None and not math.isfinite(final_loss):
        numerics["nonfinite_step"], numerics["nonfinite_what"] = spec.numerics_steps + spec.warmup_steps, "loss"
    if step.scaler is not None and numerics["scale_collapsed_step"] is None:
        # Read once after timing (a read syncs): the step given is the last one, when it was seen.
        scale = float(step.scaler.get_scale())
        if scale_collapsed(scale, numerics["scale_start"]):
            numerics["scale_collapsed_step"] = spec.numerics_steps + spec.warmup_steps + len(samples)
            numerics["scale_at_collapse"] = scale

    stats = summarize(samples)
    metrics["step_time"] = stats.as_dict(samples)
    metrics["samples_per_step"] = step.samples_per_step
    rates(metrics, stats.median)
    warnings = ctx.warnings
    warnings.extend(timing_warnings(stats, spec.noise_target))
    if numerics["nonfinite_step"] is not None:
        warnings.append(f"non-finite {numerics['nonfinite_what']} at step {numerics['nonfinite_step']}")
    if numerics["scale_collapsed_step"] is not None:
        warnings.append(
            f"loss scale collapsed to {numerics['scale_at_collapse']:g} at step {numerics['scale_collapsed_step']} "
            f"(from {numerics['scale_start']:g}): gradients overflow in float16"
        )
    return {
        "status": "passed",
        "metrics": metrics,
        "numerics": numerics,
        "diagnostics": ctx.diagnostics,
        "notes": step.notes,
        "warnings": warnings,
        "evidence": None,
    }


def _tail(text: str, lines: int = TRACEBACK_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def classify(exc: BaseException, state: dict[str, Any]) -> dict[str, Any]:
    """Turn an exception that escaped :func:`run_cell` into record parts."""
    phase = state.get("phase", "start")
    partial = {"metrics": state.get("metrics", {}), "numerics": state.get("numerics")}
    if isinstance(exc, SkipCell):
        return {"status": "skipped", **partial, "evidence": {"reason": str(exc), "phase": phase}}
    evidence: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        "traceback": _tail("".join(traceback.format_exception(exc))),
        "phase": phase,
    }
    if exc.__cause__ is not None:
        evidence["cause"] = f"{type(exc.__cause__).__name__}: {exc.__cause__}".strip()[:2000]
    text = str(exc).lower()
    is_oom = isinstance(exc, MemoryError | torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and any(m in text for m in OOM_MARKERS)
    )
    if is_oom:
        device = state.get("device")
        if isinstance(device, torch.device):
            with contextlib.suppress(Exception):
                evidence["memory"] = _peak_memory(device)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        return {"status": "oom", **partial, "evidence": evidence}
    return {"status": "failed", **partial, "evidence": evidence}


def _die_with_parent() -> None:
    # Linux only: if the runner dies (even by SIGKILL) the worker gets SIGKILL,
    # so no orphan keeps a GPU busy.
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def mapped_bytes() -> int | None:
    """The address space this process maps now (``VmSize``), or None where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def limit_memory(extra_bytes: int) -> int:
    """Cap this process's address space (``RLIMIT_AS``) at what it maps now plus ``extra_bytes``; returns the cap.

    A worker that imported a CUDA build of torch already maps several GiB
    before it builds anything, so a cap on the total would make small limits
    fail every cell, and the same suite would mean different room on another
    torch build. ``suite.memory_limit_gb`` is therefore the room the cell gets.
    Without ``/proc`` (not Linux) the mapped size is unknown and the cap is ``extra_bytes`` alone.
    """
    import resource

    limit = (mapped_bytes() or 0) + extra_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # the hard limit too: nothing in the cell lifts it
    return limit


def unsendable(result: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The failed record sent instead of a result that could not be sent (pickled) to the runner."""
    return {
        "status": "failed",
        "metrics": {},
        "numerics": None,
        "diagnostics": {},
        "notes": {},
        "warnings": [],
        "evidence": {
            "type": "UnsendableResult",
            "message": f"the worker's result could not be sent to the runner: {type(exc).__name__}: {exc}"[:2000],
            "traceback": _tail("".join(traceback.format_exception(exc))),
            "phase": "send result",
            "result_status": str(result.get("status")) if isinstance(result, dict) else None,
        },
    }


def main(payload: dict[str, Any], conn: Any) -> None:
    """Entry point of the worker process: measure, send one result, exit."""
    os.setsid()  # own process group: the runner can kill the worker and its children at once
    _die_with_parent()
    log = os.open(payload["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    # A SIGSEGV or SIGABRT kills the worker before any Python handler runs:
    # faulthandler writes every thread's Python stack to the log first, which
    # the runner keeps as the crashed record's stderr_tail.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    # A data-parallel cell's ranks set their own limit (suite.run.distributed): a
    # limit set here would be inherited by ranks that map more than this process.
    single = int(payload["cell"].get("world_size", 1)) <= 1
    if payload.get("memory_limit_bytes") and payload["cell"]["device"] == "cpu" and single:
        limit_memory(int(payload["memory_limit_bytes"]))
    state: dict[str, Any] = {}
    try:
        result = run_cell(payload, state)
    except BaseException as exc:  # everything becomes evidence; nothing escapes unreported
        result = classify(exc, state)
    try:
        try:
            conn.send(result)
        except Exception as exc:  # a plugin put something unpicklable into the result
            conn.send(unsendable(result, exc))
        conn.close()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: DataLoader workers, CUDA contexts and
        # compile threads have nothing left to do, and teardown can hang.
        os._exit(0)


def peaks_main(device_type: str, refresh: bool, log_path: str, conn: Any) -> None:
    """Entry point of the process that measures the device's peaks before the cells."""
    os.setsid()
    _die_with_parent()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        from suite.run.peaks import measure_peaks

        conn.send({"peaks": measure_peaks(device_type, refresh=refresh)})
    except BaseException as exc:
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
