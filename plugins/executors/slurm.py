"""The ``slurm`` executor: each cell a job of a Slurm job array, through submitit (docs/cluster.md).

Registering it imports neither submitit nor torch; submitit (the ``slurm``
extra: ``pip install 'ampsuite[slurm]'``) is imported when a run uses it.
``cluster = "local"`` runs the same jobs as processes on this machine
(submitit's LocalExecutor) and ``"debug"`` in this process, so the path can be
tried, and tested, without a cluster.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ampsuite import CellTask, Executor, ExecutorContext, hookimpl

INSTALL_HINT = "the slurm executor needs submitit: pip install 'ampsuite[slurm]' (or pip install 'submitit>=1.5,<2')"


@dataclass(frozen=True)
class SlurmOptions:
    cluster: Literal["slurm", "local", "debug"] = field(
        default="slurm",
        metadata={"help": "slurm; local: jobs as processes on this machine; debug: in this process (tests, CI)"},
    )
    partition: str = field(default="", metadata={"help": "Slurm partition (--partition); empty: the default"})
    constraint: str = field(
        default="", metadata={"help": "node feature the jobs need (--constraint), e.g. the GPU kind: h100"}
    )
    account: str = field(default="", metadata={"help": "Slurm account (--account); empty: the default"})
    time_limit: int = field(
        default=0, metadata={"help": "minutes per job (--time); 0: the cell's timeout x processes, plus 10", "ge": 0}
    )
    gpus_per_node: int = field(
        default=0, metadata={"help": "GPUs per job; 0: the cell's world size on CUDA, none on a CPU", "ge": 0}
    )
    cpus_per_task: int = field(default=0, metadata={"help": "CPUs per job (--cpus-per-task); 0: the default", "ge": 0})
    array_parallelism: int = field(
        default=0, metadata={"help": "jobs of one array running at once; 0: no limit", "ge": 0}
    )
    setup: list[str] = field(
        default_factory=list, metadata={"help": "shell lines run before each job (module load, venv activation)"}
    )
    folder: str = field(
        default="reports/submitit/%j",
        metadata={"help": "submitit's job files and logs (%j: the job id)", "min_length": 1},
    )
    poll_seconds: float = field(default=10.0, metadata={"help": "how often the parent asks the scheduler", "gt": 0})


def check(options: SlurmOptions) -> str | None:
    if importlib.util.find_spec("submitit") is None:
        return INSTALL_HINT
    if options.cluster == "slurm" and (shutil.which("sbatch") is None or shutil.which("srun") is None):
        return (
            "no sbatch/srun on this machine: run from a Slurm login node, or try the jobs here with cluster = 'local'"
        )
    return None


def run(ctx: ExecutorContext) -> Iterator[tuple[CellTask, dict[str, Any]]]:
    from ampsuite.plugins.executors import _slurm

    return _slurm.run(ctx)


@hookimpl
def ampsuite_executors() -> list[Executor]:
    return [
        Executor(
            name="slurm",
            summary="each cell a job of a Slurm job array (submitit); cluster = local or debug to try it here",
            run=run,
            options=SlurmOptions,
            check=check,
        )
    ]
