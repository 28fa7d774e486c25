"""Machines side by side: results files of different machines get machines.html and machines.csv; files of one
machine stay its history; asv results of two machines stay two series."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import pytest
from records import asv_result_file, sealed

from ampsuite import analysis, cli, results
from ampsuite.contract.errors import ExitCode
from ampsuite.report import render_site

H200 = Path(__file__).parent.parent / "reports" / "h200" / "cudnn-benchmark.json"
H100_CARDS = [
    Path(__file__).parent.parent / "reports" / "h100" / f
    for f in ("default-cuda.json", "default-cuda-another-card.json")
]
"""The default suite on two H100 cards, both in a host named ``vm``: the records name each card's UUID."""


def other_machine(doc: dict[str, Any], gpu: str = "NVIDIA H100 80GB HBM3", host: str = "node-b") -> dict[str, Any]:
    """``doc`` as if measured on another machine at 0.6x the throughput, its fourth cell skipped there."""
    out = copy.deepcopy(doc)
    out["environment"]["hostname"] = host
    out["environment"]["gpu"]["name"] = gpu
    for record in out["cells"]:
        if record["metrics"].get("throughput"):
            record["metrics"]["throughput"] *= 0.6
    skipped = out["cells"][3]
    skipped.update(status="skipped", evidence={"reason": "needs more memory than node-b has"}, metrics={})
    return sealed(out)


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    results.load(path)  # a valid results file, as `ampsuite report` would read it
    return path


@pytest.fixture(scope="module")
def h200() -> dict[str, Any]:
    return results.load(H200)


@pytest.fixture(scope="module")
def h100_file(tmp_path_factory: pytest.TempPathFactory, h200: dict[str, Any]) -> Path:
    return write(tmp_path_factory.mktemp("h100") / "h100.json", other_machine(h200))


def test_machines_are_named_by_gpu_and_host_and_by_file_when_alike(h200: dict[str, Any]) -> None:
    assert analysis.machine_name(h200) == "NVIDIA H200 on vm"
    same = copy.deepcopy(h200)
    same["run"]["id"] = "later"
    assert [m.docs for m in analysis.group_machines([h200, same])] == [(0, 1)]
    nameless = copy.deepcopy(h200)
    nameless["environment"]["hostname"] = None
    tricky = copy.deepcopy(h200)
    tricky["environment"]["hostname"] = None
    tricky["environment"]["gpu"]["name"] = "NVIDIA H200 on vm"  # reads like the first machine's name
    machines = analysis.group_machines([h200, nameless, tricky], ["a/one.json", "b/two.json", "c/three.json"])
    assert [m.label for m in machines] == [
        "NVIDIA H200 on vm (one.json)",
        "NVIDIA H200",
        "NVIDIA H200 on vm (three.json)",
    ]


def test_cells_side_by_side_with_the_analysis_figures(h200: dict[str, Any], h100_file: Path) -> None:
    h100 = results.load(h100_file)
    across = analysis.across_machines([h200, h100])
    assert [m.label for m in across.machines] == ["NVIDIA H200 on vm", "NVIDIA H100 80GB HBM3 on node-b"]
    assert len(across.cells) == len(h200["cells"]) and not across.only_one
    derived = analysis.derive(h200)
    for cell in across.cells:
        first, second = cell.entries
        assert first is not None and second is not None
        assert first.ratio_to_first == pytest.approx(1.0)
        assert first.derived == derived[cell.id]  # the analysis layer's speedup, baseline and MFU
        if second.status == "passed":
            assert second.ratio_to_first == pytest.approx(0.6)
        else:
            assert second.throughput is None and second.ratio_to_first is None


def test_site_of_two_machines_has_the_machines_page_linked_everywhere(
    tmp_path: Path, h200: dict[str, Any], h100_file: Path
) -> None:
    h100 = results.load(h100_file)
    index = render_site([h200, h100], tmp_path, results_files=[H200, h100_file])
    html = (tmp_path / "machines.html").read_text()
    assert "NVIDIA H200 on vm" in html and "NVIDIA H100 80GB HBM3 on node-b" in html
    assert "needs more memory than node-b has" in html and "badge status-skipped" in html
    assert "0.60\u00d7" in html and "1.00\u00d7" in html
    skipped = h200["cells"][3]
    assert repr(skipped["metrics"]["throughput"]) in html  # the chart's tooltip: the stored value
    assert html.count("<svg") == 1  # one workload, one chart
    for page in tmp_path.glob("*.html"):
        assert 'href="machines.html"' in page.read_text(), page.name
    assert "the same cells side by side" in index.read_text()
    assert not (tmp_path / "history.html").exists()
    with (tmp_path / "machines.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * len(h200["cells"])  # the skipped cell too: a row with its status, no number
    row = next(r for r in rows if r["cell_id"] == skipped["id"] and r["machine"].startswith("NVIDIA H100"))
    assert row["status"] == "skipped" and row["throughput"] == "" and "node-b" in row["evidence"]
    fp32 = next(r for r in rows if r["cell_id"] == "resnet50/fp32/bs32" and r["file"] == "h100.json")
    assert float(fp32["ratio_to_first"]) == pytest.approx(0.6) and fp32["speedup_vs_baseline"] == "1.0"
    summary = (tmp_path / "summary.md").read_text()
    assert "### Machines: NVIDIA H200 on vm, NVIDIA H100 80GB HBM3 on node-b" in summary
    assert "| resnet50/fp32/bs32 | NVIDIA H100 80GB HBM3 on node-b | passed |" in summary
    assert "| 1.00\u00d7 | 0.60\u00d7 |" in summary


def test_one_site_is_not_a_machines_page(tmp_path: Path, h200: dict[str, Any]) -> None:
    index = render_site([h200], tmp_path)
    assert not (tmp_path / "machines.html").exists() and not (tmp_path / "machines.csv").exists()
    assert "machines.html" not in index.read_text()


def test_cpu_run_cells_are_listed_as_on_one_machine_only(
    tmp_path: Path, healthy_run: tuple[Path, dict[str, Any]], h200: dict[str, Any], h100_file: Path
) -> None:
    cpu_path, cpu = healthy_run
    render_site([h200, results.load(h100_file), cpu], tmp_path, results_files=[H200, h100_file, cpu_path])
    html = (tmp_path / "machines.html").read_text()
    assert "Cells on one machine only" in html
    assert f"{len(cpu['cells'])} only on {analysis.machine_name(cpu)}" in html
    for record in cpu["cells"]:
        assert f"<code>{record['id']}</code>" in html
    assert "The same cells on 3 machines" in html


def test_cli_two_machines_compares_them_and_makes_no_history(tmp_path: Path, h100_file: Path, capsys) -> None:
    assert cli.main(["report", str(H200), str(h100_file), "-o", str(tmp_path)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "machines: NVIDIA H200 on vm (1 file); NVIDIA H100 80GB HBM3 on node-b (1 file)" in out
    assert (tmp_path / "machines.html").exists() and not (tmp_path / "history.html").exists()


def test_cli_one_machine_twice_is_history_as_before(tmp_path: Path, h200: dict[str, Any]) -> None:
    later = copy.deepcopy(h200)
    later["run"]["id"] = "later"
    later["environment"]["workdir_commit"] = "f" * 40
    second = write(tmp_path / "later.json", sealed(later))
    assert cli.main(["report", str(H200), str(second), "-o", str(tmp_path / "site")]) == ExitCode.OK
    assert (tmp_path / "site" / "history.html").exists() and not (tmp_path / "site" / "machines.html").exists()


def test_cli_mixing_history_and_machines_explains_it(tmp_path: Path, h200: dict[str, Any], h100_file: Path) -> None:
    later = copy.deepcopy(h200)
    later["run"]["id"] = "later"
    second = write(tmp_path / "later.json", sealed(later))
    site = tmp_path / "site"
    assert cli.main(["report", str(H200), str(h100_file), str(second), "-o", str(site)]) == ExitCode.OK
    html = (site / "machines.html").read_text()
    assert "also given, earlier: cudnn-benchmark.json" in html and "its history (the History page)" in html
    history = (site / "history.html").read_text()
    assert "resnet50/fp32/bs32" in history and "node-b" not in history  # one machine's history only


def test_two_cards_of_one_model_in_hosts_of_one_name_are_two_machines() -> None:
    a, b = (results.load(path) for path in H100_CARDS)
    assert analysis.machine_name(a) == analysis.machine_name(b) == "NVIDIA H100 80GB HBM3 on vm"
    machines = analysis.group_machines([a, b])
    assert [m.label for m in machines] == [
        "NVIDIA H100 80GB HBM3 on vm (GPU-36d3c1f6)",
        "NVIDIA H100 80GB HBM3 on vm (GPU-10b6cb9c)",
    ]
    for doc, machine in zip((a, b), machines, strict=True):  # one rule: a document's machine is its records'
        assert {analysis.machines.record_machine(r) for r in doc["cells"]} == {machine.key}
    moved = copy.deepcopy(a)
    moved["environment"]["hostname"] = "another-host"  # the card, whatever host it sits in
    assert [m.docs for m in analysis.group_machines([a, moved, b])] == [(0, 1), (2,)]


def test_each_card_is_its_own_history_series_and_the_report_compares_the_cards(tmp_path: Path, capsys) -> None:
    later = []
    for path in H100_CARDS:
        doc = copy.deepcopy(results.load(path))
        doc["run"]["id"], doc["environment"]["workdir_commit"] = "later", "f" * 40
        later.append(write(tmp_path / f"later-{path.name}", sealed(doc)))
    series = analysis.history([*H100_CARDS, *later])
    cell = "resnet50/fp32/bs32 @ NVIDIA H100 80GB HBM3 on vm"
    assert [len(series[f"{cell} ({uuid})"]) for uuid in ("GPU-36d3c1f6", "GPU-10b6cb9c")] == [2, 2]
    assert cli.main(["report", *map(str, H100_CARDS), str(later[0]), "-o", str(tmp_path / "site")]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "machines: NVIDIA H100 80GB HBM3 on vm (GPU-36d3c1f6) (2 files); NVIDIA H100 80GB HBM3 on vm " in out
    assert (tmp_path / "site" / "machines.html").exists() and (tmp_path / "site" / "history.html").exists()


def test_history_tells_a_file_without_a_uuid_from_a_card_of_its_name_by_the_file(tmp_path: Path) -> None:
    carded = copy.deepcopy(results.load(H200))  # H200 names no UUID: a file written before files named one
    carded["environment"]["gpu"]["uuid"] = "GPU-e290ae9c-3508-fae9-cab0-5451c1aad523"
    paths = [H200]
    for name, doc in (("later.json", copy.deepcopy(results.load(H200))), ("carded.json", carded)):
        paths.append(write(tmp_path / name, sealed(doc)))
    later_carded = copy.deepcopy(carded)
    later_carded["run"]["id"] = "later"
    paths.append(write(tmp_path / "later-carded.json", sealed(later_carded)))
    series = analysis.history(paths)
    cell = "resnet50/fp32/bs32 @ NVIDIA H200 on vm"
    assert len(series[f"{cell} (later.json)"]) == 2 and len(series[f"{cell} (GPU-e290ae9c)"]) == 2


def test_cli_corrupt_file_among_machines_is_one_line(tmp_path: Path, h100_file: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ampsuite-results", "version": 1, "cells": [')
    assert cli.main(["report", str(H200), str(h100_file), str(bad), "-o", str(tmp_path / "site")]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"ampsuite: error: {bad}: corrupt results file") and err.count("\n") == 1


def _asv_file(commit: str, date_ms: int, machine: str, seconds_per_sample: list[float]) -> dict[str, Any]:
    params = [["'toy'"], ["'fp32'", "'amp'"], ["32"]]
    row = [seconds_per_sample, params, "v1", 0, 1.0]
    return asv_result_file(commit, date_ms, machine, {"benchmarks.CellFigures.track_seconds_per_sample": row})


def test_asv_results_of_two_machines_stay_two_series(tmp_path: Path, capsys) -> None:
    root = tmp_path / "results"
    for machine, scale in (("h200-box", 1.0), ("a100-box", 2.0)):
        for n, commit in enumerate(("1" * 40, "2" * 40)):
            data = _asv_file(commit, 1_700_000_000_000 + n, machine, [0.001 * scale, 0.0005 * scale])
            path = root / machine / f"{commit[:8]}-ampsuite-venv-py3.11.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data), encoding="utf-8")
    history = analysis.history(root)
    assert sorted(history) == [
        "toy/amp/bs32 @ a100-box",
        "toy/amp/bs32 @ h200-box",
        "toy/fp32/bs32 @ a100-box",
        "toy/fp32/bs32 @ h200-box",
    ]
    assert [p.throughput for p in history["toy/fp32/bs32 @ a100-box"]] == pytest.approx([500.0, 500.0])
    assert [p.throughput for p in history["toy/fp32/bs32 @ h200-box"]] == pytest.approx([1000.0, 1000.0])
    toy = copy.deepcopy(json.loads(H200.read_text()))
    toy["cells"][0]["id"] = "toy/fp32/bs32"
    path = write(tmp_path / "toy.json", sealed(toy))
    site = tmp_path / "site"
    assert cli.main(["report", str(path), "--asv-results", str(root), "-o", str(site)]) == ExitCode.OK
    html = (site / "history.html").read_text()
    assert "toy/fp32/bs32 @ a100-box" in html and "toy/fp32/bs32 @ h200-box" in html
    assert html.count('class="history-cell"') == 2
