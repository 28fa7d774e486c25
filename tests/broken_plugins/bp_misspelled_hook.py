"""Broken on purpose: the hook name lacks its final "s" (ampsuite_workload)."""

from ampsuite import Workload, hookimpl


@hookimpl
def ampsuite_workload() -> list[Workload]:
    return []
