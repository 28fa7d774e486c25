"""Data-parallel cells in the report: scaling efficiency and per-GPU throughput in HTML, Markdown and CSV."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from ampsuite import analysis
from ampsuite.report import markdown_summary, render_site, write_csv

FIXTURES = Path(__file__).parent / "fixtures"
SINGLE, DOUBLE = "toy/fp32/bs8", "toy/fp32/x2/bs8"
TITLE = f"total throughput / (2 \u00d7 throughput of {SINGLE})"


def _record(cid: str, world: int, throughput: float, *, combination: str = "fp32") -> dict[str, Any]:
    """A passed CUDA record of the toy workload; a data-parallel one carries the metrics distributed.combine writes."""
    samples = 8 * world
    metrics: dict[str, Any] = {
        "step_time": {"median": samples / throughput, "noise": 0.002, "p10": 0.0079, "p90": 0.0083, "n": 50},
        "throughput": throughput,
        "samples_per_step": samples,
        "peak_memory_bytes": 1 << 30,
        "memory_kind": "cuda-reserved",
    }
    if world > 1:
        metrics.update(
            world_size=world,
            samples_per_step_per_gpu=8,
            throughput_per_gpu=throughput / world,
            slowest_rank=1,
        )
    return {
        "id": cid,
        "status": "passed",
        "device": "cuda",
        "batch_size": 8,
        "world_size": world,
        "combination": combination,
        "baseline": "fp32",
        "workload": {"id": "toy", "plugin": "toy", "options": {}, "unit": "samples"},
        "techniques": [] if combination == "fp32" else [{"name": combination, "options": {}}],
        "metrics": metrics,
        "numerics": {"losses": [2.0, 1.5], "loss_at_n": 1.5},
        "warnings": [],
    }


def _doc(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": "ampsuite-results",
        "version": 1,
        "run": {"id": "ddp-1", "started": "2025-01-01T00:00:00Z", "finished": None, "argv": [], "suite": {}},
        "environment": {"gpu": {"name": "NVIDIA H200", "count": 2}, "peaks": None, "cpu": "x86"},
        "cells": cells,
    }


@pytest.fixture
def ddp_doc() -> dict[str, Any]:
    # 1948 / (2 x 1000) = 0.974; the amp cell has no one-process cell.
    return _doc(
        [
            _record(SINGLE, 1, 1000.0),
            _record(DOUBLE, 2, 1948.0),
            _record("toy/amp/x2/bs8", 2, 3000.0, combination="amp"),
        ]
    )


@pytest.fixture
def plain_doc() -> dict[str, Any]:
    with (FIXTURES / "results_b.json").open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _row(html: str, cell_id: str) -> str:
    """The cell's rows in both "Every cell" tables (figures, then spread, memory and data parallelism)."""
    code = f"<code>{re.escape(cell_id)}</code>"
    pattern = rf'<tr[^>]* class="row-passed">\s*<td>(?:<a href="#[^"]+">)?{code}.*?</tr>'
    rows = re.findall(pattern, html, re.S)
    assert len(rows) == 2, (cell_id, rows)
    return "".join(rows)


def test_derived_figures_of_the_fixture_doc(ddp_doc: dict[str, Any]) -> None:
    derived = analysis.derive(ddp_doc)
    assert derived[DOUBLE].scaling_efficiency == pytest.approx(0.974)
    assert derived[DOUBLE].single_id == SINGLE
    assert analysis.data_parallel(ddp_doc)
    double = ddp_doc["cells"][1]
    assert analysis.throughput_per_gpu(double) == 974.0  # the record's own metrics.throughput_per_gpu
    double["metrics"]["throughput_per_gpu"] = 123.0
    assert analysis.throughput_per_gpu(double) == 123.0  # read, not recomputed
    assert analysis.throughput_per_gpu(ddp_doc["cells"][0]) == 1000.0  # one process: its throughput


def test_workload_page_shows_scaling_and_per_gpu_throughput(tmp_path: Path, ddp_doc: dict[str, Any]) -> None:
    render_site([ddp_doc], tmp_path)
    page = next(tmp_path.glob("workload-toy-*.html")).read_text()
    assert ">GPUs</th>" in page and ">per GPU</th>" in page and ">scaling</th>" in page
    row = _row(page, DOUBLE)
    assert f'<td class="num scaling" title="{escape(TITLE)}">97.4%</td>' in row
    assert '<td class="num">2</td><td class="num">974</td>' in row
    assert "1,948" in row  # the total stays in the throughput column
    single = _row(page, SINGLE)
    assert '<td class="num">1</td><td class="num">1,000</td>' in single
    assert 'title="one process: no scaling efficiency">\u2014</td>' in single
    lone = _row(page, "toy/amp/x2/bs8")
    assert 'title="no one-process cell of the same configuration in this run">\u2014</td>' in lone
    # the grid keeps the one- and two-GPU cells of one combination and batch size apart
    assert '<th scope="row">fp32</th>' in page and '<th scope="row">fp32 \u00b7 2 GPUs</th>' in page
    assert "974 per GPU &middot; 97.4% scaling" in page


def test_index_best_table_gets_a_scaling_column(tmp_path: Path, ddp_doc: dict[str, Any]) -> None:
    # The best toy cell is the two-GPU amp one, which has no one-process cell.
    ddp_doc["cells"][2]["status"] = "failed"
    html = render_site([ddp_doc], tmp_path).read_text()
    assert ">scaling</th>" in html
    assert f"{DOUBLE}</a>" in html  # the best row names the cell by its unique id
    assert f'<td class="num scaling" title="{escape(TITLE)}">97.4%</td>' in html


def test_markdown_has_a_scaling_column(ddp_doc: dict[str, Any]) -> None:
    ddp_doc["cells"][2]["status"] = "failed"
    text = markdown_summary(ddp_doc)
    assert "| memory saving | scaling | numerics |" in text
    assert "|---|---|---:|---:|---:|---:|---:|---:|---|" in text
    row = next(line for line in text.splitlines() if line.startswith("| toy |"))
    assert f"| {DOUBLE} |" in row and "1,948 samples/s" in row
    assert row.endswith("| 97.4% | ok |")
    assert "Scaling: total throughput" in text


def test_csv_has_world_size_and_scaling_efficiency(tmp_path: Path, ddp_doc: dict[str, Any]) -> None:
    path = write_csv(ddp_doc, tmp_path / "r.csv")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = {r["cell_id"]: r for r in reader}
    assert header.index("batch_size") + 1 == header.index("world_size")
    assert header.index("speedup_vs_baseline") + 1 == header.index("scaling_efficiency")
    assert rows[DOUBLE]["world_size"] == "2" and rows[DOUBLE]["nodes"] == "1"
    assert header.index("world_size") + 1 == header.index("nodes")
    assert float(rows[DOUBLE]["scaling_efficiency"]) == pytest.approx(0.974)
    assert float(rows[DOUBLE]["throughput"]) == 1948.0
    assert (rows[SINGLE]["world_size"], rows[SINGLE]["scaling_efficiency"]) == ("1", "")
    assert rows["toy/amp/x2/bs8"]["scaling_efficiency"] == ""


def test_a_run_without_data_parallel_cells_has_no_scaling_column(tmp_path: Path, plain_doc: dict[str, Any]) -> None:
    assert not analysis.data_parallel(plain_doc)
    index = render_site([plain_doc], tmp_path)
    for page in [index, *tmp_path.glob("workload-*.html")]:
        html = page.read_text()
        assert ">scaling</th>" not in html and ">per GPU</th>" not in html and ">GPUs</th>" not in html, page.name
        assert "GPUs</th>" not in html and 'class="num scaling"' not in html, page.name
    assert "scaling" not in markdown_summary(plain_doc)
    with write_csv(plain_doc, tmp_path / "r.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["world_size"] for r in rows} == {"1"} and {r["scaling_efficiency"] for r in rows} == {""}
