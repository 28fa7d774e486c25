"""cuDNN batch norm kept whole under torch.compile.

In eager mode PyTorch runs batch norm on CUDA through cuDNN when the input is
float16 or float32 (bfloat16 goes to PyTorch's native kernels); on channels-last
tensors in training cuDNN picks its persistent NHWC kernels. That is why
ResNet-50 with amp-fp16 + channels-last runs 20% faster than with amp-bf16 on an
H200 (torch 2.11.0+cu130, cuDNN 9.19, 2026-11-30). torch.compile never sees
that choice: AOTAutograd decomposes batch norm into reductions and element-wise
ops and inductor generates its own kernels for them (47% of a compiled
ResNet-50 step on that H200, by the kernels probe).

This technique replaces, in training mode, the forward of every
``BatchNorm1d/2d/3d`` module with one custom operator
(``ampsuite_resnet_kernels::batch_norm``, its backward
``ampsuite_resnet_kernels::batch_norm_backward``) that calls
``aten.cudnn_batch_norm`` on CUDA. A custom operator is opaque to the compiler,
so cuDNN keeps the normalisation while inductor compiles the rest; the price is
that inductor can no longer fuse the ReLU or residual add that follows into it.
Whether that trade wins is what a cell measures.

Running statistics and ``num_batches_tracked`` update as ``nn.BatchNorm`` does;
the module structure and parameter names stay, so probes, checkpoints and other
techniques see the same model. Evaluation mode, modules without running
statistics or affine parameters, and ``SyncBatchNorm`` keep their own forward.
Measured on an NVIDIA H200 (torch 2.11.0+cu130, cuDNN 9.19; 2026-11-30,
``ampsuite run tests/gpu/cudnn-bn.toml -p ampsuite.plugins.probes.kernels --no-peaks``,
now this package's suites/resnet50-cudnn-bn.toml), it loses: compiled
ResNet-50 batch 256 in fp16 + channels-last took 37.1 ms of GPU time a step
with it against 34.6 ms without (element-wise kernels 6.2 ms against 3.3: the
ReLU and residual adds no longer fuse), 6,730 against 7,310 img/s with CUDA
graphs hiding the host (fp16 without a loss scale), and eager fp16 +
channels-last went from 5,771 to 3,806 img/s (the same cuDNN kernels; each
call of a Python custom operator costs host time). It stays a technique so
that a suite can try it on other GPUs and cuDNN versions.

On a device without cuDNN the operator runs PyTorch's native kernels (that is
what the CPU tests exercise); the technique itself requires CUDA. cuDNN's batch
norm takes float16 or float32 input with float32 weights: a bfloat16 input it
refuses on the device is a skip with cuDNN's reason, decided on the first
module at apply time.

``fuse = true`` answers that price. cuDNN's Ex calls
(``cudnnBatchNormalizationForwardTrainingEx`` / ``BackwardEx``) fuse a ReLU,
or a residual add and a ReLU, into the NHWC batch-norm kernels; PyTorch never
calls them that way, so ``ampsuite_resnet_kernels._cudnn_api`` binds them with ctypes
from the cuDNN torch loaded. The model is traced with ``torch.fx``; every
``BatchNorm2d -> ReLU`` and ``BatchNorm2d -> add -> ReLU`` becomes one call of
a ``FusedBatchNorm2d`` over the same parameters (``y = relu(bn(x) + z)``, and
``dz`` beside ``dx`` in the backward), the other ``BatchNorm2d`` modules plain
Ex calls. Those kernels need 4-D channels-last input: on CUDA a cell without
the channels-last technique is a skip with the reason, and a call they cannot
take (evaluation mode, a contiguous-format tensor) runs PyTorch's batch norm,
add and ReLU instead. A model torch.fx cannot trace, or with no ``BatchNorm2d``, is a
skip with the reason; so is an input dtype cuDNN's fused kernels refuse (they
take bfloat16, which aten's call refuses). The running statistics are updated
by the module from the batch mean and inverse std the operator returns: the
operator mutates nothing, so PyTorch accepts its autograd formula.

Measured on an H200 (torch 2.11.0+cu130, cuDNN 9.19, ResNet-50 batch 256,
bf16 + channels-last + compile; 2026-11-30, ``ampsuite run
tests/gpu/cudnn-fused.toml -k "fp32 or bf16"``, now this package's
suites/resnet50-cudnn-bn.toml): the fusion works (numerics ok, 53 batch norms,
16 residual adds and 33 ReLUs in cuDNN) but does not pay. The step's GPU time
stays 34.9 ms (normalization and element-wise kernels 20.5 ms, as inductor's
own 17.2 + 3.3), the host waits on 106 operator calls a step without CUDA
graphs (6,347-6,561 img/s against 6,770-6,859 without the option), and with
CUDA graphs on one GPU 6,740.6 against 6,840.6 without it. ``ampsuite tune``
screened it the same day and kept its winner without it. (An earlier version
of the operator, in which cuDNN updated the running statistics, ran 7,193.2
with CUDA graphs on a GPU where compile alone ran 6,858.7; it was never
measured beside this one.)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ampsuite import Technique, TrainStep, hookimpl

AMPSUITE_PLUGIN_API = 1


@dataclass(frozen=True)
class CudnnBatchNormOptions:
    fuse: bool = field(
        default=False,
        metadata={
            "help": "fuse the ReLU and residual add after each BatchNorm2d into cuDNN's call "
            "(cudnnBatchNormalizationForwardTrainingEx; channels-last input; the model is traced with torch.fx)"
        },
    )


def apply(step: TrainStep, options: CudnnBatchNormOptions) -> TrainStep:
    if options.fuse:
        # Its own module, which builds on the plain operator's (layout, bounds): one direction of import.
        return importlib.import_module("ampsuite_resnet_kernels._cudnn_fused").apply(step)
    return importlib.import_module("ampsuite_resnet_kernels._cudnn_batch_norm").apply(step, options)


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="cudnn-batch-norm",
            summary="batch norm through cuDNN as one custom op, opaque to torch.compile (training mode)",
            apply=apply,
            options=CudnnBatchNormOptions,
            order=42,
            requires=frozenset({"cuda"}),
            # Both replace a batch-norm module's forward: islands runs it in float32 with autocast off.
            conflicts=frozenset({"fp32-islands"}),
            requires_traits=frozenset({"model"}),
        )
    ]
