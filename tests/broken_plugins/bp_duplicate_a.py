"""One of two plugins that register the same workload name ("twin")."""

from _bp_common import build

from ampsuite import Workload, hookimpl


@hookimpl
def ampsuite_workloads() -> list[Workload]:
    return [Workload(name="twin", summary="registered by bp_duplicate_a", build=build)]
