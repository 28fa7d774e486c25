"""Inductor settings against the tuned ResNet-50 recipe, in a plain loop (issue 15).

The recipe is bf16 autocast + channels-last + torch.compile (7,139 img/s, session 5); its compiled
step spends half its GPU time in inductor's batch-norm kernels. This loop tries inductor settings
that ampsuite's torch-compile technique does not expose, one per process (inductor's settings and
caches are process-wide), and prints img/s for each:

    python3 inductor_knobs.py --out knobs.json NAME [NAME ...]   # names: see SETTINGS

It is a scouting loop: a setting that pays here becomes a torch-compile option, measured as a cell.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

SETTINGS: dict[str, dict] = {
    "default": {},
    "pointwise-autotune": {"max_autotune_pointwise": True},
    "conv1x1-as-mm": {"conv_1x1_as_mm": True},
    "no-persistent-reductions": {"triton.persistent_reductions": False},
    "aggressive-fusion": {"aggressive_fusion": True},
    "no-split-reductions": {"split_reductions": False},
    "coordinate-descent": {"coordinate_descent_tuning": True},
    "pointwise-autotune-cd": {"max_autotune_pointwise": True, "coordinate_descent_tuning": True},
    # session 11: the reduction schedules inductor offers for batch norm's column reductions
    # (channels-last: each channel sums over batch x height x width, the channels contiguous)
    "cooperative-reductions": {"triton.cooperative_reductions": True},
    "tile-reductions": {"triton.tile_reductions": True},
    "nd-tiling": {"triton.prefer_nd_tiling": True},
    "tile-reductions-nd": {"triton.tile_reductions": True, "triton.prefer_nd_tiling": True},
    "max-tiles-3": {"triton.max_tiles": 3},
    "multi-kernel": {"triton.multi_kernel": 1},
    "combo-kernels": {"combo_kernels": True},
    "mix-order-on": {"triton.mix_order_reduction": True},
    "mix-order-off": {"triton.mix_order_reduction": False},
    "benchmark-fusion": {"benchmark_fusion": True},
    "no-loop-ordering": {"loop_ordering_after_fusion": False},
}


def defaults() -> dict[str, object]:
    """This torch's value of every setting above, so a setting that is already the default shows."""
    import torch._inductor.config as config

    found: dict[str, object] = {}
    for key in sorted({k for settings in SETTINGS.values() for k in settings}):
        value: object = config
        for part in key.split("."):
            value = getattr(value, part, "absent")
        found[key] = value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)
    return found


def measure(name: str, batch: int, steps: int) -> dict:
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    compiled = torch.compile(model, options=dict(SETTINGS[name]) or None)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    start = time.monotonic()
    step()
    torch.cuda.synchronize()
    first = time.monotonic() - start
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
    times.sort()
    median = times[len(times) // 2]
    return {
        "name": name,
        "torch": torch.__version__,
        "defaults": defaults() if name == "default" else {},
        "settings": SETTINGS[name],
        "first_step_s": first,
        "step_ms": [t * 1e3 for t in times],
        "median_ms": median * 1e3,
        "img_s": batch / median,
        "spread": (times[-1] - times[0]) / median,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+", choices=sorted(SETTINGS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for one setting, compile included")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.one, a.batch, a.steps)), flush=True)
        return
    results = []
    for name in a.names:
        cmd = [
            sys.executable,
            __file__,
            "--one",
            name,
            "--out",
            a.out,
            "--batch",
            str(a.batch),
            "--steps",
            str(a.steps),
            name,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            result = json.loads(line) if line.startswith("{") else {"name": name, "error": done.stderr[-1500:]}
        except subprocess.TimeoutExpired:
            result = {"name": name, "error": f"over {a.timeout:.0f} s (compile included)"}
        results.append(result)
        print(json.dumps(result), flush=True)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
