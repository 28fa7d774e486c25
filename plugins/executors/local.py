"""The ``local`` executor: every cell on this machine, one after another (the default)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ampsuite import CellTask, Executor, ExecutorContext, hookimpl


def run(ctx: ExecutorContext) -> Iterator[tuple[CellTask, dict[str, Any]]]:
    for task in ctx.tasks:
        ctx.started(task)
        yield task, task()


@hookimpl
def ampsuite_executors() -> list[Executor]:
    return [Executor(name="local", summary="every cell on this machine, one worker after another", run=run)]
