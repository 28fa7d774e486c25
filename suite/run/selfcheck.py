"""Fidelity: the harness against a plain hand-written training loop, in the same process.

For each check, one step object is built through the plugins exactly as a
cell would be. The harness times it with :func:`ampsuite.run.measure.time_steps`
(what every cell uses); the plain loop drives the same model, optimizer, loss
and batches with the few lines a user would write, timed as users time it
(one synchronisation, wall clock over N steps). Rounds alternate so drift in
clocks or temperature hits both sides alike. A ratio near 1.00 says the
harness adds nothing; the ratio is plain time / harness time.

A compiled step (torch-compile) is compared with the plain loop calling the
same compiled module, which is what a user writes. A graph-captured step
(cuda-graphs) cannot share its objects with a second capture, so the plain
side builds its own step from the same seed without the technique and
captures the whole step by hand, as PyTorch's CUDA Graphs documentation shows
(side-stream warm-up, static batch, ``torch.cuda.graph``, copy in, replay).

A half-weights step (Apex's O2: the model itself in half precision, FP32
masters stepped by the optimizer) is compared the same way: the plain side
builds its step without the technique and converts it by hand (model to half
but its batch norms, a master per parameter moved into the optimizer, a
GradScaler for float16), then runs the loop an O2 user writes: forward on half
inputs, loss in float32, backward, half gradients copied into the masters',
optimizer step, masters copied back into the half weights.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ampsuite.contract.errors import SkipCell
from ampsuite.contract.tunerecords import TuneSummary
from ampsuite.contract.wire import Status
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.run.measure import summarize, time_steps, warm_up
from ampsuite.run.plainloops import NotComparable, plain_graph_step, plain_half_step, plain_step
from ampsuite.run.worker import build_step
from ampsuite.spec.options import build_options, options_as_dict
from ampsuite.spec.screens import screened_cell
from ampsuite.spec.suitespec import MeasureSpec

__all__ = [
    "CHECKS",
    "Check",
    "CheckResult",
    "NotComparable",
    "cell_checks",
    "record_check",
    "release",
    "run_check",
    "tuned_checks",
]


@dataclass(frozen=True)
class Check:
    """One configuration to compare: a workload, its options, techniques, batch size."""

    name: str
    """What ``-k`` matches and the output names."""
    workload: str
    options: dict[str, Any]
    """The workload's options, as a suite file's ``[workloads.ID]`` table gives them."""
    techniques: tuple[str, ...]
    batch_size: int
    technique_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Options of the techniques that differ from their defaults (a tuned recipe's, say)."""


@dataclass(frozen=True)
class CheckResult:
    """A check's figures over alternating rounds: the harness's median step against a plain loop's mean step."""

    name: str
    harness_median: float
    """Seconds a step: the median over the rounds of each round's median."""
    harness_noise: float
    plain_per_step: float
    """Seconds a step of the plain loop: the median over the rounds of each round's mean."""
    plain_spread: float
    ratio: float
    """``plain_per_step / harness_median``: below 1, the harness is slower than a plain loop."""
    rounds: int
    steps_per_round: int


CHECKS: dict[str, tuple[Check, ...]] = {
    "cuda": (
        Check("gemm-fp16-8192", "gemm", {"dtype": "float16"}, (), 1),
        Check("resnet50-amp-bf16-cl-bs256", "resnet", {"depth": 50}, ("amp-bf16", "channels-last"), 256),
        Check("resnet50-amp-bf16-bs32", "resnet", {"depth": 50}, ("amp-bf16",), 32),
        # Host-bound at batch 32: with and without cuDNN's algorithm search (about 5 ms a step on an H200).
        Check("resnet50-amp-bf16-cl-bs32", "resnet", {"depth": 50}, ("amp-bf16", "channels-last"), 32),
        Check(
            "resnet50-amp-bf16-cl-cudnnbench-bs32",
            "resnet",
            {"depth": 50},
            ("amp-bf16", "channels-last", "cudnn-benchmark"),
            32,
        ),
        Check(
            "resnet50-bf16-cl-compile-bs256",
            "resnet",
            {"depth": 50},
            ("amp-bf16", "channels-last", "cudnn-benchmark", "torch-compile"),
            256,
        ),
        # The recipe `ampsuite tune tests/gpu/tune-resnet50.toml` found on an H200 (2026-11-30).
        Check(
            "resnet50-fp16-compile-bs256",
            "resnet",
            {"depth": 50},
            ("amp-fp16", "cudnn-benchmark", "torch-compile"),
            256,
        ),
        Check(
            "resnet50-bf16-cl-fused-graphs-bs256",
            "resnet",
            {"depth": 50},
            ("amp-bf16", "channels-last", "cudnn-benchmark", "fused-optimizer", "cuda-graphs"),
            256,
        ),
        Check("bert-base-amp-bf16-bs128", "bert", {}, ("amp-bf16",), 128),
        Check("vit-b16-amp-bf16-bs256", "vit", {}, ("amp-bf16",), 256),
        # The recipes of docs/llm.md's table on its 0.9B decoder (batch 8, seq 2048, fused AdamW as in
        # tests/gpu/llm.toml): TF32, eager bf16, bf16 with every block checkpointed, compiled per block as
        # torchtitan does, and FP8 tensorwise and rowwise on top (needs torchao; "not checked" without it).
        *(
            Check(f"llm-0.9b-{name}-bs8", "llm", {"preset": "0.9b"}, ("fused-optimizer", *techniques), 8, options)
            for name, techniques, options in (
                ("tf32", ("tf32",), {}),
                ("amp-bf16", ("amp-bf16",), {}),
                ("bf16-ac", ("amp-bf16", "activation-checkpointing"), {}),
                ("bf16-compile", ("amp-bf16", "torch-compile"), {"torch-compile": {"scope": "block"}}),
                (
                    "bf16-compile-fp8",
                    ("amp-bf16", "fp8", "torch-compile"),
                    {"torch-compile": {"scope": "block"}, "fp8": {"recipe": "tensorwise"}},
                ),
                (
                    "bf16-compile-fp8-rowwise",
                    ("amp-bf16", "fp8", "torch-compile"),
                    {"torch-compile": {"scope": "block"}, "fp8": {"recipe": "rowwise"}},
                ),
            )
        ),
    ),
    "cpu": (
        Check("toy-fp32-bs128", "toy", {"hidden": 256}, (), 128),
        Check("gemm-fp32-256", "gemm", {"m": 256, "n": 256, "k": 256}, (), 1),
        Check("llm-tiny-fp32-bs8", "llm", {"preset": "tiny"}, (), 8),
    ),
}


def record_check(record: Mapping[str, Any], name: str) -> Check:
    """The check of one results record: its workload, options, techniques with their options, batch size.

    The record holds every technique with its options (the suite's base
    techniques included), so the plain loop runs exactly the recipe measured.
    """
    workload = record["workload"]
    techniques = record.get("techniques") or []
    return Check(
        name=name,
        workload=str(workload["plugin"]),
        options=dict(workload.get("options") or {}),
        techniques=tuple(str(t["name"]) for t in techniques),
        batch_size=int(record["batch_size"]),
        technique_options={str(t["name"]): dict(t.get("options") or {}) for t in techniques},
    )


def tuned_checks(doc: Mapping[str, Any]) -> tuple[Check, ...]:
    """One check per workload winner of a tune results document (``run.tune``), built from the winner's record."""
    by_id = {str(r["id"]): r for r in doc.get("cells") or []}
    checks = []
    for w in TuneSummary.from_json((doc.get("run") or {}).get("tune") or {}).workloads:
        record = None if w.winner is None else by_id.get(w.winner.cell_id)
        if record is not None:
            checks.append(record_check(record, f"tuned {record['id']}"))
    return tuple(checks)


def cell_checks(doc: Mapping[str, Any]) -> tuple[Check, ...]:
    """One check per passed single-process cell of any results document (``ampsuite run``'s or tune's).

    Screened tune candidates (ids ending in ``/screen`` or ``/screen-N``) are left out: their full
    measurement, where there is one, is the same recipe.
    """
    return tuple(
        record_check(r, f"cell {r['id']}")
        for r in doc.get("cells") or []
        if r.get("status") == Status.PASSED
        and int(r.get("world_size") or 1) == 1
        and screened_cell(str(r["id"])) is None
    )


def _cell(registry: Any, check: Check, techniques: tuple[str, ...]) -> dict[str, Any]:
    workload = registry.workloads[check.workload]
    return {
        "workload": check.workload,
        "options": options_as_dict(build_options(workload.options, check.options)),
        "techniques": [
            {
                "name": t,
                "options": options_as_dict(
                    build_options(registry.techniques[t].options, dict(check.technique_options.get(t, {})))
                ),
            }
            for t in sorted(techniques, key=lambda n: (registry.techniques[n].order, n))
        ],
        "batch_size": check.batch_size,
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device: str) -> None:
    """Give back what a check held before the next one builds its model, as a cell's own process would.

    Checks share one process, and a 0.9B decoder's check holds 30-60 GiB: its compiled code, any
    object left in a reference cycle and the allocator's cached blocks go before the next is built.
    """
    torch._dynamo.reset()
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def run_check(check: Check, device: str, *, rounds: int = 3, measure: MeasureSpec | None = None) -> CheckResult:
    """Time the harness and the plain loop on the same step, alternating rounds."""
    registry = load_registry(PluginSettings.from_args([]))  # $AMPSUITE_PLUGINS applies, as on the command line
    dev = torch.device(device)
    try:
        step = build_step(registry, _cell(registry, check, check.techniques), dev, seed=0, data_dir="reports/data")
    except SkipCell as exc:  # a technique this machine cannot run (fp8 without torchao): nothing to compare
        raise NotComparable(f"{check.name}: {exc}") from exc
    run = step.compose()
    # A technique the plain side writes by hand itself: its step is built without it, from the same seed.
    by_hand = next((t for t in ("cuda-graphs", "half-weights") if t in check.techniques), None)
    own = step
    if by_hand is not None:
        others = tuple(t for t in check.techniques if t != by_hand)
        own = build_step(registry, _cell(registry, check, others), dev, seed=0, data_dir="reports/data")
        if own.wrappers:
            raise NotComparable(f"{check.name}: the hand-written side takes no wrapping techniques besides {by_hand}")
    elif step.wrappers:
        raise NotComparable(f"{check.name}: selfcheck compares eager or compiled steps; drop wrapping techniques")
    if own.model is not None and (own.forward_backward is not None or own.update is not None):
        # The plain loops write the default step by hand (autocast, loss, backward, optimizer), or it with O2's
        # masters: a step whose phases another technique replaced (grad-accumulation's micro-batches, inference's
        # forward only, half-weights under cuda-graphs) trains otherwise and would be timed against a loop not its own.
        raise NotComparable(
            f"{check.name}: a technique of {', '.join(check.techniques)} replaced the step's phases; the plain "
            "loop is the default training step only (or half-weights' by hand)"
        )
    if by_hand == "cuda-graphs":
        plain = plain_graph_step(own, own.data())
    elif by_hand == "half-weights":
        chosen = build_options(registry.techniques[by_hand].options, dict(check.technique_options.get(by_hand, {})))
        plain = plain_half_step(own, getattr(torch, chosen.dtype), chosen.init_scale)  # "float16" or "bfloat16"
    else:
        plain = plain_step(step)
    pool = [own.data() for _ in range(4)]
    # No warm-up seconds by default: a GPU at its power cap swings its clocks by several percent within a second,
    # more than the harness and the plain loop may differ, and their short alternating rounds sample the swing
    # (an H100's fp16 GEMM warmed up for 1.5 s: plain/harness 0.94, its plain rounds 9% apart). Both loops run
    # at the clocks the GPU starts at instead.
    spec = measure or MeasureSpec(warmup_steps=5, min_steps=20, max_steps=200, max_seconds=3.0, noise_target=0.005)
    # Both loops warm up together, step for step (and for the warm-up seconds of a measure given), so neither is
    # timed on a GPU in another state than the other.
    warm_up(lambda batch: (run(batch), plain(pool[0])), step.data, dev, spec)

    harness_medians: list[float] = []
    harness_noise: list[float] = []
    plain_times: list[float] = []
    steps = spec.min_steps
    for _ in range(rounds):
        samples = time_steps(run, step.data, dev, spec)
        stats = summarize(samples)
        harness_medians.append(stats["median"])
        harness_noise.append(stats["noise"])
        steps = max(spec.min_steps, len(samples))
        _sync(dev)
        t0 = time.perf_counter()
        for i in range(steps):
            plain(pool[i % len(pool)])
        _sync(dev)
        plain_times.append((time.perf_counter() - t0) / steps)
    h = statistics.median(harness_medians)
    p = statistics.median(plain_times)
    return CheckResult(
        name=check.name,
        harness_median=h,
        harness_noise=statistics.median(harness_noise),
        plain_per_step=p,
        plain_spread=(max(plain_times) - min(plain_times)) / p,
        ratio=p / h,
        rounds=rounds,
        steps_per_round=steps,
    )


def as_dict(result: CheckResult) -> dict[str, Any]:
    return asdict(result)
