"""Broken on purpose: the hook name lacks its final "s" (ampsuite_workload)."""

from suite import Workload, hookimpl


@hookimpl
def ampsuite_workload() -> list[Workload]:
    return []
