"""Broken on purpose: the hook takes an argument that the hook spec does not have."""

from ampsuite import Workload, hookimpl


@hookimpl
def ampsuite_workloads(device: str) -> list[Workload]:
    return []
