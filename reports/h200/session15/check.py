"""Session 15's check of maxpool-offsets' Triton backward on one H200, before any ResNet-50 compile.

    PYTHONPATH=. python3 reports/h200/session15/check.py    # from the checkout's root

At the stem pool's shape (256x64x112x112 fp16, channels-last, 3x3 stride 2 padding 1): the input gradient of
the Triton kernel against the inline gather and ATen's pool (equal up to a pixel's summation order), and the
backward alone timed three ways (CUDA-event medians): ATen's max_pool2d backward with its int64 indices, the
inline gather compiled by inductor on its own, and the kernel; then the kernel's tile swept (pixels a program x
warps; _maxpool_triton's constants are one of them). One JSON line.

The kernel's first form (one element a program lane, int64 index arithmetic) took 0.971 ms in the first
try's call 1, against 0.481 for the inline gather compiled alone and 1.963 for ATen's backward. The tiled form
(check.jsonl, call 2): 0.499 ms against 0.502 and 2.009, its gradient ATen's in every element. The sweep
launches the kernel without the operator around it and times 0.58-1.10 ms for every tile, the default's 32x4
at 0.77, slower than the same kernel through the operator. Why is not established (the two launch paths
differ; one timed launch may include host time), so the sweep does not rank the tiles and the default stays.
"""

from __future__ import annotations

import json
import statistics

import torch
import torch.nn.functional as F

from plugins.techniques import _maxpool_triton
from plugins.techniques._maxpool_offsets import kernel_backward, pool_backward, pool_forward

CL = torch.channels_last
GEOMETRY = ((3, 3), (2, 2), (1, 1))


def timed(fn, warmup: int = 10, steps: int = 50) -> float:
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
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 64, 112, 112, device="cuda", dtype=torch.float16).relu().contiguous(memory_format=CL)
    out, offset = pool_forward(x, *GEOMETRY)
    grad = torch.randn_like(out).contiguous(memory_format=CL)
    kernel = kernel_backward(grad, offset, (112, 112), *GEOMETRY, True)
    inline = pool_backward(grad, offset, (112, 112), *GEOMETRY)
    leaf = x.detach().requires_grad_(True)
    ref_out, indices = F.max_pool2d_with_indices(leaf, 3, 2, 1)
    ref_out.backward(grad)
    assert leaf.grad is not None
    exact = torch.zeros(256 * 64 * 112 * 112, device="cuda", dtype=torch.float64)
    flat = (indices + torch.arange(256 * 64, device="cuda").view(256, 64, 1, 1) * 112 * 112).flatten()
    exact.index_add_(0, flat, grad.double().flatten())
    exact = exact.view(256, 64, 112, 112)
    inline_c = torch.compile(lambda g, o: pool_backward(g, o, (112, 112), *GEOMETRY))
    inline_c(grad, offset)
    result = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "outputs_equal": bool(torch.equal(out, ref_out.detach())),
        "kernel_channels_last": kernel.is_contiguous(memory_format=CL),
        "kernel_error_vs_exact": (kernel.double() - exact).abs().max().item(),
        "inline_error_vs_exact": (inline.double() - exact).abs().max().item(),
        "aten_error_vs_exact": (leaf.grad.double() - exact).abs().max().item(),
        "kernel_vs_aten_mismatch_fraction": (kernel != leaf.grad).float().mean().item(),
        "ms": {
            "aten_backward": timed(
                lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                    grad, x, [3, 3], [2, 2], [1, 1], [1, 1], False, indices
                )
            ),
            "inline_compiled": timed(lambda: inline_c(grad, offset)),
            "kernel": timed(lambda: kernel_backward(grad, offset, (112, 112), *GEOMETRY, True)),
        },
    }
    out = torch.empty_like(kernel)
    sweep = {}
    for block_pixels in (8, 16, 32, 64, 128):
        for num_warps in (2, 4, 8):
            if block_pixels * 64 // (32 * num_warps) < 8:  # fewer than 8 values a thread: no 16-byte accesses
                continue

            def launch(bp: int = block_pixels, nw: int = num_warps) -> None:
                _maxpool_triton.launch(grad, offset, out, [3, 3], [2, 2], [1, 1], block_pixels=bp, num_warps=nw)

            launch()
            assert torch.equal(out, kernel), (block_pixels, num_warps)
            sweep[f"{block_pixels}x{num_warps}"] = timed(launch)
    result["sweep_ms"] = sweep
    result["default_tile"] = f"{_maxpool_triton.BLOCK_PIXELS}x{_maxpool_triton.NUM_WARPS}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
