"""Broken on purpose: the hook returns plain dicts instead of ampsuite.Workload records."""

from typing import Any

from ampsuite import hookimpl


@hookimpl
def ampsuite_workloads() -> list[dict[str, Any]]:
    return [{"name": "dict-workload", "summary": "not a Workload record"}]
