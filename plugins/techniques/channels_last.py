"""channels-last: NHWC memory layout for convolutional models.

Tensor Core convolutions in cuDNN work in NHWC; with NCHW tensors every
convolution pays for layout transposes around the kernel. The model's 4-D
parameters and every 4-D input are converted to ``torch.channels_last``; the
values do not change, only the strides.

Inputs are converted inside ``data()``. A Batch already in channels-last is
passed through untouched, and converted batches are written back into the
Batch object, so a workload's fixed pool of device batches is converted once,
not on every step; batches that are new every step (a DataLoader) are
converted each time, as a user's loop would.
"""

from __future__ import annotations

from ampsuite import Technique, hookimpl, lazy


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="channels-last",
            summary="NHWC (channels-last) layout for the model's 4-D weights and inputs",
            apply=lazy("ampsuite.plugins.techniques._channels_last:apply"),
            order=20,
            requires_traits=frozenset({"conv"}),
        )
    ]
