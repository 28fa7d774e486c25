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

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from ampsuite.contract.step import Batch, TrainStep
from ampsuite.contract.wire import Status
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.run.measure import summarize, time_steps
from ampsuite.run.worker import build_step
from ampsuite.spec.options import build_options, options_as_dict
from ampsuite.spec.screens import screened_cell
from ampsuite.spec.suitefile import MeasureSpec

__all__ = [
    "CHECKS",
    "Check",
    "CheckResult",
    "NotComparable",
    "cell_checks",
    "plain_graph_step",
    "plain_half_step",
    "plain_step",
    "record_check",
    "run_check",
    "tuned_checks",
]


class NotComparable(ValueError):
    """The recipe has no plain-loop twin here (a wrapping technique, a GradScaler in a hand-captured graph)."""


@dataclass(frozen=True)
class Check:
    """One configuration to compare: a workload, its options, techniques, batch size."""

    name: str
    workload: str
    options: dict[str, Any]
    techniques: tuple[str, ...]
    batch_size: int
    technique_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Options of the techniques that differ from their defaults (a tuned recipe's, say)."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    harness_median: float
    harness_noise: float
    plain_per_step: float
    plain_spread: float
    ratio: float
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
    ),
    "cpu": (
        Check("toy-fp32-bs128", "toy", {"hidden": 256}, (), 128),
        Check("gemm-fp32-256", "gemm", {"m": 256, "n": 256, "k": 256}, (), 1),
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
    for w in (doc.get("run") or {}).get("tune", {}).get("workloads") or []:
        winner = w.get("winner") or {}
        record = by_id.get(str(winner.get("cell_id")))
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


def plain_step(step: TrainStep) -> Callable[[Batch], Any]:
    """The training step as a user writes it, from the step's own objects."""
    model, optimizer, loss_fn, scaler = step.model, step.optimizer, step.loss_fn, step.scaler
    dtype, device_type = step.autocast_dtype, step.device.type
    if model is None or optimizer is None or loss_fn is None:
        # A workload without a model is a raw product (GEMM): the plain loop is
        # a bare torch.matmul on the same operands.
        def product(batch: Batch) -> Any:
            with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
                return torch.matmul(*batch.inputs)

        return product

    def train_step(batch: Batch) -> Any:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(*batch.inputs), batch.target)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


def plain_graph_step(step: TrainStep, example: Batch) -> Callable[[Batch], Any]:
    """The whole training step captured into one CUDA graph by hand, as PyTorch's documentation shows."""
    model, optimizer, loss_fn, dtype = step.model, step.optimizer, step.loss_fn, step.autocast_dtype
    if model is None or optimizer is None or loss_fn is None or step.scaler is not None:
        raise NotComparable("a hand-captured plain loop needs a model, an optimizer and no GradScaler")
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True
    static = Batch(tuple(t.clone() for t in example.inputs), None if example.target is None else example.target.clone())

    def body() -> Any:
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(*static.inputs), static.target)
        loss.backward()
        optimizer.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)  # grads allocated inside the capture are overwritten on each replay
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = body()

    def replay(batch: Batch) -> Any:
        for dst, src in zip(static.inputs, batch.inputs, strict=True):
            dst.copy_(src, non_blocking=True)
        if static.target is not None and batch.target is not None:
            static.target.copy_(batch.target, non_blocking=True)
        graph.replay()
        return static_loss

    return replay


def _grad(p: torch.Tensor) -> torch.Tensor:
    if p.grad is None:  # the harness skips such a master; the hand-written loop does not
        raise NotComparable("a parameter got no gradient; the half-weights plain loop steps every master")
    return p.grad


def plain_half_step(step: TrainStep, dtype: torch.dtype, init_scale: float) -> Callable[[Batch], Any]:
    """Apex's O2 written by hand on a step built without half-weights.

    The model goes to ``dtype`` but for its batch norms; each parameter the
    optimizer holds is replaced there by a float32 master (its state moves
    along, so a fused optimizer's started momentum stays), and float16 gets a
    dynamic loss scale.
    """
    model, optimizer, loss_fn = step.model, step.optimizer, step.loss_fn
    if model is None or optimizer is None or loss_fn is None:
        raise NotComparable("a half-weights plain loop needs a model, a loss and an optimizer")
    if step.autocast_dtype is not None or step.scaler is not None:
        raise NotComparable("a half-weights plain loop replaces autocast and its loss scale")
    module = getattr(model, "_orig_mod", model)  # torch.compile compiles lazily, at the first call
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            continue
        for p in m.parameters(recurse=False):
            p.data = p.data.to(dtype)
        for name, b in m.named_buffers(recurse=False):
            if b.is_floating_point():
                setattr(m, name, b.to(dtype))
    halves: list[torch.Tensor] = []
    masters: list[torch.Tensor] = []
    for group in optimizer.param_groups:
        for i, half in enumerate(group["params"]):
            master = nn.Parameter(half.detach().float().clone())
            group["params"][i] = master
            if half in optimizer.state:
                optimizer.state[master] = optimizer.state.pop(half)
            halves.append(half)
            masters.append(master)
    grads = [torch.zeros_like(m) for m in masters]
    for kept, grad in zip(masters, grads, strict=True):
        kept.grad = grad
    # torch._foreach_copy_ takes its fast path for one dtype on each side: the half weights, and batch norm's float32
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, p in enumerate(halves):
        by_dtype.setdefault(p.dtype, []).append(i)
    scaler = torch.amp.GradScaler(step.device.type, init_scale=init_scale) if dtype == torch.float16 else None

    def train_step(batch: Batch) -> Any:
        inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in batch.inputs)
        out = model(*inputs)
        if not isinstance(out, torch.Tensor):
            raise NotComparable(f"the model returns {type(out).__name__}; the half-weights plain loop takes a tensor")
        loss = loss_fn(out.float(), batch.target)
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        with torch.no_grad():
            for idx in by_dtype.values():
                torch._foreach_copy_([grads[i] for i in idx], [_grad(halves[i]) for i in idx])
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            for idx in by_dtype.values():
                torch._foreach_copy_([halves[i] for i in idx], [masters[i] for i in idx])
        for p in halves:
            p.grad = None
        return loss

    return train_step


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


def run_check(check: Check, device: str, *, rounds: int = 3, measure: MeasureSpec | None = None) -> CheckResult:
    """Time the harness and the plain loop on the same step, alternating rounds."""
    registry = load_registry(PluginSettings.from_args([]))  # $AMPSUITE_PLUGINS applies, as on the command line
    dev = torch.device(device)
    step = build_step(registry, _cell(registry, check, check.techniques), dev, seed=0, data_dir="reports/data")
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
    spec = measure or MeasureSpec(warmup_steps=5, min_steps=20, max_steps=200, max_seconds=3.0, noise_target=0.005)
    for _ in range(spec.warmup_steps):
        run(step.data())
        plain(pool[0])
    _sync(dev)

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
