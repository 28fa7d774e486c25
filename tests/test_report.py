"""The static report: golden render of the checked-in fixture, escaping, links, charts, Markdown and CSV."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from markupsafe import escape

from ampsuite import ReportSection, analysis
from ampsuite.report import markdown_summary, render_site, write_csv
from ampsuite.report.fmt import num, ratio

FIXTURES = Path(__file__).parent / "fixtures"
EVIL = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
SVG_NS = "{http://www.w3.org/2000/svg}"
MARKS = ("rect", "path", "circle")


def esc(text: str) -> str:
    """How Jinja2's autoescape writes ``text`` into a page."""
    return str(escape(text))


def load(name: str) -> dict[str, Any]:
    with (FIXTURES / name).open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


@pytest.fixture(scope="module")
def docs() -> tuple[dict[str, Any], dict[str, Any]]:
    return load("results_a.json"), load("results_b.json")


SECTION = ReportSection(
    title=f"From a plugin {EVIL}",
    html="<p class='plugin-body'>clock log: <strong>steady</strong></p>",
    markdown="plugin says *steady*",
    anchor="clocks",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, docs: tuple[dict[str, Any], dict[str, Any]]) -> Path:
    a, b = docs
    out = tmp_path_factory.mktemp("site")
    index = render_site([b], out, compare_with=a, history=analysis.history([a, b]), extra_sections=[SECTION])
    assert index == out / "index.html"
    return out


def pages(site: Path) -> list[Path]:
    return sorted(site.glob("*.html"))


def test_fixtures_match_their_generator(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_results", FIXTURES / "make_results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write(tmp_path)
    for name in ("results_a.json", "results_b.json"):
        assert (tmp_path / name).read_text() == (FIXTURES / name).read_text(), f"regenerate {name}"


def test_fixture_covers_every_status_and_verdict(docs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    for d in docs:
        assert all(n > 0 for n in analysis.status_counts(d).values())
        verdicts = {x.numerics_verdict for x in analysis.derive(d).values()}
        assert verdicts == {"ok", "drift", "non-finite", "n/a"}
    assert any(EVIL in c["id"] for c in docs[0]["cells"])


def test_site_files(site: Path) -> None:
    names = {p.name for p in site.iterdir()}
    assert {"index.html", "history.html", "compare.html", "results.csv", "summary.md", "static"} <= names
    assert (site / "static" / "style.css").stat().st_size > 1000
    assert len([n for n in names if n.startswith("workload-")]) == 2


def test_index_shows_environment_best_and_every_status(site: Path, docs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    b = docs[1]
    html = (site / "index.html").read_text()
    env = b["environment"]
    for fact in (
        env["gpu"]["name"],
        env["driver"],
        env["cuda_driver"],
        env["torch_cuda"],
        env["torch"],
        "792.4 TFLOP/s",
    ):
        assert fact in html
    for status, count in analysis.status_counts(b).items():
        assert f'status-{status}">{status}</span> {count}' in html
    for best in analysis.best_per_workload(b).values():
        assert esc(best.record["combination"]) in html
        assert num(best.record["metrics"]["throughput"]) in html
        assert ratio(best.derived.speedup_vs_fp32) in html
        assert ratio(best.derived.speedup_vs_tf32) in html
    for record in b["cells"]:
        for warning in record["warnings"]:
            assert esc(warning) in html
    assert "&times;FP32" in html and "&times;TF32" in html and "against TF32" in html


def test_plugin_sections_come_after_the_builtin_ones(site: Path) -> None:
    html = (site / "index.html").read_text()
    assert "<p class='plugin-body'>clock log: <strong>steady</strong></p>" in html  # trusted markup, as given
    assert f"From a plugin {ESCAPED}" in html  # the title is text
    assert 'id="plugin-clocks"' in html
    assert html.index("plugin-clocks") > html.index("Warnings")


def test_workload_page_has_every_cell_with_figures_and_evidence(
    site: Path, docs: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    b = docs[1]
    derived = analysis.derive(b)
    text = "".join(p.read_text() for p in site.glob("workload-*.html"))
    for record in b["cells"]:
        assert esc(record["id"]) in text
        d = derived[record["id"]]
        if record["status"] == "passed":
            assert num(record["metrics"]["throughput"]) in text
            assert ratio(d.speedup_vs_fp32) in text
        evidence = record["evidence"] or {}
        for key in ("reason", "message", "traceback", "stderr_tail"):
            if key in evidence:
                assert esc(evidence[key]) in text
    assert text.count("<details") >= 4
    assert 'class="misaligned"' in text
    assert "verdict-drift" in text and "verdict-non-finite" in text


def test_a_stopped_workers_stacks_are_a_block_of_their_own_not_a_fact() -> None:
    from ampsuite.report.views import evidence_view

    stacks = 'Current thread 0x7f (most recent call first):\n  File "suite/run/worker.py", line 9 in run_cell'
    record = {
        "id": "w/c/bs1",
        "status": "interrupted",
        "evidence": {"reason": "interrupted while running", "stderr_tail": "compiling", "stacks": stacks},
    }
    view = evidence_view(record)  # type: ignore[arg-type]
    assert view is not None and view.summary == "interrupted while running"
    assert view.blocks == [("stacks", stacks), ("stderr tail", "compiling")]
    assert view.facts == []


def test_script_in_names_never_reaches_a_page_raw(site: Path) -> None:
    checked = 0
    for path in site.rglob("*"):
        if path.is_file() and path.suffix in (".html", ".md", ".css", ".svg"):
            text = path.read_text()
            assert EVIL not in text, path.name
            assert "<script" not in text.lower(), path.name
            checked += 1
    assert checked >= 6
    assert ESCAPED in (site / "index.html").read_text()


class Links(HTMLParser):
    """Collects href/src targets and element ids of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.targets.append(value)
            if name == "id" and value is not None:
                self.ids.add(value)


def parse(path: Path) -> Links:
    parser = Links()
    parser.feed(path.read_text())
    return parser


def check_links(site: Path) -> int:
    """Assert that every href/src of every page is relative and resolves (anchors included)."""
    parsed = {p.name: parse(p) for p in pages(site)}
    seen = 0
    for name, links in parsed.items():
        assert "index.html" in links.targets, f"{name} does not link back to the index"
        for target in links.targets:
            parts = urlsplit(target)
            assert not parts.scheme and not parts.netloc, f"{name}: non-relative link {target}"
            path = unquote(parts.path) or name
            assert not path.startswith("/"), f"{name}: absolute path {target}"
            assert (site / path).is_file(), f"{name}: broken link {target}"
            if parts.fragment and path.endswith(".html"):
                assert parts.fragment in parsed[path].ids, f"{name}: missing anchor {target}"
            seen += 1
    return seen


def test_every_internal_link_resolves_and_nothing_is_remote(site: Path) -> None:
    assert check_links(site) > 50


def test_two_runs_in_one_site_keep_their_cells_apart(
    tmp_path: Path, docs: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    render_site(list(docs), tmp_path)
    assert check_links(tmp_path) > 50
    page = next(tmp_path.glob("workload-cnn-*.html")).read_text()
    for index, d in enumerate(docs):
        assert esc(f"run {d['run']['id']}") in page
        cnn = [c for c in d["cells"] if c["workload"]["id"] == "cnn"]
        assert page.count(f'<tr id="cell-{index}-') == len(cnn)


def svgs(html: str) -> Iterator[ET.Element]:
    for match in re.finditer(r"<svg\b.*?</svg>", html, re.DOTALL):
        yield ET.fromstring(match.group(0))


def test_every_chart_has_marks_with_exact_value_tooltips(site: Path) -> None:
    charts = 0
    for path in pages(site):
        for svg in svgs(path.read_text()):
            charts += 1
            marks = [el for tag in MARKS for el in svg.iter(SVG_NS + tag)]
            assert marks, f"{path.name}: chart without marks"
            valued = 0
            for mark in marks:
                title = mark.find(SVG_NS + "title")
                assert title is not None and title.text, f"{path.name}: a {mark.tag} without a tooltip"
                valued += bool(re.search(r"\d", title.text))
            assert valued, f"{path.name}: no tooltip carries a value"
    assert charts >= 12


def test_chart_tooltips_carry_the_stored_values(site: Path, docs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    html = next(site.glob("workload-cnn-*.html")).read_text()
    record = next(c for c in docs[1]["cells"] if c["id"] == "cnn/amp-bf16/bs64")
    assert repr(record["metrics"]["throughput"]) in html
    assert repr(record["metrics"]["tflops"]) in html
    assert repr(docs[1]["environment"]["peaks"]["matmul_tflops"]["bfloat16"]) in html


def test_compare_page_marks_regressions_and_incomparable_cells(site: Path) -> None:
    html = (site / "compare.html").read_text()
    rows = re.findall(r'<tr class="verdict-row-([a-z-]+)">\s*<td>(?:<a href="[^"]*">)?<code>([^<]*)</code>', html)
    verdicts = dict((cell, v) for v, cell in rows)
    assert verdicts["cnn/amp-fp16/bs64"] == "regressed"
    assert verdicts["cnn/amp-bf16+channels-last/bs64"] == "improved"
    assert verdicts["cnn/tf32/bs256"] == "not-comparable"
    assert verdicts["cnn/amp-bf16/bs256"] == "missing"
    assert verdicts["cnn/fp32/bs64"] == "same"
    assert "matmul dtype differs" in html
    assert html.index("cnn/amp-fp16/bs64") < html.index("cnn/fp32/bs64")  # regressions first


def test_history_page_lists_each_cell(site: Path, docs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    html = (site / "history.html").read_text()
    assert "1111111111aa" in html and "5555555555dd" in html
    assert html.count('class="history-cell"') == len(analysis.history(list(docs)))


def test_pages_not_asked_for_are_not_written_or_linked(
    tmp_path: Path, docs: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    index = render_site(docs[0], tmp_path, title="Only A")
    assert not (tmp_path / "compare.html").exists() and not (tmp_path / "history.html").exists()
    html = index.read_text()
    assert "compare.html" not in html and "history.html" not in html
    assert "<title>Only A</title>" in html


def test_minimal_cpu_run_renders(tmp_path: Path) -> None:
    doc = {
        "format": "ampsuite-results",
        "version": 1,
        "run": {"id": "cpu-1", "started": "2025-01-01T00:00:00Z", "finished": None, "argv": [], "suite": {}},
        "environment": {"gpu": None, "peaks": None, "cpu": "x86"},
        "cells": [
            {
                "id": "toy/fp32/bs8",
                "status": "passed",
                "batch_size": 8,
                "combination": "fp32",
                "techniques": [],
                "workload": {"id": "toy", "unit": "samples"},
                "metrics": {"step_time": {"median": 0.001, "noise": 0.004}, "throughput": 8000.0},
            },
            {"id": "toy/amp/bs8", "status": "crashed", "evidence": None, "workload": {"id": "toy"}},
        ],
    }
    html = render_site([doc], tmp_path).read_text()
    assert "none (CPU run)" in html and "Not measured" in html
    page = next(tmp_path.glob("workload-toy-*.html")).read_text()
    assert "8,000" in page and "no evidence recorded" in page


def test_markdown_summary(docs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    a, b = docs
    text = markdown_summary([b], compare_with=a, extra_sections=[SECTION])
    assert text.startswith("## ampsuite results")
    assert EVIL not in text and "&lt;script&gt;" in text
    for best in analysis.best_per_workload(b).values():
        assert num(best.record["metrics"]["throughput"]) in text
        assert ratio(best.derived.speedup_vs_tf32) in text
    assert "| workload | best cell |" in text
    assert "1 regressed, 2 improved, 1 not comparable" in text
    assert "| cnn/amp-fp16/bs64 |" in text
    assert "1 oom" in text and "1 crashed" in text
    assert "plugin says *steady*" in text


def test_summary_md_in_site_matches_markdown_summary(site: Path, docs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    a, b = docs
    assert (site / "summary.md").read_text() == markdown_summary([b], compare_with=a, extra_sections=[SECTION])


def test_csv_has_one_row_per_cell_with_exact_figures(
    tmp_path: Path, docs: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    a, b = docs
    path = write_csv([a, b], tmp_path / "r.csv")
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(a["cells"]) + len(b["cells"])
    assert {r["status"] for r in rows} == set(analysis.STATUSES)
    derived = analysis.derive(b)
    row = next(r for r in rows if r["run_id"] == b["run"]["id"] and r["cell_id"] == "cnn/amp-bf16/bs64")
    record = next(c for c in b["cells"] if c["id"] == "cnn/amp-bf16/bs64")
    assert float(row["throughput"]) == record["metrics"]["throughput"]
    assert float(row["speedup_vs_fp32"]) == derived["cnn/amp-bf16/bs64"].speedup_vs_fp32
    assert row["numerics_verdict"] == "ok" and row["trusted"] == "true"
    failed = next(r for r in rows if r["status"] == "oom")
    assert failed["throughput"] == "" and "out of memory" in failed["evidence"]
    assert any(r["workload"] == f"tiny-bert{EVIL}" for r in rows)  # data stays data in the CSV


def test_csv_neutralises_spreadsheet_formulas(tmp_path: Path) -> None:
    doc = {
        "run": {"id": "=HYPERLINK(1)"},
        "environment": {},
        "cells": [{"id": "-2+3", "status": "skipped", "workload": {"id": "@SUM(A1)"}, "techniques": []}],
    }
    write_csv(doc, tmp_path / "f.csv")
    with (tmp_path / "f.csv").open(newline="") as fh:
        [row] = list(csv.DictReader(fh))
    assert row["run_id"] == "'=HYPERLINK(1)" and row["cell_id"] == "'-2+3" and row["workload"] == "'@SUM(A1)"


def test_history_follows_commit_order_when_dates_tie() -> None:
    from ampsuite.analysis import HistoryPoint
    from ampsuite.report.history import in_commit_order

    same = "2026-01-01T00:00:00+00:00"
    order = {"b" * 40: 0, "a" * 40: 1, "c" * 40: 2}  # b, then a, then c: hash order would say a, b, c
    points = [HistoryPoint("a" * 12, same, 1.0, None), HistoryPoint("c" * 12, same, 3.0, None)]
    points.append(HistoryPoint("b" * 12, same, 2.0, None))
    assert [p.label[0] for p in in_commit_order({"x": points}, order)["x"]] == ["b", "a", "c"]
    unknown = [*points, HistoryPoint("run-1", "2025-01-01T00:00:00+00:00", 0.5, None)]
    assert [p.label[0] for p in in_commit_order({"x": unknown}, order)["x"]] == ["r", "b", "a", "c"]


def test_compare_reaches_the_overview_with_a_chart_and_cells_measured_in_neither_run(tmp_path: Path) -> None:
    from ampsuite.report import render_site
    from ampsuite.report.compare import compare_context
    from ampsuite.report.views import load_runs

    a = json.loads((FIXTURES / "results_a.json").read_text(encoding="utf-8"))
    b = json.loads((FIXTURES / "results_b.json").read_text(encoding="utf-8"))
    render_site([b], tmp_path, compare_with=a)
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert 'id="compare-summary"' in index and 'href="compare.html"' in index
    (section,) = compare_context(load_runs([b]), a)["sections"]
    regressed = dict(section["counts"])["regressed"]
    assert regressed >= 1 and f"regressed</span> {regressed}" in index
    assert '<svg class="chart"' in (tmp_path / "compare.html").read_text(encoding="utf-8")
    # A cell that ran in neither run (skipped twice) was not compared: never "same".
    (same_run,) = compare_context(load_runs([a]), a)["sections"]
    verdicts = {r["cell"]: r["verdict"] for r in same_run["rows"]}
    for record in a["cells"]:
        expected = "same" if record["status"] == "passed" else "not measured"
        assert verdicts[record["id"]] == expected, record["id"]
