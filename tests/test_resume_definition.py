"""--resume keeps a record only when it measured the cell of the same id as the suite file now defines it.

A cell id names workload entry, combination and batch size, not the options: an edited suite file gives a
cell the id of a record that measured something else. Run and tune measure such a cell again, and keep the
file as it was beside it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from conftest import run_ampsuite, toy_suite

from ampsuite import results
from ampsuite.host.manager import Registry
from ampsuite.results import definition
from ampsuite.spec.matrix import expand
from ampsuite.spec.suitefile import loads


def _suite(steps: int) -> str:
    """FP32, and gradient accumulation over ``steps`` micro-batches: a cell whose options change, not its id."""
    return toy_suite(
        "edited",
        timeout=120,
        toy={"batch_size": 8},
        combinations={"fp32": [], "accumulated": ["grad-accumulation"]},
        techniques={"grad-accumulation": {"steps": steps}},
    )


def _cells(path: Path, registry: Registry) -> dict[str, Any]:
    return {c.id: c for c in expand(loads(path.read_text(), str(path)), registry, "cpu")}


def _run(suite_path: Path, out: Path, *extra: str) -> str:
    proc = run_ampsuite("run", str(suite_path), "-o", str(out), "--no-report", "--no-peaks", *extra, cwd=out.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_a_record_matches_its_own_cell_and_names_what_changed(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(_suite(2))
    cell = _cells(path, registry)["toy/accumulated/bs8"]
    from ampsuite.results import base_record

    record = results.sanitize(base_record(cell, registry))
    assert definition.difference(record, cell, registry) is None
    path.write_text(_suite(4))
    edited = _cells(path, registry)["toy/accumulated/bs8"]
    assert edited.id == cell.id
    assert definition.difference(record, edited, registry) == "technique options"
    other = {**record, "batch_size": 16, "techniques": [{"name": "noop", "options": {}}]}
    assert definition.difference(other, edited, registry) == "techniques noop, batch_size 16"


def test_a_record_written_before_an_option_existed_matches_the_options_default(registry: Registry, tmp_path) -> None:
    """Records from before a plugin gained an option with a default are that default's measurement."""
    path = tmp_path / "suite.toml"
    path.write_text(_suite(4))
    cell = _cells(path, registry)["toy/accumulated/bs8"]
    from ampsuite.results import base_record

    record = results.sanitize(base_record(cell, registry))
    record["techniques"] = [{"name": t["name"], "options": {}} for t in record["techniques"]]  # steps = 4, default
    record["workload"]["options"] = {}
    assert definition.difference(record, cell, registry) is None
    record["techniques"][0]["options"] = {"gone": 1}  # an option the plugin no longer knows
    assert definition.difference(record, cell, registry) == "technique options"


@pytest.mark.slow
def test_resume_runs_a_cell_whose_options_changed_again_and_keeps_the_file_as_it_was(tmp_path: Path) -> None:
    suite_path = tmp_path / "suite.toml"
    out = tmp_path / "results.json"
    suite_path.write_text(_suite(2))
    _run(suite_path, out)
    first = {r["id"]: r for r in results.load(out)["cells"]}
    assert first["toy/accumulated/bs8"]["techniques"][0]["options"] == {"steps": 2}

    suite_path.write_text(_suite(4))
    output = _run(suite_path, out, "--resume")
    resumed = {r["id"]: r for r in results.load(out)["cells"]}
    assert resumed["toy/fp32/bs8"] == first["toy/fp32/bs8"]  # unchanged: kept as it was
    assert resumed["toy/accumulated/bs8"]["techniques"][0]["options"] == {"steps": 4}
    assert resumed["toy/accumulated/bs8"]["status"] == "passed"
    assert "toy/accumulated/bs8 runs again: its record measured other technique options" in output
    backups = list(tmp_path.glob("results.*.json"))
    assert len(backups) == 1
    kept = {r["id"]: r for r in results.load(backups[0])["cells"]}
    assert kept["toy/accumulated/bs8"] == first["toy/accumulated/bs8"]  # nothing measured is lost

    _run(suite_path, out, "--resume")  # nothing changed now: nothing runs, no new copy
    assert {r["id"]: r for r in results.load(out)["cells"]} == resumed
    assert len(list(tmp_path.glob("results.*.json"))) == 1


@pytest.mark.slow
def test_a_resumed_run_narrowed_by_k_keeps_the_records_it_does_not_select(tmp_path: Path) -> None:
    # `run --resume -k ONE -o results.json` must not write a file with ONE's record alone.
    suite_path = tmp_path / "suite.toml"
    out = tmp_path / "results.json"
    suite_path.write_text(_suite(2))
    _run(suite_path, out, "-k", "fp32")
    first = {r["id"]: r for r in results.load(out)["cells"]}
    assert set(first) == {"toy/fp32/bs8"}
    _run(suite_path, out, "--resume", "-k", "accumulated")
    resumed = {r["id"]: r for r in results.load(out)["cells"]}
    assert set(resumed) == {"toy/fp32/bs8", "toy/accumulated/bs8"}
    assert resumed["toy/fp32/bs8"] == first["toy/fp32/bs8"]
    assert [r["id"] for r in results.load(out)["cells"]] == ["toy/accumulated/bs8", "toy/fp32/bs8"]


@pytest.mark.slow
def test_retry_failed_runs_the_failed_cells_again_and_keeps_the_rest(tmp_path: Path) -> None:
    suite_path = tmp_path / "suite.toml"
    out = tmp_path / "results.json"
    suite_path.write_text(
        toy_suite("retry", timeout=120, toy={"batch_size": 8}, combinations={"fp32": [], "broken": ["fault-raise"]})
    )

    def run(*extra: str) -> tuple[int, str, dict[str, Any]]:
        argv = ("run", str(suite_path), "-o", str(out), "--no-report", "--no-peaks", "-p", "ampsuite.plugins.faults")
        proc = run_ampsuite(*argv, *extra, cwd=tmp_path)
        return proc.returncode, proc.stdout + proc.stderr, {r["id"]: r for r in results.load(out)["cells"]}

    code, _, first = run()
    assert code == 1 and first["toy/broken/bs8"]["status"] == "failed"
    code, _, kept = run("--resume")
    assert code == 1 and kept == first  # a failed record is finished: --resume alone keeps it
    code, output, again = run("--resume", "--retry-failed")
    assert code == 1 and again["toy/fp32/bs8"] == first["toy/fp32/bs8"]
    assert again["toy/broken/bs8"]["started"] >= first["toy/broken/bs8"]["started"]
    assert again["toy/broken/bs8"]["wall_seconds"] != first["toy/broken/bs8"]["wall_seconds"]
    assert "toy/broken/bs8 runs again: its record ended failed (--retry-failed)" in output
    backups = list(tmp_path.glob("results.*.json"))
    assert len(backups) == 1 and {r["id"]: r for r in results.load(backups[0])["cells"]} == first


def test_retry_failed_goes_with_resume(tmp_path: Path) -> None:
    from ampsuite.cli import main

    assert main(["run", "--retry-failed", "-o", str(tmp_path / "r.json")]) == 4


def test_resume_refuses_a_file_measured_with_other_settings(tmp_path: Path) -> None:
    from dataclasses import asdict

    from ampsuite.contract.errors import ResultsFileError
    from ampsuite.results.document import check_same_suite

    spec = loads(_suite(2), "suite.toml")
    old: dict[str, Any] = {"run": {"suite": {"name": spec.name}, "measure": asdict(spec.measure)}}
    check_same_suite("r.json", old, spec)  # the same settings: resumed
    old["run"]["measure"].pop("processes")  # a key an older version did not write: its default, no change
    check_same_suite("r.json", old, spec)
    # ... but measured as its default: a suite that now warms each cell up for 1.5 s is another measurement.
    old["run"]["measure"].pop("warmup_seconds")
    warmed = dataclasses.replace(spec, measure=dataclasses.replace(spec.measure, warmup_seconds=1.5))
    with pytest.raises(ResultsFileError, match=r"\(warmup_seconds 0\.0 -> 1\.5\)"):
        check_same_suite("r.json", old, warmed)
    old["run"]["measure"]["noise_target"] = 0.5
    with pytest.raises(ResultsFileError, match=r"^r\.json: was measured with other settings \(noise_target 0\.5 ->"):
        check_same_suite("r.json", old, spec)
    old["run"]["measure"] = asdict(spec.measure)
    old["run"]["suite"]["quality"] = {"steps": 100}
    with pytest.raises(ResultsFileError, match=r"\(\[quality\] removed\)"):
        check_same_suite("r.json", old, spec)
