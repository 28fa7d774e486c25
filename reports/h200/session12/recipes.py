"""Whole-step variants of the tuned ResNet-50 recipe, in a plain loop (issue 15, session 12).

The tune's winner is bf16 autocast + channels-last + torch.compile (reduce-overhead, tile_reductions),
7,073 img/s on one H200 against the 7,950 the issue asks. This loop prices what the tune has not
combined yet, each variant in its own process (inductor's settings and caches are process-wide):

* inductor's pointwise autotuning and aggressive fusion on top of the winner;
* the whole step (forward, backward and SGD) in one manually captured CUDA graph around compile's
  default mode, against reduce-overhead's forward and backward graphs with an eager optimizer step;
* fused SGD (one kernel for the update);
* fp16 instead of bf16 (no loss scale: a speed probe of the kernels only, not a recipe).

    python3 recipes.py --out recipes.json [--warm-first SECONDS] NAME [NAME ...]   # names: see VARIANTS

With ``--warm-first`` every variant is first compiled at once, one process each, until that many
seconds have passed (inductor's compile is mostly single-threaded Python, and 16 cores sit idle
behind one); then each is measured alone, one after another, in a fresh process whose compile is a
cache hit. Measuring in the warming processes would let cudnn.benchmark and inductor's autotuning
time their candidates while other processes load the GPU.

After the timing, each variant profiles 5 steps (CUDA activity only) and records the GPU busy time
and the time by kernel class with ampsuite's kernels probe's summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

TILE = {"triton.tile_reductions": True, "triton.prefer_nd_tiling": True}
POINTWISE = {"max_autotune_pointwise": True}


@dataclass(frozen=True)
class Variant:
    mode: str = "reduce-overhead"  # torch.compile's mode; "default" for the manually captured graph
    settings: dict[str, object] = field(default_factory=dict)
    graph: bool = False  # the whole step captured in one torch.cuda.CUDAGraph
    fused: bool = False  # SGD(fused=True)
    dtype: str = "bfloat16"


VARIANTS: dict[str, Variant] = {
    "ro-tile": Variant(settings=TILE),  # the tune's winner (session 11)
    "ro-tile-pw": Variant(settings={**TILE, **POINTWISE}),
    "ro-tile-pw-aggr": Variant(settings={**TILE, **POINTWISE, "aggressive_fusion": True}),
    "ro-tile-pw-fused": Variant(settings={**TILE, **POINTWISE}, fused=True),
    "g-tile-pw": Variant(mode="default", settings={**TILE, **POINTWISE}, graph=True),
    "g-tile-pw-fused": Variant(mode="default", settings={**TILE, **POINTWISE}, graph=True, fused=True),
    "g-tile": Variant(mode="default", settings=TILE, graph=True),
    "ro-tile-pw-fp16": Variant(settings={**TILE, **POINTWISE}, dtype="float16"),
}


def _clocks() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"


def run_one(name: str, batch: int, steps: int, measure: bool) -> dict:
    import torch
    import torchvision
    from torch._inductor import list_mode_options

    v = VARIANTS[name]
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, fused=v.fused or None)
    options = {**list_mode_options(v.mode), **v.settings} if v.mode != "default" else dict(v.settings)
    compiled = torch.compile(model, options=options or None, dynamic=False)
    dtype = getattr(torch, v.dtype)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step() -> torch.Tensor:
        with torch.autocast("cuda", dtype=dtype):
            loss = loss_fn(compiled(x), y)
        loss.backward()
        opt.step()
        if not v.graph:
            opt.zero_grad(set_to_none=True)
        return loss

    start = time.monotonic()
    train_step()
    torch.cuda.synchronize()
    first = time.monotonic() - start
    result: dict = {"name": name, "variant": v.__dict__, "torch": torch.__version__, "first_step_s": first}
    if not measure:
        train_step()
        torch.cuda.synchronize()
        return result

    step = train_step
    if v.graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                train_step()
        torch.cuda.current_stream().wait_stream(side)
        opt.zero_grad(set_to_none=True)  # grads allocated inside the graph's pool, overwritten each replay
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = train_step()

        def replay() -> torch.Tensor:
            graph.replay()
            return static_loss

        step = replay
    for _ in range(10):
        step()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps):
            step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / steps / 1e3)
    loss = float(step().item())
    clocks = _clocks()
    times.sort()
    median = times[len(times) // 2]
    result.update(
        step_ms=[t * 1e3 for t in times],
        median_ms=median * 1e3,
        img_s=batch / median,
        spread=(times[-1] - times[0]) / median,
        loss=loss,
        clocks_after=clocks,
        kernels=_profile(step),
    )
    return result


def _profile(step) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from plugins.probes.kernels import summarize_trace

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            summary = summarize_trace(json.load(f), wall, 5)
    except Exception as exc:  # the timing above stands without it
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.unlink(path)
    summary["top"] = summary["top"][:8]
    return summary


def _child(name: str, a: argparse.Namespace) -> list[str]:
    common = ["--batch", str(a.batch), "--steps", str(a.steps), "--out", a.out]
    return [sys.executable, __file__, "--one", name, *common, name]


def _read(done_stdout: str, stderr: str, name: str) -> dict:
    lines = done_stdout.strip().splitlines()
    if lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])
    return {"name": name, "error": stderr[-1500:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+", choices=sorted(VARIANTS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm-first", type=float, default=0.0, help="seconds to compile every variant at once first")
    ap.add_argument("--deadline", type=float, default=1e9, help="epoch seconds by which the last measurement ends")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.one, a.batch, a.steps, measure=not a.warm_only)), flush=True)
        return
    results: list[dict] = []

    def save(result: dict) -> None:
        results.append(result)
        print(json.dumps(result), flush=True)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)

    if a.warm_first:
        until = time.monotonic() + a.warm_first
        procs = {
            n: subprocess.Popen(
                [*_child(n, a), "--warm-only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for n in a.names
        }
        for n, p in procs.items():
            try:
                out, err = p.communicate(timeout=max(1.0, until - time.monotonic()))
                save({**_read(out, err, n), "phase": "warm"})
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                save({"name": n, "phase": "warm", "error": f"still compiling after {a.warm_first:.0f} s"})
    for n in a.names:
        left = a.deadline - time.time()
        if left < 45:
            save({"name": n, "error": "not measured: the call's time was spent"})
            continue
        try:
            done = subprocess.run(_child(n, a), capture_output=True, text=True, timeout=left)
            save(_read(done.stdout, done.stderr, n))
        except subprocess.TimeoutExpired:
            save({"name": n, "error": f"over the {left:.0f} s left"})


if __name__ == "__main__":
    main()
