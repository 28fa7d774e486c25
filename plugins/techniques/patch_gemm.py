"""patch-gemm: a convolution whose kernel equals its stride, computed as one GEMM over its patches.

A ViT's patch embedding is such a convolution (16x16 kernel, stride 16, 3
input channels). Its patches do not overlap, so the convolution is exactly a
matrix product: the image unfolded into rows of ``C * kh * kw`` pixels (a
reshape and a permute, no gather) times the weight viewed as
``out x (C * kh * kw)``. On one H200 (torch 2.11, cuDNN 9.19, bfloat16,
cudnn.benchmark on) cuDNN ran ViT-B/16's patch-embedding convolution in a
``precomputed_convolve_sgemm`` kernel, once a step, for 2.0 ms of the 73 ms
compiled step and 0.06 TFLOP (30 TFLOP/s; the model's GEMMs ran near 680):
the 3-channel input suits none of cuDNN's Tensor Core kernels. As a GEMM it
runs in cuBLAS like every other product of the model, and the compiled step
went from 3,403 to 3,574 img/s (``tests/gpu/vit-kernels.toml``).

Every ``nn.Conv2d`` (not a subclass, whose forward may differ) with
``kernel_size == stride``, no padding, no dilation and one group is replaced by
:class:`~ampsuite.plugins.techniques._patch_gemm.PatchGemm`, which holds the very same
``Parameter`` objects (the optimizer is untouched) and computes what the
convolution did, cropping an input whose size is not a multiple of the
kernel as the convolution's floor does. Other convolutions are left alone. A
model with no such convolution is a skip with the reason. Order 22: after
channels-last (20), which it accepts, before AMP (30) and torch-compile (80).
"""

from __future__ import annotations

from ampsuite import Technique, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="patch-gemm",
            summary="a convolution whose kernel equals its stride (ViT patch embedding) as one GEMM over its patches",
            apply=lazy("ampsuite.plugins.techniques._patch_gemm:apply"),
            order=22,
            requires_traits=frozenset({"model"}),
        )
    ]
