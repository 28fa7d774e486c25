"""ampsuite's asv benchmarks: one ``track_*`` benchmark per metric over one parameter, ``cell``: the ids of
the cells the suite runs on the device, and nothing else.

asv runs a benchmark for every combination of its parameter lists (its docs: "the test is run for all of
their combinations") and shows a combination that is no cell as n/a; three lists (workload, combination,
batch) made 306 n/a rows of 360 for the 18 cells of the default CPU suite. One list of real cell ids gives
asv exactly the cells.

The figures are ampsuite's own measurements (CUDA events on a GPU), never
asv's timers. ``setup_cache`` runs ``python -m ampsuite run`` ``AMPSUITE_ASV_ROUNDS``
times (default 5) per commit and environment, in subprocesses so that the
commit's installed ampsuite measures; every ``track_*`` benchmark reads its
figures from those runs.

Noise reaches asv: the timing and memory benchmarks return asv's own result
form for measured samples, ``{"samples": [...], "number": 1}``, one sample per
independent measurement of the cell (each round's median step time, or each
worker process's median when the suite sets ``[measure] processes``). asv's
runner accepts that form from any benchmark type; it stores the median and
asv's statistics (99 % confidence interval of the median, quartiles), and
``asv compare`` / ``asv continuous`` flag a change only when the confidence
intervals do not overlap *and* the ratio passes ``--factor``.

Which suite (see ``benchmarks/README.md``):
    ``AMPSUITE_ASV_SUITE``   suite file; a relative path is relative to the repository
                             root. Default: the default suite of the device,
                             ``suite/defaults/{cpu,cuda}.toml``.
    ``AMPSUITE_ASV_DEVICE``  ``cpu`` or ``cuda``; default ``cuda`` when torch sees a GPU.
    ``AMPSUITE_ASV_TIMEOUT`` seconds allowed for all runs of the suite at one commit
                             (default 3600 per round).
    ``AMPSUITE_ASV_DATA_DIR`` where generated data sets live (default ``reports/data``).
    ``AMPSUITE_ASV_RUN_ARGS`` more arguments for ``ampsuite run`` (shell syntax), e.g.
                             ``--timeout 300`` or ``-p my_plugin``.
    ``AMPSUITE_ASV_ROUNDS``  independent runs of the suite per commit (default 5): the
                             samples asv's statistics see. 1 gives bare values (asv then
                             compares with ``--factor`` only).

The parameter list (the cells that are not skipped before running on the device: a cell skipped for the
device, such as a CUDA-only technique on a CPU, could never have a value) and each benchmark's ``version``
come from the suite file in the working tree that asv runs from, expanded by the working tree's ampsuite, so
every commit's benchmark process sees the same list. Each commit is measured with its own copy of the suite
file when the file lies inside the repository and exists at that commit (else the working tree's copy); its
records are matched to the parameter by cell id.

Results: ``status`` passed in every round gives the value; skipped, or a cell the commit's
run does not have, is n/a (``NotImplementedError`` in ``setup``, asv's skip);
failed, oom, timeout, crashed or interrupted in any round is a failure (an
exception in the benchmark, with the record's evidence as the message). A passed cell without
the metric (no loss recorded) is n/a.

asv counts every larger value as worse, so the tracked values are seconds per
sample (not samples per second), bytes of peak memory, and the training loss
after the suite's numerics steps from the seeded start.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from asv_runner.benchmarks.mark import SkipNotImplemented

SUITE_ENV = "AMPSUITE_ASV_SUITE"
DEVICE_ENV = "AMPSUITE_ASV_DEVICE"
TIMEOUT_ENV = "AMPSUITE_ASV_TIMEOUT"
DATA_DIR_ENV = "AMPSUITE_ASV_DATA_DIR"
RUN_ARGS_ENV = "AMPSUITE_ASV_RUN_ARGS"
ROUNDS_ENV = "AMPSUITE_ASV_ROUNDS"
DEFAULT_ROUNDS = 5
CHECKOUT_ENV = "AMPSUITE_ASV_CHECKOUT"  # set by the ampsuite-venv environment (suite/asvtools/environment.py)
RESULTS_FILE = "ampsuite-results.json"
METRICS_REVISION = 3
"""Part of every benchmark's version: raise it when what a track_* function returns changes meaning.
2: samples (one per round) instead of one bare value; parameters workload, combination, batch.
3: one parameter, the cell id, over the cells the suite runs on the device."""
PARAM_NAMES = ["cell"]

# Status strings of ampsuite's results file (benchmarks/ runs against older commits: no import of ampsuite.Status).
PASSED = "passed"
SKIPPED = "skipped"

timeout = 120.0
"""asv's limit for one track_* call (they only read the cached run)."""


class CellFailed(RuntimeError):
    """The cell did not pass at this commit; asv records the benchmark as failed."""


# -- the plan: which cells, which version ---------------------------------------


def repo_root() -> Path:
    """The working tree asv runs from (``ASV_CONF_DIR``), else this file's repository."""
    return Path(os.environ.get("ASV_CONF_DIR") or Path(__file__).resolve().parent.parent).resolve()


def load_plan() -> dict[str, Any]:
    """Expand the configured suite with the working tree's ampsuite (``python -m ampsuite.asvtools.plan``)."""
    root = repo_root()
    cmd = [sys.executable, "-m", "ampsuite.asvtools.plan"]
    suite = os.environ.get(SUITE_ENV, "").strip()
    if suite:
        cmd += ["--suite", str(root / suite)]
    device = os.environ.get(DEVICE_ENV, "").strip()
    if device:
        cmd += ["--device", device]
    env = dict(os.environ)
    if (root / "suite" / "asvtools" / "plan.py").is_file():
        env["PYTHONPATH"] = str(root)
    else:
        env.pop("PYTHONPATH", None)
    out = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"ampsuite could not expand the suite ({' '.join(cmd)}): {out.stderr.strip()[-2000:]}")
    plan: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])  # after anything a plugin printed
    if not parameters(plan)[0]:
        raise RuntimeError(f"{plan['suite']}: the suite has no cell that runs on {plan['device']}")
    return plan


def benchmark_version(metric: str, plan: dict[str, Any]) -> str:
    """Changes exactly when the suite file's bytes, the device, a plugin from outside
    ampsuite (name or version) or the metric's meaning change.

    Built-in plugins are left out: they are ampsuite's own code, the thing whose
    changes over commits asv is here to show, not a change of the benchmark.
    """
    external = sorted([p["name"], p["version"]] for p in plan["plugins"] if p.get("source") != "builtin")
    payload = {
        "metric": metric,
        "revision": METRICS_REVISION,
        "suite_sha256": plan["sha256"],
        "device": plan["device"],
        "plugins": external,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# -- one run of the suite per commit ---------------------------------------------


def suite_for_commit(plan: dict[str, Any], root: Path, checkout: str | None) -> Path:
    """The commit's copy of the suite file when it lies in the repository and the
    commit has it; otherwise the file the plan was made from."""
    suite = Path(plan["suite"])
    try:
        relative = suite.relative_to(root)
    except ValueError:
        return suite
    if checkout and (Path(checkout) / relative).is_file():
        return Path(checkout) / relative
    return suite


def _evidence(record: dict[str, Any]) -> str:
    evidence = record.get("evidence") or {}
    if not isinstance(evidence, dict):
        return str(evidence)
    if "reason" in evidence:
        return str(evidence["reason"])
    if "type" in evidence:
        return f"{evidence['type']}: {evidence.get('message', '')}"
    if "timeout_seconds" in evidence:
        return f"timed out after {evidence['timeout_seconds']} s"
    if "exitcode" in evidence or "signal" in evidence:
        tail = str(evidence.get("stderr_tail") or "").strip().splitlines()[-1:]
        return f"worker exit code {evidence.get('exitcode')}, signal {evidence.get('signal')}" + (
            f": {tail[0]}" if tail else ""
        )
    return json.dumps(evidence, sort_keys=True)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """What the track_* benchmarks need from one record of one results file.

    ``seconds_per_sample`` and ``peak_memory_bytes`` are lists of samples (or None):
    one per worker process when the suite measured the cell in several
    (``step_time.processes``), else one.
    """
    metrics = record.get("metrics") or {}
    step_time = metrics.get("step_time") or {}
    numerics = record.get("numerics") or {}
    per_step = _number(metrics.get("samples_per_step"))
    medians = [_number(p.get("median")) for p in step_time.get("processes") or [] if isinstance(p, dict)]
    if len(medians) < 2 or None in medians:
        medians = [_number(step_time.get("median"))]
    seconds = [m / per_step for m in medians if m is not None] if per_step else []
    memory = _number(metrics.get("peak_memory_bytes"))
    loss = _number(numerics.get("loss_at_n"))
    return {
        "status": record.get("status"),
        "evidence": _evidence(record),
        "seconds_per_sample": seconds or None,
        "peak_memory_bytes": None if memory is None else [memory],
        "loss_at_n": loss,
        "nonfinite": loss is None and bool(numerics.get("losses")),
        "nonfinite_step": numerics.get("nonfinite_step"),
    }


def merge_rounds(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One summary per cell id from the summaries of several runs of the suite.

    All rounds passed: the samples of every round together, the first round's
    loss (the numerics are seeded). Otherwise the first round that did not
    pass decides: a failure in any round beats a skip.
    """
    merged: dict[str, dict[str, Any]] = {}
    for cell in dict.fromkeys(c for r in rounds for c in r):
        found = [r[cell] for r in rounds if cell in r]
        failed = [f for f in found if f["status"] not in (PASSED, SKIPPED)]
        skipped = [f for f in found if f["status"] == SKIPPED]
        if failed or skipped:
            merged[cell] = (failed or skipped)[0]
            continue
        first = dict(found[0])
        for metric in ("seconds_per_sample", "peak_memory_bytes"):
            lists = [f[metric] for f in found]
            first[metric] = None if any(v is None for v in lists) else [x for v in lists for x in v]
        merged[cell] = first
    return merged


def read_results(path: Path) -> dict[str, Any]:
    def reject(constant: str) -> Any:
        raise ValueError(f"{path}: {constant} is not valid in an ampsuite results file")

    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)
    if doc.get("format") != "ampsuite-results" or doc.get("version") != 1:
        raise RuntimeError(f"{path}: not an ampsuite results file of version 1")
    if not (doc.get("run") or {}).get("finished"):
        raise RuntimeError(f"{path}: the run did not finish")
    return doc


def _environment() -> dict[str, str]:
    """The environment the commit's ampsuite runs in: this one, less a PYTHONPATH that could shadow it."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


@functools.cache
def _run_takes(flag: str) -> bool:
    """Whether this environment's (the commit's) ``ampsuite run`` has ``flag``; asked once a process, not a round."""
    command = [sys.executable, "-m", "ampsuite", "run", "--help"]
    return flag in subprocess.run(command, env=_environment(), capture_output=True, text=True, check=False).stdout


def run_suite(suite: Path, device: str, out: Path, limit: float) -> subprocess.CompletedProcess[str]:
    """``python -m ampsuite run`` of this environment's (the commit's) ampsuite, in its own
    process group so that a timeout takes its workers down with it."""
    data_dir = os.environ.get(DATA_DIR_ENV) or str(repo_root() / "reports" / "data")
    cmd = [sys.executable, "-m", "ampsuite", "run", str(suite), "-o", str(out), "--device", device]
    cmd += ["--no-report", "--no-peaks", "--data-dir", data_dir, *shlex.split(os.environ.get(RUN_ARGS_ENV, ""))]
    env = _environment()
    # Each round measures every cell alike: run's second pass would measure a noisy fastest cell again in more
    # processes, so which cells get pooled samples would change with each commit's noise. A commit whose ampsuite
    # predates the flag has no second pass.
    if _run_takes("--no-again"):
        cmd.append("--no-again")
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise RuntimeError(
            f"ampsuite run of {suite} took longer than {limit:.0f} s ({TIMEOUT_ENV}):\n{output[-3000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, output, "")


def rounds() -> int:
    text = os.environ.get(ROUNDS_ENV, "").strip()
    count = int(text) if text else DEFAULT_ROUNDS
    if count < 1:
        raise ValueError(f"{ROUNDS_ENV} must be at least 1, got {text!r}")
    return count


def setup_cache() -> dict[str, Any]:
    """Run the suite ``AMPSUITE_ASV_ROUNDS`` times at this commit; return every cell's figures by id."""
    suite = suite_for_commit(PLAN, repo_root(), os.environ.get(CHECKOUT_ENV))
    limit = setup_cache.timeout  # type: ignore[attr-defined]
    deadline = time.monotonic() + max(limit - 30.0, 0.9 * limit)
    summaries = []
    for index in range(rounds()):
        out = Path.cwd() / f"round{index + 1}-{RESULTS_FILE}"
        done = run_suite(suite, PLAN["device"], out, max(deadline - time.monotonic(), 1.0))
        print(done.stdout[-5000:])
        if not out.is_file():
            raise RuntimeError(
                f"ampsuite run of {suite} wrote no results (exit code {done.returncode}):\n{done.stdout[-3000:]}"
            )
        doc = read_results(out)
        summaries.append({str(r["id"]): summarize(r) for r in doc["cells"]})
    return {"suite": str(suite), "commit": os.environ.get("ASV_COMMIT"), "cells": merge_rounds(summaries)}


setup_cache.timeout = float(os.environ.get(TIMEOUT_ENV) or 3600 * rounds())  # type: ignore[attr-defined]


def setup(cache: dict[str, Any], cell: str) -> None:
    """n/a (asv's skip) for a cell the commit did not run, or one it ran as skipped."""
    record = cache["cells"].get(cell)
    if record is None:
        raise NotImplementedError(f"{cell}: not in this commit's run of {cache['suite']}")
    if record["status"] == SKIPPED:
        raise NotImplementedError(f"{cell}: skipped: {record['evidence']}")


def value(cache: dict[str, Any], cell: str, metric: str) -> Any:
    """A passed cell's figure (a list of samples for timing and memory); an exception
    for any other status; n/a when not recorded."""
    record = cache["cells"][cell]
    if record["status"] != PASSED:
        raise CellFailed(f"{cell}: {record['status']}: {record['evidence']}")
    if metric == "loss_at_n" and record["nonfinite"]:
        raise CellFailed(f"{cell}: the loss went non-finite (step {record['nonfinite_step']})")
    figure = record[metric]
    if figure is None:
        raise SkipNotImplemented(f"{cell}: ampsuite recorded no {metric}")
    return figure


def samples(figures: list[float]) -> float | dict[str, Any]:
    """asv's result form for measured samples (its runner computes the median and
    the statistics from them); a single sample is handed over as a bare value."""
    if len(figures) == 1:
        return float(figures[0])
    return {"samples": [float(x) for x in figures], "number": 1}


# -- the benchmarks -------------------------------------------------------------


def track_seconds_per_sample(cache: dict[str, Any], cell: str) -> Any:
    """Median step time divided by the samples (images, sequences, ...) one step
    processes; one sample per round (and worker process)."""
    return samples(value(cache, cell, "seconds_per_sample"))


def track_peak_memory_bytes(cache: dict[str, Any], cell: str) -> Any:
    """Peak memory during the timed steps (device memory on a GPU, the worker's RSS
    on a CPU); one sample per round."""
    return samples(value(cache, cell, "peak_memory_bytes"))


def track_loss_at_n(cache: dict[str, Any], cell: str) -> float:
    """Training loss after the suite's ``numerics_steps`` steps from the seeded start (first round)."""
    return float(value(cache, cell, "loss_at_n"))


def parameters(plan: dict[str, Any]) -> list[list[str]]:
    """asv's ``params``: the cells the suite runs on the device, in matrix order."""
    return [[c for c in plan["cells"] if c not in plan["skip_reasons"]]]


PLAN = load_plan()

for _fn, _unit in (
    (track_seconds_per_sample, "seconds"),
    (track_peak_memory_bytes, "bytes"),
    (track_loss_at_n, "loss"),
):
    _fn.params = parameters(PLAN)  # type: ignore[attr-defined]
    _fn.param_names = list(PARAM_NAMES)  # type: ignore[attr-defined]
    _fn.unit = _unit  # type: ignore[attr-defined]
    _fn.version = benchmark_version(_fn.__name__.removeprefix("track_"), PLAN)  # type: ignore[attr-defined]
