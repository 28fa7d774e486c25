"""Acceptance: asv tracks a small suite over three commits, on CPU, without a network.

A temporary git repository (a copy of this working tree) gets three commits of
a tiny suite: the second changes nothing that matters, the third makes the toy
model much larger, hence slower. Then plain asv commands, as a user types them:
``asv run ALL`` with the ampsuite-venv environment (no machine prompt: the
machine file comes from ``ampsuite.asvtools.machine``), ``asv publish`` and
``asv compare``. Checked: three commits recorded for every cell (a value, a
failure as the cell's status says) over one parameter, the ids of the cells that
run (a cell CPUs always skip is none), five rounds reaching asv as samples with a
confidence interval, no change reported between the first two commits and the slowdown
reported by ``asv compare`` as a regression, the environment holding only ampsuite, and the
published site working in headless Chromium that can reach no host but
127.0.0.1, served and opened from file://, with no console error.

Takes a minute or two; every git command runs inside the temporary folder.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import toy_suite

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _suite(hidden: int = 32, layers: int = 1) -> str:
    """A toy cell at batch 32 in FP32, one whose technique raises, one a CPU skips; ``hidden`` and ``layers`` set
    how fast it is."""
    return toy_suite(
        "asv-test",
        timeout=120,
        baseline="fp32",
        toy={"plugin": "toy", "batch_size": [32], "hidden": hidden, "layers": layers},
        combinations={"fp32": [], "broken": ["inject-fault"], "graphs": ["cuda-graphs"]},
        techniques={"inject-fault": {"kind": "raise", "at": "apply"}},
        measure={
            "warmup_steps": 2,
            "min_steps": 5,
            "max_steps": 30,
            "max_seconds": 0.3,
            "noise_target": 0.05,
            "numerics_steps": 2,
        },
    )


FAST, BROKEN, SKIPPED = "toy/fp32/bs32", "toy/broken/bs32", "toy/graphs/bs32"
PARAMS = [["'toy/fp32/bs32'", "'toy/broken/bs32'"]]  # asv's reprs: the cells that run on a CPU, nothing else
FAST_NAME = "cells.track_seconds_per_sample('toy/fp32/bs32')"
ROUNDS = 5  # asv's interval of a median from 3 samples can reach below zero under load
METRICS = ("cells.track_seconds_per_sample", "cells.track_peak_memory_bytes", "cells.track_loss_at_n")

# Not copied into the temporary repository: what .gitignore keeps out of git, and git itself.
IGNORED = {
    ".git",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".venv",
    "build",
    "dist",
    ".whl",
    ".gl",
}


def _ignore(folder: str, names: list[str]) -> set[str]:
    skip = {n for n in names if n in IGNORED or n.endswith(".egg-info")}
    if Path(folder).resolve() == REPO:
        skip.add("reports")
    return skip


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    commits: list[str]
    """Oldest first."""
    run_output: str

    def asv(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "asv", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"asv {' '.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        return done

    @property
    def results(self) -> Path:
        return self.root / "reports" / "asv" / "results"

    @property
    def html(self) -> Path:
        return self.root / "reports" / "asv" / "html"


def _git(root: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _commit(root: Path, env: dict[str, str], message: str, day: int) -> str:
    date = f"2024-01-{day:02d}T12:00:00+00:00"
    _git(root, env, "add", "-A")
    _git(root, {**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}, "commit", "-q", "-m", message)
    return _git(root, env, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    from ampsuite.asvtools.machine import write_machine_file

    tmp = tmp_path_factory.mktemp("asv")
    root, home = tmp / "repo", tmp / "home"
    shutil.copytree(REPO, root, ignore=_ignore)
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMPSUITE_ASV_", "GIT_", "ASV_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        HOME=str(home),  # asv's machine file and git's global config live here
        AMPSUITE_ASV_SUITE="asv-test.toml",
        AMPSUITE_ASV_ROUNDS=str(ROUNDS),
        OMP_NUM_THREADS="1",  # a loaded 2-core machine slows tiny multi-threaded steps by orders of magnitude
        GIT_AUTHOR_NAME="ampsuite test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="ampsuite test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
        GIT_CONFIG_NOSYSTEM="1",
    )
    suite = root / "asv-test.toml"
    _git(root, env, "init", "-q", "-b", "main")
    suite.write_text(_suite())
    commits = [_commit(root, env, "a small suite", 1)]
    suite.write_text(_suite() + "# a comment: nothing that changes speed\n")
    commits.append(_commit(root, env, "same speed", 2))
    suite.write_text(_suite(hidden=1024, layers=3))
    commits.append(_commit(root, env, "a much larger model", 3))

    write_machine_file(home / ".asv-machine.json")
    project = Project(root, env, commits, "")
    done = project.asv("run", "--show-stderr", "ALL", check=False)
    project.run_output = done.stdout + done.stderr
    # 2: some benchmarks failed, as the injected fault makes them
    assert done.returncode in (0, 2), project.run_output[-6000:]
    assert "setup_cache failed" not in project.run_output, project.run_output[-6000:]
    project.asv("publish")
    yield project


def _result_files(project: Project) -> dict[str, dict[str, Any]]:
    files = {}
    for path in project.results.glob("*/*.json"):
        if path.name != "machine.json":
            data = json.loads(path.read_text())
            files[data["commit_hash"]] = data
    return files


def _column(data: dict[str, Any], benchmark: str, column: str) -> Any:
    return data["results"][benchmark][data["result_columns"].index(column)]


def test_every_commit_is_recorded_for_every_cell(project: Project) -> None:
    files = _result_files(project)
    assert set(files) == set(project.commits)
    benchmarks = json.loads((project.results / "benchmarks.json").read_text())
    for commit, data in files.items():
        for name in METRICS:
            params = _column(data, name, "params")
            assert params == PARAMS and SKIPPED not in str(params), (commit, name)
            values = dict(zip((FAST, BROKEN), _column(data, name, "result"), strict=True))
            assert isinstance(values[FAST], float) and values[FAST] > 0, (commit, name, values)
            assert values[BROKEN] is None, (commit, name, values)  # asv's "failed"
            assert not any(math.isnan(v) for v in values.values() if v is not None)  # no n/a: only real cells
            assert _column(data, name, "version") == benchmarks[name]["version"]
        # the timing's samples (one per round) reached asv: a median with a confidence interval around it
        low, high = (_column(data, METRICS[0], f"stats_ci_99_{end}")[0] for end in "ab")
        value = _column(data, METRICS[0], "result")[0]
        # one per round, or one per process of a round whose run measured the cell again (`ampsuite run`'s
        # second pass of an untrusted fastest cell, in three processes)
        assert _column(data, METRICS[0], "stats_repeat")[0] in range(ROUNDS, 3 * ROUNDS + 1)
        assert low <= value <= high and low < high, (commit, low, value, high)


def test_the_environment_installs_only_ampsuite_and_names_the_torch_it_reused(project: Project) -> None:
    import torch

    envs = [p for p in (project.root / "reports" / "asv" / "env").iterdir() if p.is_dir()]
    assert len(envs) == 1
    site = next(envs[0].glob("lib/python*/site-packages"))
    installed = {p.name for p in site.iterdir()}
    assert "ampsuite" in installed and not {"suite", "plugins"} & installed  # one import name
    assert not {"torch", "torchvision", "pluggy", "jinja2"} & installed
    for data in _result_files(project).values():
        assert data["params"]["torch"] == torch.__version__
        assert (
            data["env_name"] == f"ampsuite-venv-py{sys.version_info[0]}.{sys.version_info[1]}-torch{torch.__version__}"
        )
    machine = json.loads(next(project.results.glob("*/machine.json")).read_text())
    assert {"gpu", "nvidia_driver", "cuda"} <= set(machine)


def _compare(project: Project, before: str, after: str) -> dict[str, str]:
    """``asv compare`` as a table: benchmark (with parameter) -> its change mark."""
    out = project.asv("compare", "--split", before, after).stdout
    rows = {}
    for line in out.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cols) == 5 and cols[0] != "Change" and not cols[4].startswith("-"):
            rows[cols[4]] = cols[0]
    assert rows, out
    return rows


def test_asv_compare_reports_the_slowdown_as_a_regression_and_no_change_as_none(project: Project) -> None:
    first, second, third = project.commits
    key = FAST_NAME
    assert _compare(project, first, second)[key] == ""  # same speed: within the measured noise
    assert _compare(project, second, third)[key] == "+"  # asv's mark for "got worse"
    assert _compare(project, third, second)[key] == "-"  # and going back is an improvement
    assert _compare(project, first, third)[key] == "+"


def test_ampsuites_history_reads_the_asv_results(project: Project) -> None:
    from ampsuite import analysis

    points = analysis.history(project.results)[FAST]
    assert [p.label for p in points] == [c[:12] for c in project.commits]
    assert points[2].throughput < points[1].throughput


@pytest.mark.parametrize("how", ["served", "file"])
def test_the_published_site_works_offline(project: Project, tmp_path: Path, how: str) -> None:
    """Served over http (``asv preview``) or opened from file://, where browsers refuse asv's JSON requests and
    ampsuite's publisher answers them from the scripts it writes beside each JSON file."""
    from ampsuite.asvtools import remote_references
    from ampsuite.browser import find_chromium, load_page, serve

    assert (project.html / "index.html").is_file()
    assert remote_references(project.html) == []
    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required under CI (apt-get install chromium)")
        pytest.skip("no Chromium (apt-get install chromium)")
    expressions = {
        "libraries": "[typeof jQuery, typeof jQuery.plot, typeof md5, typeof jQuery.fn.stupidtable].join()",
        "benchmarks": "document.querySelectorAll('.benchmark-container').length",
        "plots": "document.querySelectorAll('canvas').length",
        "text": "document.body.innerText",
    }
    with contextlib.ExitStack() as stack:
        origin = stack.enter_context(serve(project.html)) if how == "served" else project.html.as_uri()
        report = load_page(
            f"{origin}/index.html",
            expressions=expressions,
            hashes=["#cells.track_seconds_per_sample", "#regressions"],
            ready={
                "": "document.querySelectorAll('.benchmark-container').length > 0",
                "#cells.track_seconds_per_sample": "document.querySelectorAll('canvas.flot-base').length > 0",
                "#regressions": "document.body.innerText.includes('track_seconds_per_sample(')",
            },
            screenshots=tmp_path,
        )
    assert report.offsite(origin) == []
    assert report.errors() == []
    assert report.values["libraries"] == "function,function,function,function"
    assert report.values["benchmarks"] == len(METRICS)
    graph = "@#cells.track_seconds_per_sample"
    assert report.values["plots" + graph] > 0
    assert all(word in report.values["text" + graph] for word in ("cell", FAST, BROKEN))
    assert "track_seconds_per_sample(" in report.values["text@#regressions"]
