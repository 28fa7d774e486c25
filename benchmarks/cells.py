"""ampsuite's asv benchmarks: one ``track_*`` benchmark per metric, one parameter value per cell.

The figures are ampsuite's own measurements (CUDA events on a GPU), never
asv's timers. ``setup_cache`` runs ``python -m suite run`` once per commit and
environment, in a subprocess so that the commit's installed ampsuite measures;
every ``track_*`` benchmark reads its value from that one run.

Which suite (see ``benchmarks/README.md``):
    ``AMPSUITE_ASV_SUITE``   suite file; a relative path is relative to the repository
                             root. Default: the default suite of the device,
                             ``suite/defaults/{cpu,cuda}.toml``.
    ``AMPSUITE_ASV_DEVICE``  ``cpu`` or ``cuda``; default ``cuda`` when torch sees a GPU.
    ``AMPSUITE_ASV_TIMEOUT`` seconds allowed for one run of the suite (default 3600).
    ``AMPSUITE_ASV_DATA_DIR`` where generated data sets live (default ``reports/data``).
    ``AMPSUITE_ASV_RUN_ARGS`` more arguments for ``ampsuite run`` (shell syntax), e.g.
                             ``--timeout 300`` or ``-p my_plugin``.

The parameter list (cell ids) and each benchmark's ``version`` come from the
suite file in the working tree that asv runs from, expanded by the working
tree's ampsuite, so every commit's benchmark process sees the same list. Each
commit is measured with its own copy of the suite file when the file lies
inside the repository and exists at that commit (else the working tree's
copy); its records are matched to parameters by cell id.

Results: ``status`` passed gives the value; skipped, or a cell the commit's
run does not have, is n/a (``NotImplementedError`` in ``setup``, asv's skip);
failed, oom, timeout, crashed or interrupted is a failure (an exception in the
benchmark, with the record's evidence as the message). A passed cell without
the metric (no loss recorded) is n/a.

asv counts every larger value as worse, so the tracked values are seconds per
sample (not samples per second), bytes of peak memory, and the training loss
after the suite's numerics steps from the seeded start.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from asv_runner.benchmarks.mark import SkipNotImplemented

SUITE_ENV = "AMPSUITE_ASV_SUITE"
DEVICE_ENV = "AMPSUITE_ASV_DEVICE"
TIMEOUT_ENV = "AMPSUITE_ASV_TIMEOUT"
DATA_DIR_ENV = "AMPSUITE_ASV_DATA_DIR"
RUN_ARGS_ENV = "AMPSUITE_ASV_RUN_ARGS"
CHECKOUT_ENV = "AMPSUITE_ASV_CHECKOUT"  # set by the ampsuite-venv environment (suite/asvtools/environment.py)
RESULTS_FILE = "ampsuite-results.json"
METRICS_REVISION = 1
"""Part of every benchmark's version: raise it when what a track_* function returns changes meaning."""

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
    """Expand the configured suite with the working tree's ampsuite (``python -m suite.asvtools.plan``)."""
    root = repo_root()
    cmd = [sys.executable, "-m", "suite.asvtools.plan"]
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
    if not plan["cells"]:
        raise RuntimeError(f"{plan['suite']}: the suite has no cells")
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
    """What the track_* benchmarks need from one record of the results file."""
    metrics = record.get("metrics") or {}
    step_time = metrics.get("step_time") or {}
    numerics = record.get("numerics") or {}
    median = _number(step_time.get("median"))
    per_step = _number(metrics.get("samples_per_step"))
    loss = _number(numerics.get("loss_at_n"))
    return {
        "status": record.get("status"),
        "evidence": _evidence(record),
        "seconds_per_sample": median / per_step if median is not None and per_step else None,
        "peak_memory_bytes": _number(metrics.get("peak_memory_bytes")),
        "loss_at_n": loss,
        "nonfinite": loss is None and bool(numerics.get("losses")),
        "nonfinite_step": numerics.get("nonfinite_step"),
    }


def read_results(path: Path) -> dict[str, Any]:
    def reject(constant: str) -> Any:
        raise ValueError(f"{path}: {constant} is not valid in an ampsuite results file")

    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)
    if doc.get("format") != "ampsuite-results" or doc.get("version") != 1:
        raise RuntimeError(f"{path}: not an ampsuite results file of version 1")
    if not (doc.get("run") or {}).get("finished"):
        raise RuntimeError(f"{path}: the run did not finish")
    return doc


def run_suite(suite: Path, device: str, out: Path, limit: float) -> subprocess.CompletedProcess[str]:
    """``python -m suite run`` of this environment's (the commit's) ampsuite, in its own
    process group so that a timeout takes its workers down with it."""
    data_dir = os.environ.get(DATA_DIR_ENV) or str(repo_root() / "reports" / "data")
    cmd = [sys.executable, "-m", "suite", "run", str(suite), "-o", str(out), "--device", device]
    cmd += ["--no-report", "--no-peaks", "--data-dir", data_dir, *shlex.split(os.environ.get(RUN_ARGS_ENV, ""))]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
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


def setup_cache() -> dict[str, Any]:
    """Run the suite once at this commit; return every cell's figures by id."""
    suite = suite_for_commit(PLAN, repo_root(), os.environ.get(CHECKOUT_ENV))
    out = Path.cwd() / RESULTS_FILE
    limit = setup_cache.timeout  # type: ignore[attr-defined]
    done = run_suite(suite, PLAN["device"], out, max(limit - 30.0, 0.9 * limit))
    print(done.stdout[-5000:])
    if not out.is_file():
        raise RuntimeError(
            f"ampsuite run of {suite} wrote no results (exit code {done.returncode}):\n{done.stdout[-3000:]}"
        )
    doc = read_results(out)
    return {
        "suite": str(suite),
        "commit": os.environ.get("ASV_COMMIT"),
        "cells": {str(r["id"]): summarize(r) for r in doc["cells"]},
    }


setup_cache.timeout = float(os.environ.get(TIMEOUT_ENV) or 3600)  # type: ignore[attr-defined]


def setup(cache: dict[str, Any], cell: str) -> None:
    """n/a (asv's skip) for a cell the commit did not run, or ran as skipped."""
    record = cache["cells"].get(cell)
    if record is None:
        raise NotImplementedError(f"{cell}: not in this commit's run of {cache['suite']}")
    if record["status"] == SKIPPED:
        raise NotImplementedError(f"{cell}: skipped: {record['evidence']}")


def value(cache: dict[str, Any], cell: str, metric: str) -> float:
    """A passed cell's figure; an exception for any other status; n/a when not recorded."""
    record = cache["cells"][cell]
    if record["status"] != PASSED:
        raise CellFailed(f"{cell}: {record['status']}: {record['evidence']}")
    if metric == "loss_at_n" and record["nonfinite"]:
        raise CellFailed(f"{cell}: the loss went non-finite (step {record['nonfinite_step']})")
    figure = record[metric]
    if figure is None:
        raise SkipNotImplemented(f"{cell}: ampsuite recorded no {metric}")
    return float(figure)


# -- the benchmarks -------------------------------------------------------------


def track_seconds_per_sample(cache: dict[str, Any], cell: str) -> float:
    """Median step time divided by the samples (images, sequences, ...) one step processes."""
    return value(cache, cell, "seconds_per_sample")


def track_peak_memory_bytes(cache: dict[str, Any], cell: str) -> float:
    """Peak memory during the timed steps (device memory on a GPU, the worker's RSS on a CPU)."""
    return value(cache, cell, "peak_memory_bytes")


def track_loss_at_n(cache: dict[str, Any], cell: str) -> float:
    """Training loss after the suite's ``numerics_steps`` steps from the seeded start."""
    return value(cache, cell, "loss_at_n")


PLAN = load_plan()

for _fn, _unit in (
    (track_seconds_per_sample, "seconds"),
    (track_peak_memory_bytes, "bytes"),
    (track_loss_at_n, "loss"),
):
    _fn.params = list(PLAN["cells"])  # type: ignore[attr-defined]
    _fn.param_names = ["cell"]  # type: ignore[attr-defined]
    _fn.unit = _unit  # type: ignore[attr-defined]
    _fn.version = benchmark_version(_fn.__name__.removeprefix("track_"), PLAN)  # type: ignore[attr-defined]
