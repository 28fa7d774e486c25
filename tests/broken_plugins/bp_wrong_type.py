"""Broken on purpose: the hook returns plain dicts instead of suite.Workload records."""

from typing import Any

from suite import hookimpl


@hookimpl
def ampsuite_workloads() -> list[dict[str, Any]]:
    return [{"name": "dict-workload", "summary": "not a Workload record"}]
