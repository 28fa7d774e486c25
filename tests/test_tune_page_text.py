"""The tune page's and tune.md's words, read from a published tune results file: the header's durations and
counts, whole ablation labels, an unstarted step's decision, and the machine the figures come from."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from ampsuite import results
from ampsuite.report import render_site
from ampsuite.report.provenance import provenance_line
from ampsuite.report.render import render_tune_page
from ampsuite.tune.outputs import tune_markdown

ROOT = Path(__file__).resolve().parent.parent
LLM = ROOT / "reports" / "h200" / "tune-llm.json"
RESNET = ROOT / "reports" / "h200" / "tune-resnet50.json"


def _page(out: Path, path: Path = LLM, summary: dict[str, Any] | None = None) -> str:
    """The page of the results file ``path`` (or of ``summary`` alone) written into ``out``."""
    page = render_tune_page(results.load(path) if summary is None else summary, out)
    return html.unescape(page.read_text("utf-8"))


def _text(page: str) -> str:
    """The page's visible text, one space between words."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_the_header_states_the_budget_in_minutes_not_scientific_notation(tmp_path: Path) -> None:
    page, md = _text(_page(tmp_path)), tune_markdown(results.load(LLM))
    assert "budget 19 min 0 s, used 18 min 1 s" in page
    assert "Budget 19 min 0 s, used 18 min 1 s;" in md
    assert not re.search(r"\de\+\d", page + md)


def test_a_file_resumed_across_runs_gives_the_last_runs_budget_as_the_last_runs(tmp_path: Path) -> None:
    """tune-resnet50.json holds 17 runs (16 resumes): the budget and time stated are the last run's, and say so."""
    doc = results.load(RESNET)
    assert len(doc["run"]["resumed"]) == 16
    page, md = _text(_page(tmp_path, RESNET)), tune_markdown(doc)
    assert "the last of 17 runs: budget 25 min 0 s, used 20 min 55 s" in page
    assert "The last of 17 runs: budget 25 min 0 s, used 20 min 55 s;" in md


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (
            LLM,
            "32 candidate cells in the results file: 32 measured in this run; "
            "besides them, 7 not started (budget spent)",
        ),
        (
            RESNET,
            "61 candidate cells in the results file: 7 measured in this run, 52 kept from an earlier run, "
            "2 pruned (skipped, never run); besides them, 5 not started (budget spent)",
        ),
    ],
)
def test_the_cell_counts_add_up(tmp_path: Path, path: Path, words: str) -> None:
    doc = results.load(path)
    assert words in _text(_page(tmp_path, path))
    assert words in tune_markdown(doc)
    numbers = [int(n.replace(",", "")) for n in re.findall(r"[\d,]+(?= (?:measured|kept|pruned))", words)]
    assert sum(numbers) == len(doc["cells"])  # the parts are the file's cells, no more, no fewer


def test_without_the_records_the_kept_and_the_pruned_are_one_count() -> None:
    md = tune_markdown(results.load(RESNET)["run"]["tune"])
    assert (
        "61 candidate cells in the results file: 7 measured in this run, 54 kept from an earlier run or pruned;" in md
    )


def test_ablation_labels_are_whole_in_the_chart_and_the_table(tmp_path: Path) -> None:
    page = _page(tmp_path)
    assert "\u2026" not in page
    svg = page[page.index("<svg") : page.index("</svg>")]
    # The chart wraps a long label onto lines of its own: each line a tspan, together the whole label.
    label = next(t for t in re.findall(r'<text text-anchor="end"[^>]*>(.*?)<title>', svg) if "amp-bf16" in t)
    assert " ".join(re.findall(r"<tspan[^>]*>(.*?)</tspan>", label)) == "without amp-bf16 (and fp8, which requires it)"
    assert '<th scope="row">without amp-bf16 (and fp8, which requires it)</th>' in page


def test_a_step_the_budget_left_unstarted_is_never_a_reference(tmp_path: Path) -> None:
    last = re.findall(r"<tr><td>batch</td>.*?</tr>", _page(tmp_path), re.S)[-1]
    cells = [c.strip() for c in re.findall(r"<td>(.*?)</td>", last, re.S)]
    assert cells[3] == "not started (budget)"
    assert cells[5] == (
        "not measured: the budget was spent; without an FP32 reference the winner was not tried at batch 16"
    )
    md_last = tune_markdown(results.load(LLM)).splitlines()[-1]
    assert md_last.startswith("| batch | fp32 | 16 | not started (budget) |  | not measured: the budget was spent")


def test_the_header_names_the_machine_the_results_file_describes(tmp_path: Path) -> None:
    doc = results.load(LLM)
    machine = (
        "NVIDIA H200 \u00b7 driver 580.159.04 \u00b7 CUDA 13.0 (driver supports 13.0) \u00b7 "
        "PyTorch 2.11.0+cu130 \u00b7 cuDNN 9.19.0"
    )
    assert provenance_line(doc) == machine  # the line every report page shows
    assert f"Measured on {machine}" in _text(_page(tmp_path))
    assert f"Device cuda, measured on {machine}." in tune_markdown(doc)


def test_the_page_of_a_summary_alone_reads_the_results_file_beside_it(tmp_path: Path) -> None:
    tune = results.load(LLM)["run"]["tune"]
    assert "H200" not in _text(_page(tmp_path / "bare", summary=tune))  # nothing there names the machine
    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "results.json").write_bytes(LLM.read_bytes())
    assert "Measured on NVIDIA H200 \u00b7 driver 580.159.04" in _text(_page(tmp_path / "beside", summary=tune))


def test_the_page_ampsuite_tune_writes_links_the_recipe_and_results_beside_it(tmp_path: Path) -> None:
    page = _page(tmp_path, RESNET)
    assert 'recipe: <a href="recipe.toml">recipe.toml</a>' in page
    assert 'results: <a href="results.json">results.json</a>' in page


def test_a_report_of_tune_files_gives_each_its_tune_page_in_the_site(tmp_path: Path) -> None:
    render_site([results.load(RESNET), results.load(LLM)], tmp_path, results_files=[RESNET, LLM])
    index = (tmp_path / "index.html").read_text("utf-8")
    assert 'href="tune.html">Tune: resnet50</a>' in index and 'href="tune-2.html">Tune: llm-900m</a>' in index
    first, second = (_text(html.unescape((tmp_path / p).read_text("utf-8"))) for p in ("tune.html", "tune-2.html"))
    assert "Winner: amp-fp16+torch-compile+fused-optimizer+channels-last at batch 256, 7,651 images/s" in first
    # A site holds no recipe.toml: each page links the run's own copy of its results file.
    assert "recipe.toml" not in first + second
    assert 'results: <a href="results-2.json">' in (tmp_path / "tune-2.html").read_text("utf-8")
    assert "The tune search for llm-900m: each workload's recipe" in second
    assert "<title>Tune: resnet50 · " in (tmp_path / "tune.html").read_text("utf-8")


def test_a_report_of_a_run_without_a_tune_search_has_no_tune_page(tmp_path: Path) -> None:
    render_site(results.load(ROOT / "reports" / "example" / "results.json"), tmp_path)
    assert not (tmp_path / "tune.html").exists()
    assert "tune.html" not in (tmp_path / "index.html").read_text("utf-8")


def test_the_winner_names_the_technique_options_it_ran_with(tmp_path: Path) -> None:
    # A reader compiling ResNet-50 with mode=default would not get the published 7,651 images/s.
    page = re.sub(r" ([:,.])", r"\1", _text(_page(tmp_path, RESNET)))  # a tag's end before punctuation
    assert (
        'With these technique options (the rest at their defaults): torch-compile: mode = "reduce-overhead", '
        "tile_reductions = true, pointwise_autotune = true." in page
    )
