"""stem-pad: images and the first convolution padded with zero channels, 3 -> 4, as MLPerf's loaders do.

cuDNN's NHWC Tensor Core kernels want a channel count that fills 8 bytes:
given ResNet-50's 3-channel stem, cuDNN pads the input to 4 channels itself on
every call. On one NVIDIA H200 (torch 2.11.0+cu130, cuDNN 9.19, fp16,
channels-last, batch 256; 2026-12-01, ``python3 reports/h200/session14/probe.py
stem`` at ampsuite commit 0bbfc1d) the stem convolution's forward and weight
gradient took 1.141 ms with 3 input channels and 0.868 ms with 4, of which
cuDNN's own ``nhwcAddPaddingKernel`` was 0.251 ms (8 channels: 2.255 ms).
MLPerf's ResNet-50 has its data loader emit 4-channel NHWC images for this
reason.

The technique does the same in two places:

* the data: every 4-D input whose channel count is the first convolution's
  comes out with ``channels`` channels, the new ones zero, in the step's memory
  format (so that channels-last, applied after it, has nothing left to
  convert). As with channels-last's conversion, a batch of the workload's
  on-device pool is padded once, where it is stored; a loader's batch is
  padded each step, on the device, a cost the step pays;
* the model: the first ``nn.Conv2d`` (in registration order, the stem of
  torchvision's CNNs and a ViT's patch embedding) gets ``channels`` input
  channels, its new weights zero. The weight keeps its ``Parameter`` object
  (its data is replaced, as ``Module.to`` does), so the optimizer built
  before the technique updates it.

The result is the same function: a zero channel meets zero weights, and the
weights' gradients for it are exactly zero (their input is zero), so no
optimizer moves them from zero (SGD, momentum and weight decay keep zero
at zero; so do AdamW and LAMB, whose update of a zero gradient is zero). The
only difference from the unpadded model is the order of the convolution's sums.
Order 15: before channels-last (20), which then converts the widened weight,
and before AMP (30) and torch-compile (80).

Measured in ResNet-50's compiled recipe (fp16 + channels-last + compile +
fused SGD, batch 256, one H200, torch 2.11.0+cu130, 2026-12-01,
``ampsuite run tests/gpu/resnet50-stem.toml -p ampsuite.plugins.probes.kernels``, the
cells now in this package's suites/resnet50-stack.toml): 7,625-7,638 ->
7,657-7,704 img/s (33.23-33.43 ms a step; cuDNN's padding kernel, 0.25 ms,
gone), and with ``maxpool-offsets`` too 7,741 -> 7,820.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsuite import Technique, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1

__all__ = ["StemPadOptions"]


@dataclass(frozen=True)
class StemPadOptions:
    channels: int = field(
        default=4,
        metadata={
            "help": "input channels after padding (4: what cuDNN pads a 3-channel NHWC input to)",
            "ge": 2,
            "le": 64,
        },
    )


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="stem-pad",
            summary="images and the first convolution padded with zero channels (3 -> 4), as MLPerf's loaders do",
            apply=lazy("ampsuite_resnet_kernels._stem_pad:apply"),
            options=StemPadOptions,
            order=15,
            requires_traits=frozenset({"conv", "model"}),
        )
    ]
