"""Would MLPerf's conv + batch-norm fusion reach 7,950 img/s for ResNet-50 on this GPU? (issue 15)

MLPerf's ResNet-50 never writes a normalized activation: each convolution computes its output's
batch statistics in its epilogue (cuDNN "genstats"), and the next convolution applies the batch
norm and the ReLU in its prologue (scale, bias, relu on the input as it loads). The backward pass
does the same in reverse: dgrad with the ReLU's backward in its epilogue, wgrad with the
scale/bias/ReLU prologue. This probe measures, for every convolution of torchvision's ResNet-50 at
the given batch size, PyTorch's cuDNN convolutions (forward, dgrad + wgrad) against the cuDNN
graphs such a fusion needs (nvidia-cudnn-frontend), and the element-wise passes the fusion still
needs (block outputs, batch-norm backward apply), compiled by inductor. It prints one line per
convolution shape and an estimate of the fused step's GPU time, and writes them as JSON.

    python3 conv_bn_probe.py --out probe.json [--batch 256] [--dtype bf16] [--plans 3]

It measures; it is not the technique. Unsupported graphs are recorded with cuDNN's reason.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
import torchvision


@dataclass
class Conv:
    name: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    stride: int
    pad: int
    prologue: bool  # the input is relu(bn(previous conv's output)): the prologue can apply it
    needs_dgrad: bool
    count: int = 1
    timings: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return (self.n, self.c, self.h, self.w, self.k, self.r, self.stride, self.pad, self.prologue, self.needs_dgrad)

    @property
    def out_hw(self) -> tuple[int, int]:
        return (
            (self.h + 2 * self.pad - self.r) // self.stride + 1,
            (self.w + 2 * self.pad - self.r) // self.stride + 1,
        )


def resnet50_convs(batch: int) -> list[Conv]:
    model = torchvision.models.resnet50()
    found: dict[tuple, Conv] = {}
    shapes: dict[str, tuple] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            hooks.append(
                mod.register_forward_hook(lambda m, i, o, name=name: shapes.__setitem__(name, tuple(i[0].shape)))
            )
    with torch.device("meta"):
        model.to("meta")(torch.empty(batch, 3, 224, 224, device="meta"))
    for h in hooks:
        h.remove()
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Conv2d):
            continue
        n, c, h, w = shapes[name]
        leaf = name.rsplit(".", 1)[-1]
        conv = Conv(
            name=name,
            n=n,
            c=c,
            h=h,
            w=w,
            k=mod.out_channels,
            r=mod.kernel_size[0],
            stride=mod.stride[0],
            pad=mod.padding[0],
            prologue=leaf in ("conv2", "conv3"),
            needs_dgrad=name != "conv1",
        )
        if conv.key in found:
            found[conv.key].count += 1
        else:
            found[conv.key] = conv
    return list(found.values())


def cl_stride(shape) -> list[int]:
    _, c, h, w = shape
    return [h * w * c, 1, w * c, c]


def timed(fn, *args, reps: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn(*args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e-3


def scale_bias(channels: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch norm folded into one scale and one bias per channel, in the activations' type:
    cuDNN's runtime fusion refuses float32 operands beside half inputs (session 10 call 2:
    "pointwise_node->numInPorts >= 2 && inputDataTypeX == CUDNN_DATA_FLOAT")."""
    s = torch.rand(1, channels, 1, 1, device="cuda") * 0.1
    b = torch.randn(1, channels, 1, 1, device="cuda") * 0.1
    return s.to(dtype), b.to(dtype)


class Graphs:
    def __init__(self, cudnn, dtype: torch.dtype, plans: int):
        self.cudnn = cudnn
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        self.io = cudnn.data_type.BFLOAT16 if dtype == torch.bfloat16 else cudnn.data_type.HALF
        self.plans = plans

    def graph(self):
        c = self.cudnn
        return c.pygraph(
            io_data_type=self.io,
            intermediate_data_type=c.data_type.FLOAT,
            compute_data_type=c.data_type.FLOAT,
            handle=self.handle,
        )

    def fastest(self, g, pack: dict) -> tuple[float, str]:
        """Build up to self.plans of the heuristics' plans; time each; keep the fastest (as
        cudnn.benchmark does for PyTorch's convolutions)."""
        c = self.cudnn
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([c.heur_mode.A, c.heur_mode.FALLBACK])
        g.check_support()
        best = (float("inf"), "")
        count = g.get_execution_plan_count()
        for index in range(min(count, self.plans)):
            try:
                g.build_plan_at_index(index)
            except Exception:  # a plan that does not build is not a candidate
                continue
            ws = torch.empty(max(g.get_workspace_size_plan_at_index(index), 1), device="cuda", dtype=torch.uint8)
            t = timed(g.execute_plan_at_index, pack, ws, index, self.handle)
            if t < best[0]:
                best = (t, g.get_plan_name_at_index(index))
        if best[1] == "":
            raise RuntimeError(f"none of {count} plans built")
        return best

    def folded_bn(self, g, X, x, pack: dict):
        """scale * X + bias per channel (a batch norm folded into two vectors), its operands added to ``pack``."""
        s, b = scale_bias(x.shape[1], x.dtype)
        S, B = g.tensor_like(s), g.tensor_like(b)
        pack.update({S: s, B: b})
        return g.bias(input=g.scale(input=X, scale=S), bias=B)

    def stats_output(self, tensor, channels: int, pack: dict) -> None:
        """``tensor`` as a float32 [1, C, 1, 1] output of the graph, with its buffer in ``pack``."""
        tensor.set_output(True).set_dim([1, channels, 1, 1]).set_stride([channels, 1, channels, channels])
        tensor.set_data_type(self.cudnn.data_type.FLOAT)
        pack[tensor] = torch.empty(1, channels, 1, 1, device="cuda")

    def forward(self, cv: Conv, x, w, stats: bool):
        g = self.graph()
        X, W = g.tensor_like(x), g.tensor_like(w)
        pack = {X: x, W: w}
        inp = g.relu(input=self.folded_bn(g, X, x, pack)) if cv.prologue else X
        Y = g.conv_fprop(image=inp, weight=W, padding=[cv.pad] * 2, stride=[cv.stride] * 2, dilation=[1, 1])
        p, q = cv.out_hw
        y = torch.empty(cv.n, cv.k, p, q, device="cuda", dtype=x.dtype).to(memory_format=torch.channels_last)
        Y.set_output(True).set_dim(list(y.shape)).set_stride(cl_stride(y.shape)).set_data_type(self.io)
        pack[Y] = y
        if stats:
            for out in g.genstats(input=Y):
                self.stats_output(out, cv.k, pack)
        return self.fastest(g, pack)

    def dgrad(self, cv: Conv, x, w, dy, reductions: int):
        c = self.cudnn
        g = self.graph()
        DY, W = g.tensor_like(dy), g.tensor_like(w)
        pack = {DY: dy, W: w}
        DX = g.conv_dgrad(loss=DY, filter=W, padding=[cv.pad] * 2, stride=[cv.stride] * 2, dilation=[1, 1])
        shape = list(x.shape)
        DX.set_dim(shape).set_stride(cl_stride(shape))
        dx = torch.empty_like(x)
        out = DX
        if cv.prologue:
            X = g.tensor_like(x)
            pack[X] = x
            out = g.relu_backward(loss=DX, input=self.folded_bn(g, X, x, pack))
            out.set_dim(shape).set_stride(cl_stride(shape))
            for source in [out, g.mul(a=out, b=X)][:reductions]:
                self.stats_output(g.reduction(input=source, mode=c.reduction_mode.ADD), cv.c, pack)
        out.set_output(True).set_data_type(self.io)
        pack[out] = dx
        return self.fastest(g, pack)

    def wgrad(self, cv: Conv, x, w, dy):
        g = self.graph()
        X, DY = g.tensor_like(x), g.tensor_like(dy)
        pack = {X: x, DY: dy}
        inp = g.relu(input=self.folded_bn(g, X, x, pack)) if cv.prologue else X
        DW = g.conv_wgrad(image=inp, loss=DY, padding=[cv.pad] * 2, stride=[cv.stride] * 2, dilation=[1, 1])
        # the weight gradient in the compute type: a float32 output left only slow plans (3.9 ms where
        # PyTorch's wgrad took 0.06 ms, session 10 call 2)
        dw = torch.empty(cv.k, cv.c, cv.r, cv.r, device="cuda", dtype=x.dtype).to(memory_format=torch.channels_last)
        DW.set_output(True).set_dim(list(dw.shape)).set_stride(cl_stride(dw.shape)).set_data_type(self.io)
        pack[DW] = dw
        return self.fastest(g, pack)


def measure_conv(cv: Conv, graphs: Graphs | None, dtype: torch.dtype) -> None:
    x = torch.randn(cv.n, cv.c, cv.h, cv.w, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(cv.k, cv.c, cv.r, cv.r, device="cuda", dtype=dtype) * 0.05).to(memory_format=torch.channels_last)
    p, q = cv.out_hw
    dy = torch.randn(cv.n, cv.k, p, q, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    args = ([cv.stride] * 2, [cv.pad] * 2, [1, 1], False, [0, 0], 1)
    t = cv.timings
    t["torch_fwd"] = timed(lambda: F.conv2d(x, w, None, cv.stride, cv.pad))
    mask = [cv.needs_dgrad, True, False]
    t["torch_bwd"] = timed(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *args, mask))
    t["torch_wgrad"] = timed(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *args, [False, True, False]))
    if cv.needs_dgrad:
        t["torch_dgrad"] = timed(
            lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *args, [True, False, False])
        )
    if graphs is None:
        return
    steps = {
        "fused_fwd": lambda: graphs.forward(cv, x, w, stats=True),
        "graph_fwd_plain": lambda: graphs.forward(cv, x, w, stats=False) if cv.prologue else None,
        "fused_wgrad": lambda: graphs.wgrad(cv, x, w, dy),
    }
    if cv.needs_dgrad:
        steps["fused_dgrad"] = lambda: graphs.dgrad(cv, x, w, dy, reductions=0)
        if cv.prologue:
            steps["fused_dgrad_stats"] = lambda: graphs.dgrad(cv, x, w, dy, reductions=2)
    for name, step in steps.items():
        try:
            got = step()
        except Exception as exc:  # cuDNN's reason is the finding
            cv.errors[name] = f"{type(exc).__name__}: {' '.join(str(exc).split())[-600:]}"
            continue
        if got is not None:
            t[name], t[name + "_plan"] = got


# The element-wise work a fused ResNet-50 still does, compiled by inductor: the block output
# (BN3 + shortcut + ReLU) forward; its backward (ReLU mask, the two batch-norm reductions); the
# batch-norm backward's apply (dY = a*dZ + b*X + c) once per batch norm.
def block_out(y3, s3, b3, sc, ss, bs):
    return torch.relu(y3 * s3 + b3 + sc * ss + bs).to(y3.dtype)


def block_back(dout, out, y3, sc):
    dz = torch.where(out > 0, dout, torch.zeros_like(dout)).float()
    return dz.sum((0, 2, 3)), (dz * y3).sum((0, 2, 3)), (dz * sc).sum((0, 2, 3))


def bn_apply(dz, x, a, b, c):
    return (a * dz + b * x + c).to(dz.dtype)


def bn_stats(dz, x):
    dz = dz.float()
    return dz.sum((0, 2, 3)), (dz * x).sum((0, 2, 3))


def elementwise(batch: int, dtype: torch.dtype) -> dict:
    """Seconds a step for the element-wise passes of a fused ResNet-50, by stage shape."""
    stages = [(64, 256, 56, 3), (128, 512, 28, 4), (256, 1024, 14, 6), (512, 2048, 7, 3)]
    fns = {
        n: torch.compile(f, dynamic=False)
        for n, f in [
            ("block_out", block_out),
            ("block_back", block_back),
            ("bn_apply", bn_apply),
            ("bn_stats", bn_stats),
        ]
    }
    total: dict[str, float] = {"block_out": 0.0, "block_back": 0.0, "bn_apply": 0.0, "bn_stats_unfused": 0.0}
    for mid, out, hw, blocks in stages:

        def t(c, s=hw):
            return torch.randn(batch, c, s, s, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)

        def v(c):
            return torch.rand(1, c, 1, 1, device="cuda")

        y3, sc, dout = t(out), t(out), t(out)
        total["block_out"] += blocks * timed(fns["block_out"], y3, v(out), v(out), sc, v(out), v(out))
        total["block_back"] += blocks * timed(fns["block_back"], dout, y3, y3, sc)
        # per block: bn3 and (first block) the shortcut's bn apply at the output size, bn1/bn2 at mid
        m = t(mid)
        apply_out = timed(fns["bn_apply"], y3, sc, v(out), v(out), v(out))
        apply_mid = timed(fns["bn_apply"], m, m, v(mid), v(mid), v(mid))
        stats_mid = timed(fns["bn_stats"], m, m)
        total["bn_apply"] += (blocks + 1) * apply_out + 2 * blocks * apply_mid
        total["bn_stats_unfused"] += 2 * blocks * stats_mid
    # the stem: bn + relu + max pool, forward and backward, as inductor compiles it today
    stem = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    head = torch.nn.Sequential(stem.bn1, stem.relu, stem.maxpool)
    head_c = torch.compile(head)
    y = torch.randn(batch, 64, 112, 112, device="cuda", dtype=dtype, requires_grad=True).to(
        memory_format=torch.channels_last
    )
    y.retain_grad()

    def stem_step():
        with torch.autocast("cuda", dtype=dtype):
            head_c(y).float().sum().backward()

    total["stem"] = timed(stem_step)
    return total


def write(path: str, report: dict) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--plans", type=int, default=3)
    ap.add_argument("--budget", type=float, default=400.0, help="seconds; shapes left are recorded as not measured")
    a = ap.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    torch.backends.cudnn.benchmark = True
    start = time.monotonic()
    report: dict = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(),
        "batch": a.batch,
        "dtype": a.dtype,
    }
    try:
        import cudnn

        report["cudnn_frontend"] = cudnn.__version__
        report["cudnn_backend"] = cudnn.backend_version()
        graphs: Graphs | None = Graphs(cudnn, dtype, a.plans)
    except Exception as exc:
        report["frontend_error"] = traceback.format_exc()[-2000:]
        print("cudnn frontend unavailable:", exc, flush=True)
        graphs = None
    convs = resnet50_convs(a.batch)
    for cv in convs:
        if time.monotonic() - start > a.budget:
            cv.errors["skipped"] = "budget"
            continue
        measure_conv(cv, graphs, dtype)
        print(
            f"{cv.name:24s} x{cv.count} {cv.c}->{cv.k} {cv.r}x{cv.r}/{cv.stride} {cv.h}x{cv.w} "
            + " ".join(f"{k}={v * 1e3:.3f}" for k, v in cv.timings.items() if isinstance(v, float))
            + (f" errors={cv.errors}" if cv.errors else ""),
            flush=True,
        )
        report["convs"] = [asdict(c) for c in convs]
        write(a.out, report)
    try:
        report["elementwise"] = elementwise(a.batch, dtype)
    except Exception:
        report["elementwise_error"] = traceback.format_exc()[-2000:]

    def total(key: str, fallback: str | None = None) -> float | None:
        s = 0.0
        for cv in convs:
            v = cv.timings.get(key, cv.timings.get(fallback) if fallback else None)
            if v is None:
                if key == "fused_dgrad" and not cv.needs_dgrad:
                    continue
                return None
            s += cv.count * v
        return s

    report["totals_ms"] = {
        "torch_conv_fwd": total("torch_fwd"),
        "torch_conv_bwd": total("torch_bwd"),
        "fused_fwd": total("fused_fwd"),
        "fused_dgrad": total("fused_dgrad"),
        "fused_wgrad": total("fused_wgrad"),
    }
    report["totals_ms"] = {k: (v * 1e3 if v is not None else None) for k, v in report["totals_ms"].items()}
    report["convs"] = [asdict(c) for c in convs]
    report["seconds"] = time.monotonic() - start
    write(a.out, report)
    print(json.dumps({k: report.get(k) for k in ("totals_ms", "elementwise", "seconds")}, indent=1), flush=True)


if __name__ == "__main__":
    main()
