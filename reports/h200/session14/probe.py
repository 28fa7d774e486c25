"""Session 14's probes on one H200, before any ResNet-50 compile (issue 15's last 4%).

    python3 reports/h200/session14/probe.py pool            # the stem max pool, compiled: ATen's lowering vs maxpool-offsets
    python3 reports/h200/session14/probe.py cudnn LIMIT     # eager fp16 channels-last ResNet-50 step, cudnn.benchmark_limit=LIMIT
    python3 reports/h200/session14/probe.py stem            # the stem convolution with 3 input channels against 4 (zero-padded)
    python3 reports/h200/session14/probe.py stemctx [N DEV] # ResNet-50's stem and the pool's two consumers, compiled, fp16:
                                                            # ATen's pool, maxpool-offsets, and maxpool-offsets whose backward
                                                            # output inductor must store (its consumers then read it)

Each prints one JSON line. Timings: CUDA events around each step, median of the timed steps after warmup.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from plugins.techniques._maxpool_offsets import OffsetMaxPool2d

CL = torch.channels_last


def timed(fn, warmup: int = 10, steps: int = 40) -> tuple[float, float]:
    """Median and (max-min)/median of ``steps`` CUDA-event timings of ``fn()``, in ms."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4)
    return med, (q[2] - q[0]) / med


def kernels(fn) -> list[tuple[str, float]]:
    """The CUDA kernels of one call of ``fn`` and their ms, by the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.key[:110], e.device_time_total / 1e3) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])[:8]


def pool() -> None:
    torch.manual_seed(0)
    x0 = torch.randn(256, 64, 112, 112, device="cuda", dtype=torch.float16).to(memory_format=CL)
    g = torch.randn(256, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=CL)
    ref = nn.MaxPool2d(3, 2, 1)
    results = {}
    outs = {}
    for name, module in (("aten", ref), ("offsets", OffsetMaxPool2d(ref))):
        f = torch.compile(lambda x, m=module: m(torch.relu(x)))
        x = x0.clone().requires_grad_()

        def step(f=f, x=x):
            x.grad = None
            f(x).backward(g)

        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        med, iqr = timed(step)
        fwd, _ = timed(lambda f=f, x=x: f(x))
        outs[name] = (f(x).detach(), x.grad.detach().clone())
        results[name] = {"fwd_bwd_ms": med, "iqr": iqr, "fwd_ms": fwd, "compile_s": compile_s, "kernels": kernels(step)}
    same_out = torch.equal(outs["aten"][0], outs["offsets"][0])
    grad_diff = (outs["aten"][1].float() - outs["offsets"][1].float()).abs().max().item()
    print(json.dumps({"probe": "pool", "same_output": same_out, "grad_max_abs_diff": grad_diff, **results}))


def cudnn(limit: int) -> None:
    import torchvision

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.benchmark_limit = limit
    model = torchvision.models.resnet50().cuda().to(memory_format=CL)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    scaler = torch.amp.GradScaler()
    x = torch.randn(256, 3, 224, 224, device="cuda").to(memory_format=CL)
    y = torch.randint(0, 1000, (256,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    med, iqr = timed(step, warmup=5, steps=30)
    convs = [k for k in kernels(step) if "xmma" in k[0] or "conv" in k[0].lower() or "nvjet" in k[0]]
    print(
        json.dumps(
            {
                "probe": "cudnn",
                "limit": limit,
                "step_ms": med,
                "iqr": iqr,
                "first_step_s": first,
                "top_conv_kernels": convs,
            }
        )
    )


def stem() -> None:
    torch.backends.cudnn.benchmark = True
    res = {}
    for c in (3, 4, 8):
        x = torch.randn(256, c, 224, 224, device="cuda", dtype=torch.float16).to(memory_format=CL)
        conv = nn.Conv2d(c, 64, 7, 2, 3, bias=False).cuda().half().to(memory_format=CL)
        gy = torch.randn(256, 64, 112, 112, device="cuda", dtype=torch.float16).to(memory_format=CL)

        def step(conv=conv, x=x, gy=gy):
            conv.weight.grad = None
            conv(x).backward(gy)

        fwd, _ = timed(lambda conv=conv, x=x: conv(x))
        both, iqr = timed(step)
        res[f"c{c}"] = {"fwd_ms": fwd, "fwd_wgrad_ms": both, "iqr": iqr, "kernels": kernels(step)}
    print(json.dumps({"probe": "stem", **res}))


class _Realized(torch.autograd.Function):
    """maxpool-offsets whose input gradient is a stored buffer: ``_inductor_test.realize`` (inductor's own test op)."""

    @staticmethod
    def forward(ctx, x, kernel, stride, padding):
        from plugins.techniques._maxpool_offsets import pool_forward

        out, offset = pool_forward(x, kernel, stride, padding)
        ctx.save_for_backward(offset)
        ctx.geometry = (tuple(x.shape[-2:]), kernel, stride, padding)
        return out

    @staticmethod
    def backward(ctx, grad):
        import torch._inductor.test_operators

        from plugins.techniques._maxpool_offsets import pool_backward

        (offset,) = ctx.saved_tensors
        return torch.ops._inductor_test.realize(pool_backward(grad, offset, *ctx.geometry)), None, None, None


class Stem(nn.Module):
    def __init__(self, pool: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn = nn.BatchNorm2d(64)
        self.a = nn.Conv2d(64, 64, 1, bias=False)
        self.b = nn.Conv2d(64, 256, 1, bias=False)
        self.kind = pool

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        if self.kind == "aten":
            x = F.max_pool2d(x, 3, 2, 1)
        elif self.kind == "offsets":
            x = OffsetMaxPool2d(nn.MaxPool2d(3, 2, 1))(x)
        else:
            x = _Realized.apply(x, (3, 3), (2, 2), (1, 1))
        return self.a(x).float().mean() + self.b(x).float().mean()


def stemctx(n: int, device: str) -> None:
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    x = torch.randn(n, 3, 224, 224, device=device).to(memory_format=CL)
    res = {}
    for kind in ("aten", "offsets", "realized"):
        torch.manual_seed(0)
        model = Stem(kind).to(device).to(memory_format=CL)
        f = torch.compile(model)

        def step(f=f, model=model):
            model.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=torch.float16 if device == "cuda" else torch.bfloat16):
                loss = f(x)
            loss.backward()

        t0 = time.perf_counter()
        step()
        first = time.perf_counter() - t0
        if device != "cuda":
            res[kind] = {"first_s": first, "grad": model.conv.weight.grad.float().norm().item()}
            continue
        med, iqr = timed(step, warmup=5, steps=30)
        res[kind] = {
            "step_ms": med,
            "iqr": iqr,
            "first_s": first,
            "grad_norm": model.conv.weight.grad.float().norm().item(),
            "kernels": kernels(step),
        }
    print(json.dumps({"probe": "stemctx", "batch": n, **res}))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "pool":
        pool()
    elif what == "cudnn":
        cudnn(int(sys.argv[2]))
    elif what == "stemctx":
        stemctx(int(sys.argv[2]) if len(sys.argv) > 2 else 256, sys.argv[3] if len(sys.argv) > 3 else "cuda")
    else:
        stem()
