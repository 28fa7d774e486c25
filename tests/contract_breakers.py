"""A plugin whose workload and techniques break their contracts, loaded with ``-p contract_breakers``.

Each breaks it the way a plugin author plausibly would; test_contracts.py checks that
every one ends as a ``failed`` record naming the plugin, the hook and what came.
"""

from __future__ import annotations

from typing import Any

import torch

from ampsuite import BuildContext, Technique, TrainStep, Workload, hookimpl
from ampsuite.plugins.workloads import _toy, toy


def build_tuple(options: toy.ToyOptions, ctx: BuildContext) -> Any:
    return _toy.build(options, ctx), "extra"  # a (step, info) pair instead of the step


def apply_nothing(step: TrainStep, options: Any) -> Any:
    step.notes["applied"] = True  # changed the step in place and forgot to return it
    return None


def apply_no_loss(step: TrainStep, options: Any) -> TrainStep:
    inner, _ = step.phases()

    def forward_backward(batch: Any) -> None:
        inner(batch)  # ran the step, returned nothing

    step.forward_backward = forward_backward
    return step


def apply_tensor_note(step: TrainStep, options: Any) -> TrainStep:
    step.notes["scale"] = torch.ones(3)  # a tensor instead of a number
    return step


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [Workload(name="tuple-build", summary="build returns a tuple", build=build_tuple, options=toy.ToyOptions)]


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(name="apply-nothing", summary="apply returns None", apply=apply_nothing),
        Technique(name="no-loss", summary="forward_backward returns None", apply=apply_no_loss),
        Technique(name="tensor-note", summary="a tensor in the notes", apply=apply_tensor_note),
    ]
