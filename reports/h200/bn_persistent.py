"""ResNet-50's batch norm + ReLU layers: inductor's kernels against one persistent kernel a pass.

    python3 reports/h200/bn_persistent.py [--out FILE.json]     on a CUDA GPU (~3 minutes on an H200)

Session 20 (docs/tune.md) found inductor's batch norms without a residual add at 1.3-2.2x the traffic bound, and
named a persistent kernel with a grid barrier as the lead: ``plugins/techniques/_persistent_bn_kernels.py``. For
each shape where ResNet-50 has ``relu(batch_norm(x))`` (batch 256, fp16, channels-last, float32 weights) this
times forward + backward as CUDA graph replays, as ``bn_kernels.py`` does:

* ``inductor``: ``F.batch_norm`` + ReLU compiled with the tuned recipe's inductor settings;
* ``persistent``: the two kernels (+ the running statistics' update), eager, for each of ``CONFIGS``;
* ``persistent_compiled``: the same with the fastest configuration, inside torch.compile as a cell runs it.

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

CONFIGS = [(128, 64, 4, 4), (128, 64, 4, 2), (64, 64, 4, 4)]
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
    dev, n, dtype = "cuda", args.batch, torch.float16
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}; batch {n}", flush=True)
    # first the barrier itself on small shapes, one launch a pass, against PyTorch
    for shape in [(2, 8, 5, 3), (4, 64, 7, 7), (3, 70, 4, 4), (2, 130, 3, 5), (16, 256, 14, 14)]:
        a = bk._inputs(*shape, False, dev, dtype)
        g = torch.randn(shape, device=dev).to(dtype).contiguous(memory_format=torch.channels_last)
        print(f"check {shape}: error {_error(persistent, a, g):.1e}", flush=True)
    rows, totals = [], Counter[str]()
    for (c, h, w, has_id), count in sorted(bk.shapes().items()):
        if has_id or (c, h, w) in DOWNSAMPLE:
            continue
        a = bk._inputs(n, c, h, w, False, dev, dtype)
        grad = torch.randn(n, c, h, w, device=dev).to(dtype).contiguous(memory_format=torch.channels_last)
        row: dict[str, Any] = {"C": c, "H": h, "W": w, "count": count}
        row["inductor"] = bk._time(
            torch.compile(bk.reference, options=settings, dynamic=False), a, grad, dev, args.iters
        )
        # a line a timing: session 22's run timed out after the checks with no line to say where
        print(f"  {c}x{h}x{w} inductor {row['inductor'] * 1e3:.3f} ms", flush=True)
        sweep = {}
        for config in CONFIGS:
            _set(config)
            sweep[str(config)] = bk._time(persistent, a, grad, dev, args.iters)
            print(f"  {c}x{h}x{w} {config} {sweep[str(config)] * 1e3:.3f} ms", flush=True)
        best = min(sweep, key=sweep.__getitem__)
        row["sweep"] = sweep
        row["config"] = best
        row["persistent"] = sweep[best]
        _set(tuple(json.loads(best.replace("(", "[").replace(")", "]"))))
        row["error"] = _error(persistent, a, grad)
        torch._dynamo.reset()
        row["persistent_compiled"] = bk._time(
            torch.compile(persistent, options=settings, dynamic=False), a, grad, dev, args.iters
        )
        rows.append(row)
        for k in ("inductor", "persistent", "persistent_compiled"):
            totals[k] += row[k] * count
        print(
            f"{c}x{h}x{w} x{count}: inductor {row['inductor'] * 1e3:.3f} ms, persistent {row['persistent'] * 1e3:.3f}"
            f" {best}, compiled {row['persistent_compiled'] * 1e3:.3f}, error {row['error']:.1e}; "
            + " ".join(f"{k}={v * 1e3:.3f}" for k, v in sweep.items()),
            flush=True,
        )
    print("weighted: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in totals.items()), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": n,
                       "rows": rows, "totals": dict(totals)}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
