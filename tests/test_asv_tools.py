"""The pieces of asv tracking, one behaviour at a time (the whole flow is tests/test_asv.py).

- benchmarks/cells.py: parameters, versions, and how a record becomes a value,
  an n/a or a failure;
- suite/asvtools/offline.py: the published page loads only vendored files;
- suite/asvtools/environment.py: requirements are read from the base interpreter;
- suite/asvtools/machine.py: asv's machine file with the GPU keys;
- suite/browser.py: the offline check can see a request leave and an error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import toy_suite
from records import asv_result_file

from ampsuite.asvtools import offline
from ampsuite.asvtools.offline import ASSETS, Asset, OfflineError, make_offline, remote_references, vendored_file

REPO = Path(__file__).resolve().parent.parent
ASV_WWW = Path(importlib.util.find_spec("asv").origin).parent / "www"  # type: ignore[arg-type,union-attr]

SUITE = toy_suite(
    "asv-unit",
    baseline="fp32",
    toy={"plugin": "toy", "batch_size": [8, 16], "hidden": 8},
    combinations={"fp32": [], "graphs": ["cuda-graphs"]},
)
"""Two batch sizes in FP32, and in CUDA graphs, which a CPU skips."""


# ---------------------------------------------------------------------------
# benchmarks/cells.py
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """benchmarks/cells.py imported as asv imports it, with a small suite outside the repository."""
    suite = tmp_path_factory.mktemp("suite") / "asv-unit.toml"
    suite.write_text(SUITE)
    saved = {k: os.environ.get(k) for k in ("AMPSUITE_ASV_SUITE", "ASV_CONF_DIR", "AMPSUITE_ASV_DEVICE")}
    os.environ.update(AMPSUITE_ASV_SUITE=str(suite), ASV_CONF_DIR=str(REPO))
    os.environ.pop("AMPSUITE_ASV_DEVICE", None)
    try:
        spec = importlib.util.spec_from_file_location("asv_unit_cells", REPO / "benchmarks" / "cells.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


TRACKS = ("track_seconds_per_sample", "track_peak_memory_bytes", "track_loss_at_n")


def test_every_metric_is_one_benchmark_over_the_cells_the_suite_runs(cells: ModuleType) -> None:
    """asv runs every combination of its parameter lists; one list of the cells that run gives it the cells and
    nothing else: no n/a row for a combination that is no cell, or a cell this device always skips."""
    expected = ["toy/fp32/bs8", "toy/graphs/bs8", "toy/fp32/bs16", "toy/graphs/bs16"]
    assert cells.PLAN["cells"] == expected
    assert set(cells.PLAN["skip_reasons"]) == {"toy/graphs/bs8", "toy/graphs/bs16"}
    assert "cuda" in cells.PLAN["skip_reasons"]["toy/graphs/bs8"].lower()
    for name in TRACKS:
        fn = getattr(cells, name)
        assert fn.params == [["toy/fp32/bs8", "toy/fp32/bs16"]]
        assert fn.param_names == ["cell"]
    assert (cells.track_seconds_per_sample.unit, cells.track_peak_memory_bytes.unit) == ("seconds", "bytes")
    assert len({getattr(cells, name).version for name in TRACKS}) == 3


def test_the_parameters_leave_out_the_cells_the_device_skips(cells: ModuleType) -> None:
    plan = {"cells": ["a/fp32/bs8", "a/tf32/bs8", "b/fp32/bs8"], "skip_reasons": {"a/tf32/bs8": "needs cuda"}}
    assert cells.parameters(plan) == [["a/fp32/bs8", "b/fp32/bs8"]]


def _plan(**changes: Any) -> dict[str, Any]:
    plan = {
        "sha256": "a" * 64,
        "device": "cpu",
        "cells": ["toy/fp32/bs8"],
        "plugins": [
            {"name": "toy", "version": "0.1.0", "source": "builtin"},
            {"name": "extras", "version": "1.0", "source": "entry point (ampsuite-extras)"},
        ],
    }
    plan.update(changes)
    return plan


def test_version_changes_with_the_suite_device_and_outside_plugins_only(cells: ModuleType) -> None:
    version = cells.benchmark_version
    base = version("seconds_per_sample", _plan())
    assert version("seconds_per_sample", _plan()) == base
    assert version("seconds_per_sample", _plan(sha256="b" * 64)) != base
    assert version("seconds_per_sample", _plan(device="cuda")) != base
    newer = _plan()
    newer["plugins"][1]["version"] = "1.1"
    assert version("seconds_per_sample", newer) != base
    more = _plan()
    more["plugins"].append({"name": "mine", "version": "0.3", "source": "-p"})
    assert version("seconds_per_sample", more) != base
    # ampsuite's own plugins are the code under test: their version and set do not hide history
    builtin = _plan()
    builtin["plugins"][0]["version"] = "0.2.0"
    builtin["plugins"].append({"name": "amp", "version": "0.2.0", "source": "builtin"})
    assert version("seconds_per_sample", builtin) == base
    assert version("peak_memory_bytes", _plan()) != base
    assert version("seconds_per_sample", _plan(cells=["toy/fp32/bs8", "toy/fp32/bs16"])) == base


def _record(status: str = "passed", **over: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": "toy/fp32/bs8",
        "status": status,
        "metrics": {"step_time": {"median": 0.004}, "samples_per_step": 8, "peak_memory_bytes": 1000},
        "numerics": {"losses": [2.0, 1.9], "loss_at_n": 1.9, "nonfinite_step": None},
        "evidence": None,
    }
    record.update(over)
    return record


def _cache(cells: ModuleType, *records: dict[str, Any]) -> dict[str, Any]:
    return {"suite": "s.toml", "commit": None, "cells": {r["id"]: cells.summarize(r) for r in records}}


CELL = ("toy/fp32/bs8",)


def test_a_passed_cell_gives_seconds_per_sample_bytes_and_loss(cells: ModuleType) -> None:
    cache = _cache(cells, _record())
    cells.setup(cache, *CELL)
    assert cells.track_seconds_per_sample(cache, *CELL) == pytest.approx(0.004 / 8)
    assert cells.track_peak_memory_bytes(cache, *CELL) == 1000.0
    assert cells.track_loss_at_n(cache, *CELL) == pytest.approx(1.9)


def test_rounds_and_processes_reach_asv_as_samples(cells: ModuleType) -> None:
    """asv's runner turns {"samples", "number"} from any benchmark into a median and its statistics."""
    from asv_runner.statistics import compute_stats

    slow = _record(metrics={"step_time": {"median": 0.008}, "samples_per_step": 8, "peak_memory_bytes": 1200})
    two = _record(
        metrics={
            "step_time": {"median": 0.005, "processes": [{"median": 0.004}, {"median": 0.006}]},
            "samples_per_step": 8,
            "peak_memory_bytes": 1100,
        }
    )
    rounds = [{r["id"]: cells.summarize(r)} for r in (_record(), slow, two)]
    cache = {"suite": "s.toml", "commit": None, "cells": cells.merge_rounds(rounds)}
    seconds = cells.track_seconds_per_sample(cache, *CELL)
    assert seconds == {"samples": pytest.approx([0.0005, 0.001, 0.0005, 0.00075]), "number": 1}
    assert cells.track_peak_memory_bytes(cache, *CELL) == {"samples": [1000.0, 1200.0, 1100.0], "number": 1}
    assert cells.track_loss_at_n(cache, *CELL) == pytest.approx(1.9)
    median, stats = compute_stats(seconds["samples"], seconds["number"])
    assert median == pytest.approx(0.000625)
    assert stats["ci_99_a"] <= 0.0005 and stats["ci_99_b"] >= 0.001 and stats["repeat"] == 4


def test_rounds_come_from_the_environment(cells: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMPSUITE_ASV_ROUNDS", raising=False)
    assert cells.rounds() == 5
    monkeypatch.setenv("AMPSUITE_ASV_ROUNDS", "3")
    assert cells.rounds() == 3
    monkeypatch.setenv("AMPSUITE_ASV_ROUNDS", "0")
    with pytest.raises(ValueError, match="at least 1"):
        cells.rounds()
    assert cells.samples([0.5]) == 0.5  # one round: a bare value, compared by ratio only


def test_a_failure_in_any_round_fails_the_cell(cells: ModuleType) -> None:
    broken = _record("failed", metrics={}, evidence={"type": "InjectedFault", "message": "flaky"})
    rounds = [{r["id"]: cells.summarize(r)} for r in (_record(), broken, _record())]
    cache = {"suite": "s.toml", "commit": None, "cells": cells.merge_rounds(rounds)}
    with pytest.raises(cells.CellFailed, match="flaky"):
        cells.track_seconds_per_sample(cache, *CELL)


def test_a_skipped_or_absent_cell_is_na(cells: ModuleType) -> None:
    cache = _cache(cells, _record("skipped", id="toy/graphs/bs8", metrics={}, evidence={"reason": "needs cuda"}))
    with pytest.raises(NotImplementedError, match="needs cuda"):
        cells.setup(cache, "toy/graphs/bs8")
    with pytest.raises(NotImplementedError, match="toy/fp32/bs16: not in this commit"):
        cells.setup(cache, "toy/fp32/bs16")


@pytest.mark.parametrize(
    ("status", "evidence", "message"),
    [
        ("failed", {"type": "InjectedFault", "message": "boom", "traceback": "..."}, "InjectedFault: boom"),
        ("oom", {"type": "OutOfMemoryError", "message": "CUDA out of memory"}, "out of memory"),
        ("timeout", {"timeout_seconds": 60, "stderr_tail": ""}, "timed out after 60"),
        ("crashed", {"exitcode": -11, "signal": "SIGSEGV", "stderr_tail": "x\nSegmentation fault"}, "SIGSEGV"),
    ],
)
def test_a_cell_that_did_not_pass_is_a_failure_with_its_evidence(
    cells: ModuleType, status: str, evidence: dict[str, Any], message: str
) -> None:
    cache = _cache(cells, _record(status, metrics={}, evidence=evidence))
    cells.setup(cache, *CELL)  # not a skip: the benchmark itself must fail
    for name in TRACKS:
        with pytest.raises(cells.CellFailed, match=message):
            getattr(cells, name)(cache, *CELL)


def test_a_missing_metric_is_na_and_a_non_finite_loss_a_failure(cells: ModuleType) -> None:
    from asv_runner.benchmarks.mark import SkipNotImplemented

    no_memory = _record(metrics={"step_time": {"median": 0.004}, "samples_per_step": 8})
    with pytest.raises(SkipNotImplemented):
        cells.track_peak_memory_bytes(_cache(cells, no_memory), *CELL)
    diverged = _record(numerics={"losses": [2.0, None], "loss_at_n": None, "nonfinite_step": 1})
    cache = _cache(cells, diverged)
    with pytest.raises(cells.CellFailed, match="non-finite"):
        cells.track_loss_at_n(cache, *CELL)
    assert cells.track_seconds_per_sample(cache, *CELL) == pytest.approx(0.0005)


def test_each_commit_measures_its_own_copy_of_a_suite_inside_the_repository(cells: ModuleType, tmp_path: Path) -> None:
    root, checkout = tmp_path / "repo", tmp_path / "env" / "project"
    (root / "suites").mkdir(parents=True)
    (checkout / "suites").mkdir(parents=True)
    for folder in (root, checkout):
        (folder / "suites" / "a.toml").write_text("x")
    (root / "suites" / "new.toml").write_text("x")
    outside = tmp_path / "elsewhere.toml"
    pick = cells.suite_for_commit
    assert pick({"suite": str(root / "suites" / "a.toml")}, root, str(checkout)) == checkout / "suites" / "a.toml"
    assert pick({"suite": str(root / "suites" / "new.toml")}, root, str(checkout)) == root / "suites" / "new.toml"
    assert pick({"suite": str(root / "suites" / "a.toml")}, root, None) == root / "suites" / "a.toml"
    assert pick({"suite": str(outside)}, root, str(checkout)) == outside


def test_results_must_be_a_finished_strict_version_1_file(cells: ModuleType, tmp_path: Path) -> None:
    good = {"format": "ampsuite-results", "version": 1, "run": {"finished": "2024-01-01T00:00:00"}, "cells": []}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(good))
    assert cells.read_results(path)["cells"] == []
    path.write_text(json.dumps({**good, "run": {"finished": None}}))
    with pytest.raises(RuntimeError, match="did not finish"):
        cells.read_results(path)
    path.write_text(json.dumps({**good, "version": 2}))
    with pytest.raises(RuntimeError, match="version 1"):
        cells.read_results(path)
    path.write_text(json.dumps(good)[:-1] + ', "x": NaN}')
    with pytest.raises(ValueError, match="NaN"):
        cells.read_results(path)


def test_history_maps_every_form_of_the_parameters_back_to_cell_ids(tmp_path: Path) -> None:
    """asv stores the parameters as reprs over their Cartesian product; n/a triples are no cells. Results of
    three forms: the cell id (first, and again now), and workload, combination and batch in between."""
    from ampsuite import analysis

    new = [["'toy'", "'resnet[depth=18]'"], ["'fp32'", "'amp/x2'"], ["32", "128"]]
    nan = float("nan")
    # product order: toy fp32 32, toy fp32 128, toy amp/x2 32, toy amp/x2 128, resnet ... (4 more)
    values = [0.001, 0.0005, nan, nan, 0.01, None, nan, 0.02]
    old = [["'toy/fp32/bs32'"]]
    now = [["'toy/fp32/bs32'", "'bert/amp/x2/bs16'"]]
    forms = (("1" * 40, 1, old, [0.002]), ("2" * 40, 2, new, values), ("3" * 40, 3, now, [0.0025, 0.004]))
    for commit, day, params, result in forms:
        row = [result, params, "v", 0, 1.0, None, None]
        data = asv_result_file(
            commit, 1_700_000_000_000 + day * 86_400_000, "box", {"cells.track_seconds_per_sample": row}
        )
        (tmp_path / f"{commit[:8]}-env.json").write_text(json.dumps(data))
    found = analysis.history(tmp_path)
    assert sorted(found) == [
        "bert/amp/x2/bs16",
        "resnet[depth=18]/amp/x2/bs128",
        "resnet[depth=18]/fp32/bs32",
        "toy/fp32/bs128",
        "toy/fp32/bs32",
    ]
    assert [p.throughput for p in found["toy/fp32/bs32"]] == pytest.approx([500.0, 1000.0, 400.0])
    assert [p.throughput for p in found["bert/amp/x2/bs16"]] == pytest.approx([250.0])
    assert [p.throughput for p in found["resnet[depth=18]/amp/x2/bs128"]] == pytest.approx([50.0])


# ---------------------------------------------------------------------------
# offline site
# ---------------------------------------------------------------------------


def _asv_site(tmp_path: Path) -> Path:
    site = tmp_path / "html"
    shutil.copytree(ASV_WWW, site)
    return site


def test_asvs_page_loads_only_vendored_files_after_make_offline(tmp_path: Path) -> None:
    site = _asv_site(tmp_path)
    before = remote_references(site)
    assert len(before) == len(ASSETS) and all(r.startswith("index.html: https://") for r in before)
    changed = make_offline(site)
    assert [p.name for p in changed] == ["index.html"]
    assert remote_references(site) == []
    html = (site / "index.html").read_text()
    for asset in ASSETS:
        assert f'"vendor/{asset.file}"' in html
        assert (site / "vendor" / asset.file).read_bytes() == vendored_file(asset).read_bytes()
    assert "integrity=" not in html and "crossorigin" not in html
    assert (site / "vendor" / "LICENSES.txt").is_file()
    assert make_offline(site) == []  # idempotent


def test_the_site_reads_its_data_from_file_urls_through_scripts(tmp_path: Path) -> None:
    """Browsers refuse asv's $.ajax of a JSON file on a page opened from file://, and load a script: every JSON
    file gets a script twin that hands its data to the transport loaded right after jQuery."""
    site = _asv_site(tmp_path)
    graph = site / "graphs" / "cpu-Intel(R) Xeon(R)" / "cells.track_seconds_per_sample.json"
    graph.parent.mkdir(parents=True)
    data = {"index.json": {"project": "ampsuite", "benchmarks": {}}, "regressions.json": {"regressions": []}}
    for name, value in data.items():
        (site / name).write_text(json.dumps(value))
    graph.write_text("[[1700000000000, 0.5]]")
    make_offline(site)
    for path in (site / "index.json", site / "regressions.json", graph):
        script = path.with_name(path.name + ".js").read_text()
        assert script == f"ampsuiteAsvJson(document.currentScript, {path.read_text()});\n"
    html = (site / "index.html").read_text()
    jquery = html.index('src="vendor/jquery-3.3.1.min.js"')
    transport = html.index('<script src="vendor/ampsuite-file-protocol.js"></script>')
    assert jquery < transport < html.index('src="asv.js"') and html.count("ampsuite-file-protocol.js") == 1
    shipped = Path(offline.__file__).parent / "www" / offline.FILE_PROTOCOL_SCRIPT
    assert (site / "vendor" / offline.FILE_PROTOCOL_SCRIPT).read_bytes() == shipped.read_bytes()
    (site / "info.json").write_text('{"timestamp": 1}')  # asv writes it after its publishers ran
    assert offline.write_json_scripts(site) == 1 and offline.write_json_scripts(site) == 0
    assert make_offline(site) == []  # idempotent


def test_an_asset_ampsuite_does_not_vendor_is_an_error_naming_it(tmp_path: Path) -> None:
    site = _asv_site(tmp_path)
    page = site / "index.html"
    page.write_text(page.read_text().replace("</head>", '<script src="https://cdn.example/new.js"></script></head>'))
    with pytest.raises(OfflineError, match=r"https://cdn\.example/new\.js"):
        make_offline(site)


def test_remote_references_counts_loads_not_links(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text(
        textwrap.dedent("""\
            <a href="https://example.org/">a link</a>
            <link rel="alternate" type="application/atom+xml" href="https://example.org/feed.xml"/>
            <link rel="stylesheet" href="//cdn.example/x.css">
            <img src="https://cdn.example/logo.png">
            <script src="local.js"></script>
            """)
    )
    (tmp_path / "a.css").write_text("body { background: url('https://cdn.example/bg.png') } p { x: url(local.png) }")
    assert remote_references(tmp_path) == [
        "index.html: //cdn.example/x.css",
        "index.html: https://cdn.example/logo.png",
        "a.css: https://cdn.example/bg.png",
    ]


def test_vendored_files_match_their_recorded_digests() -> None:
    for asset in ASSETS:
        assert vendored_file(asset).stat().st_size > 0
    damaged = Asset(ASSETS[0].url, ASSETS[0].file, ASSETS[0].package, ASSETS[0].path, "0" * 64)
    with pytest.raises(OfflineError, match="sha256"):
        vendored_file(damaged)
    readme = (Path(offline.__file__).parent / "vendor" / "README.md").read_text()
    for asset in ASSETS:
        assert asset.sha256 in readme and asset.package in readme


# ---------------------------------------------------------------------------
# the environment's view of the base interpreter
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "wanted", "ok"),
    [
        ("2.4.1+cu124", "", True),
        ("2.4.1+cu124", "2.4.1", True),
        ("2.4.1+cu124", "2.4.1+cu124", True),
        ("2.4.1+cu124", "2.4.1+cu121", False),
        ("2.4.1", "2.5.0", False),
        ("2.4.1+cu124", ">=2.4,<3", True),
        ("2.3.0", ">=2.4", False),
    ],
)
def test_requirement_versions_match_as_pip_would(found: str, wanted: str, ok: bool) -> None:
    from ampsuite.asvtools.environment import version_matches

    assert version_matches(found, wanted) is ok


def test_requirements_come_from_the_base_interpreter_and_are_never_installed() -> None:
    import torch
    from asv.environment import EnvironmentUnavailable

    from ampsuite.asvtools.environment import find_python, probe, resolve_requirements

    exe = find_python(f"{sys.version_info[0]}.{sys.version_info[1]}")
    assert exe == sys.executable
    facts = probe(exe, ["torch", "surely-not-installed-pkg"])
    assert facts["versions"]["torch"] == torch.__version__
    assert any(Path(p, "torch").is_dir() for p in facts["site"])
    assert resolve_requirements({"torch": ""}, facts["versions"], exe) == {"torch": torch.__version__}
    with pytest.raises(EnvironmentUnavailable, match="surely-not-installed-pkg is not installed"):
        resolve_requirements({"surely-not-installed-pkg": ""}, facts["versions"], exe)
    with pytest.raises(EnvironmentUnavailable, match=re.escape("asks for torch '0.1'")):
        resolve_requirements({"torch": "0.1"}, facts["versions"], exe)


# ---------------------------------------------------------------------------
# machine file
# ---------------------------------------------------------------------------


def test_gpu_facts_are_strings_and_none_without_a_gpu() -> None:
    from ampsuite.asvtools.machine import GPU_KEYS, gpu_facts

    assert gpu_facts({"gpu": None}) == dict.fromkeys(GPU_KEYS, "none")
    facts = gpu_facts(
        {
            "gpu": {"name": "NVIDIA H200", "count": 1, "memory_bytes": 150_000_000_000, "capability": "9.0"},
            "driver": "570.86.15",
            "cuda_driver": "12.8",
        }
    )
    assert facts == {
        "gpu": "NVIDIA H200",
        "num_gpu": "1",
        "gpu_memory": "150000000000",
        "nvidia_driver": "570.86.15",
        "cuda": "12.8",
    }


def test_machine_file_is_one_asv_reads_and_keeps_other_machines(tmp_path: Path) -> None:
    from asv.machine import MachineCollection

    from ampsuite.asvtools.machine import GPU_KEYS, write_machine_file

    path = tmp_path / ".asv-machine.json"
    path.write_text(json.dumps({"version": 1, "other": {"machine": "other", "os": "x"}}))
    assert write_machine_file(path, machine="bench-1") == path
    entry = MachineCollection.load("bench-1", _path=str(path))
    assert entry["machine"] == "bench-1"
    assert set(GPU_KEYS) <= set(entry) and all(isinstance(v, str) for v in entry.values())
    assert MachineCollection.load("other", _path=str(path)) == {"machine": "other", "os": "x"}
    with pytest.raises(ValueError, match="machine"):
        write_machine_file(path, machine="a/b")


# ---------------------------------------------------------------------------
# the browser check itself
# ---------------------------------------------------------------------------


def test_the_offline_check_sees_a_request_leave_and_a_console_error(tmp_path: Path) -> None:
    from ampsuite.browser import find_chromium, load_page, serve

    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required under CI (apt-get install chromium)")
        pytest.skip("no Chromium (apt-get install chromium)")
    (tmp_path / "index.html").write_text(
        '<html><head><link rel="icon" href="data:,"><script src="https://cdn.example/x.js"></script></head>'
        '<body><script>console.error("boom"); window.answer = 6 * 7;</script></body></html>'
    )
    with serve(tmp_path) as origin:
        report = load_page(f"{origin}/index.html", expressions={"answer": "window.answer"}, settle=0.3)
    assert report.values == {"answer": 42}
    assert report.offsite(origin) == ["https://cdn.example/x.js"]
    assert any("cdn.example/x.js" in f and "NAME_NOT_RESOLVED" in f for f in report.failed)
    assert "error: boom" in report.console
    assert len(report.errors()) >= 2


def test_the_noise_proof_still_fits_the_toy_workload_and_asvs_names() -> None:
    # benchmarks/noise_proof.py patches the toy workload's source: the line it patches must still be there,
    # and the patched module must still be Python that runs the network twice.
    import ast
    import importlib.util

    spec = importlib.util.spec_from_file_location("noise_proof", REPO / "benchmarks" / "noise_proof.py")
    assert spec is not None and spec.loader is not None
    proof = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(proof)
    patched = proof.twice_as_slow((REPO / proof.TOY).read_text(encoding="utf-8"))
    tree = ast.parse(patched)
    assert "model = _Twice(" in patched and any(
        isinstance(node, ast.ClassDef) and node.name == "_Twice" for node in tree.body
    )
    # ... and that it reads the flags of the benchmarks as asv compare names them now.
    assert proof.is_toy_timing("cells.track_seconds_per_sample('toy/fp32/bs32')")
    assert not proof.is_toy_timing("cells.track_seconds_per_sample('resnet-tiny/fp32/bs8')")
    assert not proof.is_toy_timing("cells.track_peak_memory_bytes('toy/fp32/bs32')")


def test_asv_never_tracks_a_cuda_suite_with_cpu_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite's own device stands: on a machine without a GPU a CUDA suite is refused, not run on the CPU.
    from ampsuite.asvtools import plan
    from ampsuite.contract.errors import UsageError
    from ampsuite.host import environment

    monkeypatch.setattr(environment, "detect_device", lambda: "cpu")
    suite = tmp_path / "gpu.toml"
    suite.write_text(toy_suite("gpu", device="cuda"), encoding="utf-8")
    with pytest.raises(UsageError, match="torch sees none"):
        plan.describe(suite, None)
    assert plan.describe(suite, "cpu")["device"] == "cpu"  # asked for, as `--device cpu` would


def test_each_asv_round_measures_every_cell_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # run's second pass (a noisy fastest cell measured again in 3 processes) would pool some cells' samples in
    # some commits and not in others: the benchmarks turn it off.
    import subprocess
    import types

    from benchmarks import cells

    started: list[list[str]] = []

    class Finished:
        returncode = 0
        pid = 0

        def __init__(self, command: list[str], **kwargs: Any) -> None:
            started.append(command)

        def communicate(self, timeout: float | None = None) -> tuple[str, None]:
            return "", None

    # The probe of the commit's `ampsuite run --help` runs for real; the run itself is only recorded.
    fake = types.SimpleNamespace(**{n: getattr(subprocess, n) for n in ("run", "PIPE", "STDOUT", "CompletedProcess")})
    monkeypatch.setattr(cells, "subprocess", types.SimpleNamespace(**vars(fake), Popen=Finished))
    cells.run_suite(Path("suite.toml"), "cpu", tmp_path / "r.json", 60)
    assert "--no-again" in started[0] and started[0][1:4] == ["-m", "ampsuite", "run"]


def test_the_asv_environment_asks_for_the_setuptools_the_build_requires() -> None:
    import tomllib

    from ampsuite.asvtools.environment import MIN_SETUPTOOLS

    requires = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    assert f"setuptools>={MIN_SETUPTOOLS}" in requires
