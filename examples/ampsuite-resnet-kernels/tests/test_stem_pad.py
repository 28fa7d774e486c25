"""stem-pad: 3-channel images and the stem convolution widened with zeros train exactly like the unpadded model."""

from __future__ import annotations

import pytest
import torch
from ampsuite import NoOptions, SkipCell, TrainStep
from ampsuite.testing import SuiteFileError
from torch import nn

from ampsuite_resnet_kernels import _stem_pad as impl
from ampsuite_resnet_kernels import stem_pad
from kernels_testing import build, in_float64, resnet_step, technique, toy_step

TECHNIQUE = stem_pad.ampsuite_techniques()[0]


def resnet(optimizer: str = "sgd") -> TrainStep:
    return build("resnet", depth=18, width=8, image_size=32, classes=10, optimizer=optimizer, weight_decay=0.1)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_resnet_trains_the_same_and_the_new_weights_stay_zero(optimizer: str) -> None:
    step, reference = resnet(optimizer), resnet(optimizer)
    assert step.model is not None and step.optimizer is not None and reference.model is not None
    weight = step.model.conv1.weight
    step = TECHNIQUE.apply(step, stem_pad.StemPadOptions())
    assert step.notes["stem_pad"] == {"conv": "conv1", "from_channels": 3, "channels": 4}
    assert step.model is not None and step.model.conv1.weight is weight  # the optimizer's Parameter, widened
    assert weight.shape == (8, 4, 7, 7) and step.model.conv1.in_channels == 4
    assert any(p is weight for group in step.optimizer.param_groups for p in group["params"])
    step, reference = in_float64(step), in_float64(reference)
    assert step.model.conv1.weight is weight and weight.dtype == torch.float64
    runs = [step.compose(), reference.compose()]
    for _ in range(3):
        batch = step.data()
        assert batch.inputs[0].shape == (4, 4, 32, 32) and not batch.inputs[0][:, 3].any()
        torch.testing.assert_close(runs[0](batch), runs[1](reference.data()), rtol=1e-10, atol=1e-10)
    # the zero channel's gradient is exactly zero, so no optimizer (with weight decay) moves its weights
    assert not weight[:, 3].any()
    torch.testing.assert_close(weight[:, :3], reference.model.conv1.weight, rtol=1e-9, atol=1e-10)


def test_with_channels_last_the_pool_is_padded_once_into_that_layout() -> None:
    step = resnet_step()
    stored = step.data().inputs[0]
    step = technique("channels-last").apply(TECHNIQUE.apply(step, stem_pad.StemPadOptions()), NoOptions())
    assert step.model is not None and step.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    served = [step.data() for _ in range(8)]  # the pool's batches, twice over
    padded = served[-1].inputs[0]
    assert padded.shape == (4, 4, 32, 32) and padded.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(padded[:, :3], stored) and not padded[:, 3].any()
    # the second round serves the batches the first round padded, not new copies
    assert {id(b.inputs[0]) for b in served[:4]} == {id(b.inputs[0]) for b in served[4:]}
    step.compose()(served[0])


def test_what_it_refuses() -> None:
    assert TECHNIQUE.order == 15 and TECHNIQUE.options is stem_pad.StemPadOptions
    assert TECHNIQUE.requires_traits == frozenset({"conv", "model"})
    with pytest.raises(SkipCell, match=r"the model has no nn\.Conv2d to pad"):
        TECHNIQUE.apply(toy_step(), stem_pad.StemPadOptions())
    with pytest.raises(SkipCell, match=r"the first convolution \(conv1\) already has 3 input channels \(>= 3\)"):
        TECHNIQUE.apply(resnet_step(), stem_pad.StemPadOptions(channels=3))
    with pytest.raises(SkipCell, match=r"the first convolution \(0\) is grouped \(3 groups\)"):
        impl.widen(nn.Sequential(nn.Conv2d(3, 6, 3, groups=3)), 4)


@pytest.mark.parametrize("channels", [1, 65])
def test_a_channel_count_outside_2_to_64_is_refused_with_its_key(ampsuite_run, channels: int) -> None:
    suite = {
        "workloads": {"resnet": {"batch_size": 2, "depth": 18}},
        "combinations": {"pad": ["stem-pad"]},
        "techniques": {"stem-pad": {"channels": channels}},
    }
    message = rf"techniques\.stem-pad\.channels: expected an integer >= 2 and <= 64, got {channels}$"
    with pytest.raises(SuiteFileError, match=message):
        ampsuite_run(suite, plugins=[stem_pad])
