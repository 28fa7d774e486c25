"""The results file: strict versioned JSON, clear errors for bad files, and the documented record schema."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from records import write_sealed

from ampsuite import results
from ampsuite.contract.errors import ResultsFileError


def _record(cell_id: str = "toy/fp32/bs8", status: str = "passed", **fields: Any) -> dict[str, Any]:
    """A complete record, as the runner writes one (the loader checks the whole schema)."""
    rec: dict[str, Any] = {
        "id": cell_id,
        "status": status,
        "device": "cpu",
        "batch_size": 8,
        "world_size": 1,
        "combination": "fp32",
        "baseline": "fp32",
        "workload": {"id": "toy", "plugin": "toy", "options": {}, "axes": {}, "unit": "samples"},
        "techniques": [],
        "started": "2026-01-01T00:00:00+00:00",
        "wall_seconds": 1.5,
        "metrics": _PASSED_METRICS if status == "passed" else {},
        "numerics": None,
        "diagnostics": {},
        "notes": {},
        "warnings": [],
        "evidence": None,
    }
    rec.update(fields)
    return rec


_STEP = {"samples": [0.01] * 5, "n": 5, "median": 0.01, "mean": 0.01, "min": 0.01, "max": 0.01}
_PASSED_METRICS: dict[str, Any] = {
    "step_time": {**_STEP, "p10": 0.01, "p90": 0.01, "iqr": 0.0, "rel_iqr": 0.0, "noise": 0.0},
    "throughput": 800.0,
}
"""What every reader shows of a passed cell (the loader refuses a passed record without it)."""


def _doc(cells: Any = None, **top: Any) -> dict[str, Any]:
    doc = {
        "format": results.FORMAT,
        "version": results.VERSION,
        "run": {
            "id": "r1",
            "started": "2026-01-01T00:00:00+00:00",
            "finished": None,
            "argv": ["ampsuite", "run"],
            "suite": {
                "name": "toy",
                "path": None,
                "sha256": None,
                "baseline": "fp32",
                "device": "cpu",
                "numerics_tolerance": 0.05,
            },
            "measure": {"warmup_steps": 1, "min_steps": 3, "max_steps": 5, "max_seconds": 1.0, "noise_target": 0.01},
            "plugins": [],
        },
        "environment": {"torch": "2.4.0", "torch_cuda": "12.4", "gpu": {"name": "NVIDIA H200"}},
        "cells": cells if cells is not None else [_record()],
    }
    doc.update(top)
    return doc


def _sealed(doc: dict[str, Any]) -> str:
    """The file text the writer would produce: the document plus its integrity checksum."""
    return json.dumps({**doc, "integrity": {"sha256": results.checksum(doc)}})


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "results.json"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = _sealed(_doc())

# (test id, file text, regex for the message after "PATH: ")
BAD_FILES = [
    ("truncated", GOOD[: len(GOOD) // 2], r"corrupt results file \(not strict JSON: .+\)"),
    ("empty", "", r"corrupt results file \(not strict JSON: .+\)"),
    ("nan-literal", GOOD.replace('"finished": null', '"finished": NaN'), r".*non-standard JSON constant NaN.*"),
    (
        "infinity-literal",
        GOOD.replace('"finished": null', '"finished": -Infinity'),
        r".*non-standard JSON constant -Infinity.*",
    ),
    (
        "edited-after-writing",
        GOOD.replace('"status": "passed"', '"status": "skipped"'),
        r"content does not match its checksum \(edited or damaged after it was written\); refusing it",
    ),
    ("no-checksum", json.dumps(_doc()), r"content does not match its checksum .*"),
    (
        "unknown-version",
        json.dumps(_doc(version=2)),
        r"results format version 2 is not supported; this ampsuite reads 1",
    ),
    (
        "no-version",
        json.dumps({k: v for k, v in _doc().items() if k != "version"}),
        r"results format version None is not supported; this ampsuite reads 1",
    ),
    (
        "wrong-format",
        json.dumps(_doc(format="asv-results")),
        r'not an ampsuite results file \(no "format": "ampsuite-results"\)',
    ),
    ("not-an-object", "[1, 2, 3]", r'not an ampsuite results file \(no "format": "ampsuite-results"\)'),
    (
        "missing-cells",
        json.dumps({k: v for k, v in _doc().items() if k != "cells"}),
        r"corrupt results file: missing 'cells'",
    ),
    ("cells-not-a-list", _sealed(_doc(cells={})), r"corrupt results file: cells: expected a list, got dict .*"),
    (
        "unknown-status",
        _sealed(_doc(cells=[_record("a"), _record("b", "exploded")])),
        r"corrupt results file: cells\[1\]\.status: expected one of passed, .*, got 'exploded'",
    ),
    (
        "record-without-metrics",
        _sealed(_doc(cells=[{k: v for k, v in _record().items() if k != "metrics"}])),
        r"corrupt results file: cells\[0\]: missing 'metrics'",
    ),
    (
        "run-of-the-wrong-type",
        _sealed(_doc(run=[1, 2])),
        r"corrupt results file: run: expected an object, got list .*",
    ),
    (
        "integer-of-400-digits",
        _sealed(_doc(cells=[_record(batch_size=10**400)])),
        r"corrupt results file: cells\[0\]\.batch_size: integer out of range",
    ),
    ("nested-100000-deep", '{"format": "ampsuite-results", "version": 1, "cells": ' + "[" * 100_000, r".*nested.*"),
    (
        "nested-deep-but-parsable",
        _sealed(_doc(cells=[_record(notes={"x": json.loads("[" * 200 + "]" * 200)})])),
        r"corrupt results file: .*nested deeper than 64 levels",
    ),
    (
        "duplicate-cell",
        _sealed(_doc(cells=[_record(), _record(status="failed")])),
        r"corrupt results file: cell 'toy/fp32/bs8' recorded twice",
    ),
]


@pytest.mark.parametrize(("text", "pattern"), [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_load_rejects_bad_files_naming_the_file(tmp_path: Path, text: str, pattern: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ResultsFileError) as info:
        results.load(path)
    assert re.fullmatch(re.escape(f"{path}: ") + pattern, str(info.value), flags=re.DOTALL), str(info.value)
    assert info.value.path == str(path)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsFileError, match=re.escape(f"{tmp_path / 'none.json'}: no such results file")):
        results.load(tmp_path / "none.json")


def test_load_accepts_a_good_file(tmp_path: Path) -> None:
    assert results.load(_write(tmp_path, GOOD)) == json.loads(GOOD)


def test_run_executor_jobs_are_part_of_the_format(tmp_path: Path) -> None:
    """What an executor remembered (run.executor.jobs) loads; a wrong shape is refused, naming its path."""
    doc = _doc([])
    job = {"job_id": "4242", "folder": "/shared/jobs/4242", "cluster": "slurm", "tasks": 2, "nodes": 2}
    doc["run"]["executor"] = {"name": "slurm", "jobs": {"toy/fp32/bs8": job}}
    assert results.load(_write(tmp_path, _sealed(doc)))["run"]["executor"]["jobs"]["toy/fp32/bs8"] == job
    for bad, where in (
        ({"name": "slurm", "jobs": ["4242"]}, r"run\.executor\.jobs: expected an object"),
        ({"name": "slurm", "jobs": {"toy/fp32/bs8": "4242"}}, r"run\.executor\.jobs\.toy/fp32/bs8: expected"),
        ({"jobs": {}}, r"run\.executor: missing 'name'"),
    ):
        doc["run"]["executor"] = bad
        with pytest.raises(ResultsFileError, match=where):
            results.load(_write(tmp_path, _sealed(doc)))


def _tune_summary() -> dict[str, Any]:
    """run.tune of a tune results file: one workload, its FP32 reference step and winner."""
    step = {
        "phase": "reference",
        "combination": "fp32",
        "batch_size": 8,
        "cell_id": "toy/fp32/bs8",
        "status": "passed",
        "throughput": 800.0,
        "untrusted": None,
        "decision": "reference",
        "detail": "",
    }
    winner = {"combination": "fp32", "techniques": [], "batch_size": 8, "cell_id": "toy/fp32/bs8", "throughput": 800.0}
    workload = {"key": "toy", "unit": "samples", "steps": [step], "winner": winner, "ablation": []}
    return {"device": "cpu", "budget_seconds": 60.0, "workloads": [workload], "confirmations": []}


def test_run_tune_is_part_of_the_format(tmp_path: Path) -> None:
    """A tune summary loads, this version's and an earlier one's (a decision as free text); a run.tune no reader
    could use is refused, naming its key, before any reader (tune --resume, the tune page) sees it."""
    doc = _doc()
    doc["run"]["tune"] = _tune_summary()
    earlier = doc["run"]["tune"]["workloads"][0]["steps"][0]
    earlier.pop("detail")
    earlier["decision"] = "not measured again: the file's record stays"
    assert results.load(_write(tmp_path, _sealed(doc)))["run"]["tune"] == doc["run"]["tune"]
    stopped = {"confirmations": [{"key": "toy"}]}  # a run killed before its summary; a damaged verdict decides nothing
    doc["run"]["tune"] = stopped
    assert results.load(_write(tmp_path, _sealed(doc)))["run"]["tune"] == stopped
    odd_winner = _tune_summary()
    odd_winner["workloads"][0]["winner"]["batch_size"] = "abc"
    odd_phase = _tune_summary()
    odd_phase["workloads"][0]["steps"][0]["phase"] = "screen"
    for bad, where in (
        ("a summary", r"run\.tune: expected an object, got str 'a summary'"),
        (odd_winner, r"run\.tune\.workloads\[0\]\.winner\.batch_size: expected an integer, got str 'abc'"),
        ({"workloads": [1, "x", None]}, r"run\.tune\.workloads\[0\]: expected an object, got int '1'"),
        (odd_phase, r"run\.tune\.workloads\[0\]\.steps\[0\]\.phase: expected one of reference, start, .*'screen'"),
    ):
        doc["run"]["tune"] = bad
        with pytest.raises(ResultsFileError, match=where) as info:
            results.load(_write(tmp_path, _sealed(doc)))
        assert "\n" not in str(info.value)


def test_written_files_are_strict_json(tmp_path: Path) -> None:
    metrics = {**_PASSED_METRICS, "x": math.nan, "y": [1.0, math.inf, -math.inf]}
    doc = _doc(cells=[_record("a", metrics=metrics)])
    path = tmp_path / "out" / "results.json"
    writer = results.ResultsWriter(path, copy.deepcopy(doc))
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    loaded = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict constant {name}"))
    assert loaded["cells"][0]["metrics"] == {**_PASSED_METRICS, "x": None, "y": [1.0, None, None]}
    assert results.load(path) == loaded
    assert writer.doc["cells"][0]["metrics"]["x"] != writer.doc["cells"][0]["metrics"]["x"]  # memory keeps NaN
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]  # no temporary left behind


def test_writer_rewrites_after_each_record_and_keeps_one_per_id(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    writer = results.ResultsWriter(path, _doc(cells=[]))
    assert results.load(path)["cells"] == []
    writer.add(_record("b", "interrupted"))
    writer.add(_record("a", "passed"))
    assert [r["id"] for r in results.load(path)["cells"]] == ["b", "a"]
    writer.add(_record("b", "passed"))  # a rerun replaces, never duplicates
    writer.order(["a", "b"])
    writer.flush()
    assert [(r["id"], r["status"]) for r in results.load(path)["cells"]] == [("a", "passed"), ("b", "passed")]


@pytest.mark.parametrize(
    ("change", "fact"),
    [
        ({"torch": "2.5.0"}, "torch '2.4.0' vs '2.5.0'"),
        ({"torch_cuda": "12.6"}, "torch_cuda '12.4' vs '12.6'"),
        ({"gpu": {"name": "NVIDIA A100-SXM4-80GB"}}, "gpu_name 'NVIDIA H200' vs 'NVIDIA A100-SXM4-80GB'"),
        ({"gpu": None}, "gpu_name 'NVIDIA H200' vs None"),
    ],
)
def test_check_comparable_refuses_other_environments(change: dict[str, Any], fact: str) -> None:
    old = _doc()["environment"]
    new = {**old, **change}
    with pytest.raises(ResultsFileError) as info:
        results.check_comparable("old.json", old, new)
    assert str(info.value) == f"old.json: measured in another environment, refusing to merge: {fact}"


def test_check_comparable_accepts_same_software_and_gpu() -> None:
    old = _doc()["environment"]
    results.check_comparable("old.json", old, {**old, "hostname": "other-host", "cpu_count": 99})


# ---------------------------------------------------------------------------
# the schema of a real record (docs/architecture.md, "Results file (version 1)")
# ---------------------------------------------------------------------------

RECORD_KEYS = {
    "id", "status", "device", "batch_size", "combination", "baseline", "workload", "techniques",
    "started", "wall_seconds", "metrics", "numerics", "diagnostics", "notes", "warnings", "evidence",
}  # fmt: skip
STEP_TIME_KEYS = {"samples", "n", "median", "mean", "min", "max", "p10", "p90", "p99", "iqr", "rel_iqr", "noise"}
NUMERICS_KEYS = {"losses", "loss_at_n", "final_loss", "nonfinite_step", "nonfinite_what", "scale_history"}
ENVIRONMENT_KEYS = {
    "hostname", "platform", "python", "torch", "torch_cuda", "cudnn", "cuda_driver", "gpu", "cpu", "cpu_count",
    "ampsuite_version", "ampsuite_commit", "workdir_commit", "peaks",
}  # fmt: skip


@pytest.fixture(scope="module")
def real(healthy_run) -> dict[str, Any]:
    path, _ = healthy_run
    return results.load(path)


def test_real_file_is_strict_json_equal_to_the_runner_document(healthy_run) -> None:
    path, doc = healthy_run
    on_disk = json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"non-strict constant {name}"))
    assert on_disk.pop("integrity") == {"sha256": results.checksum(on_disk)}
    assert on_disk == results.sanitize(doc)


def test_real_document_top_level(real) -> None:
    assert (real["format"], real["version"]) == ("ampsuite-results", 1)
    run = real["run"]
    assert {"id", "started", "finished", "argv", "suite", "plugins"} <= set(run)
    assert run["finished"] is not None and run["finished"] >= run["started"]
    assert {"name", "path", "sha256", "baseline", "device"} <= set(run["suite"])
    assert (run["suite"]["name"], run["suite"]["baseline"], run["suite"]["device"]) == ("healthy", "fp32", "cpu")
    assert re.fullmatch(r"[0-9a-f]{64}", run["suite"]["sha256"])
    assert all(set(p) == {"name", "module", "version", "source"} for p in run["plugins"])
    assert {"toy", "noop"} <= {p["name"] for p in run["plugins"]}


def test_real_environment(real) -> None:
    env = real["environment"]
    assert set(env) >= ENVIRONMENT_KEYS
    import torch

    import ampsuite

    assert (env["torch"], env["ampsuite_version"], env["gpu"]) == (torch.__version__, ampsuite.__version__, None)
    assert env["cpu_count"] >= 1 and env["python"].count(".") == 2


def test_real_record_fields(real) -> None:
    assert [r["id"] for r in real["cells"]] == ["toy/fp32/bs8", "toy/noop/bs8"]
    for rec in real["cells"]:
        assert set(rec) >= RECORD_KEYS, RECORD_KEYS - set(rec)
        assert (rec["status"], rec["device"], rec["batch_size"], rec["baseline"]) == ("passed", "cpu", 8, "fp32")
        assert rec["evidence"] is None
        assert rec["workload"]["id"] == rec["workload"]["plugin"] == "toy"
        assert rec["workload"]["unit"] == "samples"
        assert rec["workload"]["options"]["hidden"] == 16
        assert rec["wall_seconds"] > 0
        assert isinstance(rec["warnings"], list)
    assert real["cells"][0]["techniques"] == []
    assert real["cells"][1]["techniques"] == [{"name": "noop", "options": {}}]


def test_real_step_time_statistics(real) -> None:
    for rec in real["cells"]:
        st = rec["metrics"]["step_time"]
        assert set(st) == STEP_TIME_KEYS
        samples = st["samples"]
        assert st["n"] == len(samples) and 3 <= st["n"] <= 5  # the fast [measure] table's bounds
        assert all(s > 0 for s in samples)
        assert st["min"] == min(samples) and st["max"] == max(samples)
        assert st["min"] <= st["p10"] <= st["median"] <= st["p90"] <= st["max"]
        assert st["iqr"] >= 0 and st["rel_iqr"] == pytest.approx(st["iqr"] / st["median"])


def test_real_metrics(real) -> None:
    for rec in real["cells"]:
        m = rec["metrics"]
        assert m["samples_per_step"] == 8
        assert m["throughput"] == pytest.approx(8 / m["step_time"]["median"])
        assert m["build_seconds"] > 0 and m["first_step_seconds"] > 0
        assert m["warmup_steps"] == 1  # the fast [measure] table's, which asks for no warm-up seconds
        assert m["peak_memory_bytes"] > 0 and m["memory_kind"] == "cpu-rss"  # the memory probe


def test_real_numerics(real) -> None:
    for rec in real["cells"]:
        num = rec["numerics"]
        assert set(num) >= NUMERICS_KEYS
        assert len(num["losses"]) == 2  # numerics_steps
        assert all(isinstance(x, float) and math.isfinite(x) for x in num["losses"])
        assert num["loss_at_n"] == num["losses"][-1]
        assert isinstance(num["final_loss"], float)
        assert (num["nonfinite_step"], num["nonfinite_what"], num["scale_history"]) == (None, None, None)
    fp32, noop = real["cells"]
    assert fp32["numerics"]["losses"] == noop["numerics"]["losses"]  # same seed, noop changes nothing


def test_probe_payloads_that_reports_read_are_checked_on_load(tmp_path) -> None:
    # A file whose checksum is valid but whose tensor-cores rows are not rows would crash the
    # report's workload pages; the loader refuses it in one line instead.
    source = Path(__file__).resolve().parent.parent / "reports/h200/faults.json"
    doc = json.loads(source.read_text(encoding="utf-8"))
    cell = next(r for r in doc["cells"] if (r.get("diagnostics") or {}).get("tensor_cores"))
    cell["diagnostics"]["tensor_cores"]["ops"][0]["shapes"] = 1
    path = write_sealed(tmp_path / "doctored.json", doc)
    with pytest.raises(ResultsFileError, match=r"diagnostics\.tensor_cores\.ops\[0\]\.shapes: expected a list"):
        results.load(path)


def test_a_passed_record_without_its_figures_is_refused(tmp_path: Path) -> None:
    # Types alone allow an empty metrics object; every reader shows a passed cell's step time.
    path = tmp_path / "results.json"
    path.write_text(_sealed(_doc(cells=[_record(metrics={"throughput": 800.0})])), encoding="utf-8")
    with pytest.raises(ResultsFileError, match=r"cells\[0\]\.metrics: a passed cell without 'step_time'"):
        results.load(path)
