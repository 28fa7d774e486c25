"""A technique that changes nothing: an A/A control for the harness's own noise."""

from __future__ import annotations

from ampsuite import Technique, TrainStep, hookimpl


def apply(step: TrainStep, options: object) -> TrainStep:
    return step


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="noop",
            summary="changes nothing; compare it with the baseline to see the harness's own noise",
            apply=apply,
        )
    ]
