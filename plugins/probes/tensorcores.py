"""Tensor Core diagnostics: which products a step runs, in which dtype, and whether they are aligned.

One eager forward+backward runs under a ``TorchDispatchMode`` that sees every
ATen op after autograd and autocast have done their work, so the dtype it
records is the dtype that really reached the kernel, under whatever the
cell's techniques changed. Two tables come out:

* ``diagnostics["tensor_cores"]``: every matrix-class op (the ops that
  ``torch.utils.flop_counter`` counts: mm, addmm, bmm, baddbmm, convolutions
  and their backward, the scaled-dot-product-attention kernels), deduplicated
  by (op, shapes, dtype, phase) with counts, and whether its dimensions suit
  Tensor Cores. One warning per distinct float16/bfloat16 op that does not.
* ``diagnostics["precision_ops"]``: the dtype computed by the numerically
  sensitive ops (layer norm, softmax, batch norm, log-softmax and the losses),
  so a technique that keeps them in float32 can be seen to do so.

The alignment rule (NVIDIA's "multiples of 8" for 16-bit Tensor Core
kernels): for products M, N and K; for convolutions the input and output
channels, except an input of at most 4 channels (an image entering the first
layer, which cuDNN pads itself); for attention the head dimensions.
``misaligned`` counts the distinct float16/bfloat16 ops that break it (the
warnings); float32/TF32 ops carry ``aligned`` for information only.

Dtype classes: ``float16``, ``bfloat16``, ``tf32`` (a float32 op on CUDA while
TF32 is allowed for it: cuDNN's flag for convolutions, cuBLAS's for products;
fused attention kernels stay ``float32``),
``float32``, or the tensor dtype's name otherwise. (TF32-like modes of CPU
backends are not reported.)
"""

from __future__ import annotations

from ampsuite import Probe, hookimpl, lazy


@hookimpl
def ampsuite_probes() -> list[Probe]:
    return [
        Probe(
            name="tensor-cores",
            summary="the matmul/conv shapes a step runs, the dtype reaching each, and misaligned fp16/bf16 shapes",
            inspect=lazy("ampsuite.plugins.probes._tensorcores:inspect"),
            order=45,
        )
    ]
