"""Measuring one cell in this process: build, apply, numerics, probes, timing; and the evidence of a failure.

:func:`measure_cell` is the whole measurement of a single-process cell and each
rank's part of a data-parallel one; any exception escapes, and
:func:`classify` turns it into evidence. Torch is imported at import time on
purpose: the runner preloads it in the fork server, so workers start without
paying for the import.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import PluginContractError, SkipCell
from ampsuite.contract.plugin import BuildContext, ProbeContext
from ampsuite.contract.step import TrainStep
from ampsuite.contract.wire import Outcome, Status, outcome
from ampsuite.host.manager import PluginSettings, Registry, load_registry
from ampsuite.run import quality
from ampsuite.run.measure import rates, summarize, time_steps, timing_warnings, warm_up
from ampsuite.run.numerics import finite, run_numerics, scale_collapsed, sync
from ampsuite.spec.options import build_options
from ampsuite.spec.suitespec import MeasureSpec

__all__ = [
    "build_step",
    "classify",
    "limit_memory",
    "mapped_bytes",
    "measure_cell",
    "step_author",
    "traceback_tail",
]

TRACEBACK_LINES = 30
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc")


def _baseline_precision() -> None:
    # The FP32 baseline must be plain IEEE FP32: cuDNN allows TF32 by default.
    # Only the legacy flags are used, here and in the tf32 technique: torch
    # refuses to read the TF32 state once the legacy and new APIs are mixed.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False


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
    _expect_step(step, workload.name, "build")
    for t in cell["techniques"]:
        state["phase"] = f"apply {t['name']}"
        technique = registry.techniques[t["name"]]
        step = technique.apply(step, build_options(technique.options, t["options"]))
        _expect_step(step, technique.name, "apply")
    return step


def _expect_step(step: Any, plugin: str, hook: str) -> None:
    # Checked at the boundary: a wrong return would otherwise surface later as an
    # AttributeError inside ampsuite, naming neither the plugin nor the hook.
    if not isinstance(step, TrainStep):
        raise PluginContractError(plugin, hook, "a TrainStep", step)


def step_author(cell: dict[str, Any]) -> str:
    """Who made the cell's step: its workload, with the techniques applied to it."""
    names = [t["name"] for t in cell["techniques"]]
    return cell["workload"] + (f" with {', '.join(names)}" if names else "")


def measure_cell(
    payload: dict[str, Any],
    state: dict[str, Any] | None = None,
    registry: Registry | None = None,
    *,
    prepare: Callable[[TrainStep], TrainStep] | None = None,
    timer: Callable[..., list[float]] = time_steps,
    warmer: Callable[..., int] = warm_up,
) -> dict[str, Any]:
    """The measurement of one process: :func:`run_cell` for a single-process cell, and each rank's part of a
    data-parallel one.

    :param prepare: applied to the step after its techniques and before it is composed
        (a rank wraps the model in DistributedDataParallel here).
    :param timer: times the steps (:func:`ampsuite.run.measure.time_steps`'s signature); ranks
        pass one whose stopping rule every rank agrees on.
    :param warmer: runs the warm-up and returns its steps (:func:`ampsuite.run.measure.warm_up`'s signature);
        ranks pass one whose chunks every rank agrees on.
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
    sync(device)
    metrics["build_seconds"] = time.perf_counter() - t0
    run = step.compose()

    state["phase"] = "numerics"
    trained_from = time.perf_counter()
    numerics = run_numerics(step, run, spec.numerics_steps, metrics, step_author(cell))
    state["numerics"] = numerics
    if step.check_output is not None:
        state["phase"] = "output check"
        numerics["output_check"] = step.check_output()
    quality_run = None
    if payload.get("quality"):
        state["phase"] = "quality"
        quality_run = _quality(step, run, payload, numerics, trained_from)

    ctx = ProbeContext(
        step=step,
        run=run,
        cell=Cell.from_dict(cell),
        metrics=metrics,
        artifact_dir=Path(payload["artifact_dir"]) if payload.get("artifact_dir") else None,
        artifact_prefix=payload.get("artifact_prefix", ""),
    )
    probes = sorted(registry.probes.values(), key=lambda p: (p.order, p.name))
    for probe in probes:
        if probe.inspect is not None:
            state["phase"] = f"probe {probe.name}"
            probe.inspect(ctx)

    state["phase"] = "warm-up"
    warmed = warmer(run, step.data, device, spec)
    metrics["warmup_steps"] = warmed

    state["phase"] = "timed steps"
    with contextlib.ExitStack() as stack:
        for probe in probes:
            if probe.around is not None:
                stack.enter_context(probe.around(ctx))
        samples = timer(run, step.data, device, spec)
    last = run(step.data())
    final_loss = float(last.float().mean())
    numerics["final_loss"] = finite(final_loss)
    if numerics["nonfinite_step"] is None and not math.isfinite(final_loss):
        # The step after the timed ones, counted from 0 as the numerics phase counts.
        numerics["nonfinite_step"], numerics["nonfinite_what"] = spec.numerics_steps + warmed + len(samples), "loss"
    if step.scaler is not None and numerics["scale_collapsed_step"] is None:
        # Read once after timing (a read syncs): the step given is the last one, when it was seen.
        scale = float(step.scaler.get_scale())
        if scale_collapsed(scale, numerics["scale_start"]):
            numerics["scale_collapsed_step"] = spec.numerics_steps + warmed + len(samples)
            numerics["scale_at_collapse"] = scale

    stats = summarize(samples)
    metrics["step_time"] = stats
    metrics["samples_per_step"] = step.samples_per_step
    if step.model_flops_per_step is not None:
        metrics["model_flops_per_step"] = float(step.model_flops_per_step)
    rates(metrics, stats["median"])
    warnings = ctx.warnings
    warnings.extend(timing_warnings(stats, spec.noise_target))
    if numerics["nonfinite_step"] is not None:
        warnings.append(f"non-finite {numerics['nonfinite_what']} at step {numerics['nonfinite_step']}")
    if numerics["scale_collapsed_step"] is not None:
        warnings.append(
            f"loss scale collapsed to {numerics['scale_at_collapse']:g} at step {numerics['scale_collapsed_step']} "
            f"(from {numerics['scale_start']:g}): gradients overflow in float16"
        )
    result = {
        "status": Status.PASSED,
        "metrics": metrics,
        "numerics": numerics,
        "diagnostics": ctx.diagnostics,
        "notes": step.notes,
        "warnings": warnings,
        "evidence": None,
    }
    if quality_run is not None:
        result["quality"] = {"runs": [quality_run]}
    return result


def _quality(
    step: TrainStep, run: Callable[..., Any], payload: dict[str, Any], numerics: dict[str, Any], started: float
) -> Any:
    """The cell's quality run (:func:`ampsuite.run.quality.train`); SkipCell for a step that cannot have one."""
    if step.eval_data is None or step.model is None or step.loss_fn is None:
        raise SkipCell(
            f"quality: {step_author(payload['cell'])} has no held-out split to evaluate (TrainStep.eval_data); "
            "give the workload real data (docs/quality.md)"
        )
    losses = list(numerics.get("losses") or [])
    return quality.train(step, run, payload["quality"], seed=payload["seed"], first_losses=losses, started=started)


def traceback_tail(text: str, lines: int = TRACEBACK_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def classify(exc: BaseException, state: dict[str, Any]) -> Outcome:
    """Turn an exception that escaped :func:`run_cell` into record parts."""
    phase = state.get("phase", "start")
    partial = {"metrics": state.get("metrics", {}), "numerics": state.get("numerics")}
    if isinstance(exc, SkipCell):
        return outcome(Status.SKIPPED, {"reason": str(exc), "phase": phase}, **partial)
    evidence: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        "traceback": traceback_tail("".join(traceback.format_exception(exc))),
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
        return outcome(Status.OOM, evidence, **partial)
    return outcome(Status.FAILED, evidence, **partial)


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
