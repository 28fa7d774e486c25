"""ResNet-50's batch norm + ReLU layers: inductor's kernels against one persistent kernel a pass.

    python3 reports/h200/bn_persistent.py [--out FILE.json] [--no-inductor] [--no-compiled]     on a CUDA GPU

Session 20 (docs/tune.md) found inductor's batch norms without a residual add at 1.3-2.2x the traffic bound, and
named a persistent kernel with a grid barrier as the lead: ``plugins/techniques/_persistent_bn_kernels.py``. For
each shape where ResNet-50 has ``relu(batch_norm(x))`` (batch 256, fp16, channels-last, float32 weights) this
times forward + backward as CUDA graph replays, as ``bn_kernels.py`` does:

* ``inductor``: ``F.batch_norm`` + ReLU compiled with the tuned recipe's inductor settings;
* ``persistent``: the two kernels (+ the running statistics' update), eager, for each of ``CONFIGS``;
* ``persistent_compiled``: the same with the fastest configuration, inside torch.compile as a cell runs it.

In that order, all shapes a phase, each timing printed as it ends: the kernels' sweep compiles in seconds, each of
inductor's shapes in tens (session 22's run gave no line in 200 s while it still went shape by shape).

``error`` is the largest difference from PyTorch of the output and the gradients, relative in the norm. Weighted by
how many layers have each shape, the totals say what the technique could take off a step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import bn_kernels as bk
import torch

from plugins.techniques import _persistent_bn_kernels as pk

CONFIGS = [(128, 64, 4, 4), (128, 64, 8, 4), (64, 64, 8, 4)]
"""(tile rows, tile channels, warps, programs an SM) tried for each shape."""

DOWNSAMPLE = {(256, 56, 56), (512, 28, 28), (1024, 14, 14), (2048, 7, 7)}
"""The shapes ``bn_kernels.shapes`` counts only for the downsampling batch norm, which no ReLU follows."""


def persistent(x: Any, weight: Any, bias: Any, identity: Any, running_mean: Any, running_var: Any) -> Any:
    return pk.bn_relu(x, weight, bias, running_mean, running_var, bk.MOMENTUM, bk.EPS)


def _set(config: tuple[int, int, int, int]) -> None:
    pk.TILE_ROWS, pk.TILE_CHANNELS, pk.NUM_WARPS, pk.PER_SM = config


def _error(fn: Any, args: list[Any], grad: torch.Tensor) -> float:
    ours, theirs = [bk._twin(t) for t in args], [bk._twin(t) for t in args]
    a, b = fn(*ours), bk.reference(*theirs)
    a.backward(grad)
    b.backward(grad)
    pairs = [(a, b)] + [(ours[i].grad, theirs[i].grad) for i in range(3)]
    pairs += [(ours[4], theirs[4]), (ours[5], theirs[5])]
    return max(float((p.float() - q.float()).norm() / (q.float().norm() + 1e-6)) for p, q in pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run under TRITON_INTERPRET=1, no timing")
    parser.add_argument("--no-inductor", action="store_true", help="leave out inductor's timings")
    parser.add_argument("--no-compiled", action="store_true", help="leave out the kernels inside torch.compile")
    args = parser.parse_args()
    import torch._dynamo
    import torch._inductor.config as inductor

    settings = {
        "triton.tile_reductions": True,
        "triton.prefer_nd_tiling": True,
        "max_autotune_pointwise": True,
        "combo_kernels": True,
    }
    settings = {k: v for k, v in settings.items() if bk._has(inductor, k)}
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    dev, n, dtype = args.device, args.batch, torch.float16
    print(f"{_name()} torch {torch.__version__}; batch {n}", flush=True)
    # first the barrier itself on small shapes, one launch a pass, against PyTorch
    for shape in [(2, 8, 5, 3), (4, 64, 7, 7), (3, 70, 4, 4), (2, 130, 3, 5), (16, 256, 14, 14)]:
        a = bk._inputs(*shape, False, dev, dtype)
        g = torch.randn(shape, device=dev).to(dtype).contiguous(memory_format=torch.channels_last)
        print(f"check {shape}: error {_error(persistent, a, g):.1e}", flush=True)
    todo = [
        (c, h, w, count)
        for (c, h, w, has_id), count in sorted(bk.shapes().items())
        if not has_id and (c, h, w) not in DOWNSAMPLE
    ]
    rows: list[dict[str, Any]] = []
    inputs, best_config = {}, {}
    for c, h, w, count in todo:
        a = bk._inputs(n, c, h, w, False, dev, dtype)
        grad = torch.randn(n, c, h, w, device=dev).to(dtype).contiguous(memory_format=torch.channels_last)
        inputs[c, h, w] = (a, grad)
        row: dict[str, Any] = {"C": c, "H": h, "W": w, "count": count, "sweep": {}}
        rows.append(row)
        for config in CONFIGS:
            _set(config)
            row["sweep"][str(config)] = bk._time(persistent, a, grad, dev, args.iters)
            print(f"  {c}x{h}x{w} {config} {row['sweep'][str(config)] * 1e3:.3f} ms", flush=True)
        best_config[c, h, w] = min(CONFIGS, key=lambda config: row["sweep"][str(config)])
        best = str(best_config[c, h, w])
        row["config"], row["persistent"] = best, row["sweep"][best]
        _set(best_config[c, h, w])
        row["error"] = _error(persistent, a, grad)
        print(
            f"{c}x{h}x{w} x{count}: persistent {row['persistent'] * 1e3:.3f} {best}, error {row['error']:.1e}",
            flush=True,
        )
    _save(args.out, n, rows)
    for phase, fn, skip in [
        ("inductor", bk.reference, args.no_inductor),
        ("persistent_compiled", persistent, args.no_compiled),
    ]:
        for row in [] if skip else rows:
            a, grad = inputs[row["C"], row["H"], row["W"]]
            _set(best_config[row["C"], row["H"], row["W"]])
            torch._dynamo.reset()
            row[phase] = bk._time(torch.compile(fn, options=settings, dynamic=False), a, grad, dev, args.iters)
            print(f"  {row['C']}x{row['H']}x{row['W']} {phase} {row[phase] * 1e3:.3f} ms", flush=True)
            _save(args.out, n, rows)
    return 0


def _name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def _save(out: str | None, batch: int, rows: list[dict[str, Any]]) -> None:
    """The rows so far and their totals weighted by layer counts, printed and written: a timeout keeps what ran."""
    totals = Counter[str]()
    for row in rows:
        for k in ("inductor", "persistent", "persistent_compiled"):
            if k in row:
                totals[k] += row[k] * row["count"]
    print("weighted: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in totals.items()), flush=True)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"device": _name(), "torch": torch.__version__, "batch": batch,
                       "rows": rows, "totals": dict(totals)}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
