"""The published runs rendered: each page tells the verdict's own evidence, marks untrusted figures,
names the software stack, and draws every chart series its own way."""

from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ampsuite import analysis
from ampsuite.report import charts, render_site
from ampsuite.report.provenance import cudnn_version
from ampsuite.report.views import workload_page_name

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "reports" / "example" / "results.json"
H100 = ROOT / "reports" / "h100" / "default-cuda.json"
QUALITY = ROOT / "reports" / "h100" / "quality.json"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def text(html: str) -> str:
    """The page's visible text, SVG left out, whitespace collapsed."""
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).replace("&#39;", "'").split())


def section(html: str, heading: str) -> str:
    start = html.index(f"<h3>{heading}</h3>")
    end = html.find("<h3>", start + 1)
    return html[start : end if end > 0 else len(html)]


def chart(html: str, title: str) -> str:
    """The figure whose title is ``title`` (caption and SVG)."""
    start = html.index(f"<strong>{title}</strong>")
    return html[start : html.index("</figure>", start)]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("example")
    render_site([load(EXAMPLE)], out, results_files=[EXAMPLE])
    return out


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("machines")
    render_site([load(EXAMPLE), load(H100)], out, results_files=[EXAMPLE, H100])
    return out


@pytest.fixture(scope="module")
def quality(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quality")
    render_site([load(QUALITY)], out, results_files=[QUALITY])
    return out


def page(site: Path, workload: str) -> str:
    return (site / workload_page_name(workload)).read_text(encoding="utf-8")


# 1. GEMM numerics: the output check decides, and nothing on the page contradicts it


def test_gemm_numerics_show_the_output_check_not_a_loss_difference(example: Path) -> None:
    html = page(example, "gemm-8192")
    numerics = text(section(html, "Numerics"))
    row = numerics[numerics.index("gemm-8192[dtype=bfloat16]/fp32/bs1") :][:260]
    # The check's own figures (rel_error 0.00166, tolerance 0.01) and the verdict named as the check's.
    assert "0.166% (tolerance 1%), bfloat16 against float64" in row
    assert "ok by its output check" in row
    assert "not compared: judged by its output check" in row
    # The loss difference (36.47%) that contradicted the verdict is gone from the table and the charts.
    assert "36.47%" not in html
    assert "Loss difference from FP32" not in html
    # Tiny errors keep their digits rather than read as zero.
    assert "0.000162% (tolerance 0.001%), float32 against float64" in numerics
    # The CSV agrees: no loss difference for a cell its output check judges, and none anywhere in the analysis.
    rows = {r["cell_id"]: r for r in csv.DictReader((example / "results.csv").open(encoding="utf-8"))}
    assert rows["gemm-8192[dtype=bfloat16]/fp32/bs1"]["loss_rel_diff"] == ""
    assert analysis.derive(load(EXAMPLE))["gemm-8192[dtype=bfloat16]/fp32/bs1"].loss_rel_diff is None
    assert rows["resnet50/amp-bf16/bs256"]["loss_rel_diff"] != ""


def test_the_numerics_table_says_how_many_steps_and_what_it_checks(example: Path) -> None:
    numerics = text(section(page(example, "resnet50"), "Numerics"))
    steps = load(EXAMPLE)["run"]["measure"]["numerics_steps"]
    assert f"loss after {steps} steps" in numerics and "loss after N steps" not in numerics
    assert f"over the first {steps} steps from the same weights and data" in numerics


def test_loss_chart_leaves_out_output_checked_cells_and_says_so(tmp_path: Path) -> None:
    doc = load(EXAMPLE)
    # A GEMM-like cell beside a loss-judged one in one group: the first is left out of the chart, with a note.
    resnet = [c for c in doc["cells"] if c["id"].startswith("resnet50/") and c["id"].endswith("/bs32")]
    fused = copy.deepcopy(next(c for c in resnet if "fused" in c["id"]))
    fused["numerics"]["output_check"] = {"rel_error": 0.5, "tolerance": 0.01}
    doc["cells"] = [c for c in doc["cells"] if c not in resnet] + [
        next(c for c in resnet if c["id"] == "resnet50/fp32/bs32"),
        fused,
    ]
    render_site([doc], tmp_path)
    html = page(tmp_path, "resnet50")
    assert "1 cell judged by its own output check (see the Numerics table) left out." in text(
        chart(html, "Loss difference from FP32")
    )
    assert "resnet50/bf16-cl-fused-graphs/bs32" not in chart(html, "Loss difference from FP32").split("</svg>")[0]
    assert "50% (tolerance 1%) drift by its output check" in text(section(html, "Numerics"))


# 2. Loss-scaled cells: compared after the same number of applied updates, and the page says which step


def test_loss_scaled_cells_name_the_fp32_step_they_were_compared_with(example: Path) -> None:
    html = page(example, "resnet50")
    numerics = text(section(html, "Numerics"))
    assert "same applied updates" in numerics
    row = numerics[numerics.index("resnet50/amp-fp16/bs256") :][:300]
    # Five steps, two updates skipped: FP32's loss at step 3 (two applied updates), 7.042, not its last.
    assert "0.12% against FP32's loss at step 3 of 5 (7.04): 2 applied updates each" in row
    assert "2 of this cell's skipped by its GradScaler" in row
    # A cell without a scaler compares at FP32's own last step: no note.
    bf16 = numerics[numerics.index("resnet50/amp-bf16/bs256") :][:120]
    assert "against FP32's loss at step" not in bf16
    caption = text(chart(html, "Loss difference from FP32"))
    assert "both after the same number of applied updates" in caption
    assert "after the numerics steps" not in html


# 3. Untrusted figures marked on machines.html, quality.html and machines.csv


def untrusted_ids(doc: dict[str, Any]) -> set[str]:
    derived = analysis.derive(doc)
    return {c["id"] for c in doc["cells"] if c["status"] == "passed" and not derived[c["id"]].trusted}


def test_machines_page_and_csv_mark_untrusted_figures(machines: Path) -> None:
    h100 = load(H100)
    untrusted = untrusted_ids(h100) | untrusted_ids(load(EXAMPLE))
    assert untrusted, "the published runs hold an untrusted cell"
    html = (machines / "machines.html").read_text(encoding="utf-8")
    rows = list(csv.DictReader((machines / "machines.csv").open(encoding="utf-8")))
    flagged = {(r["cell_id"], r["file"]) for r in rows if r["trusted"] == "false" and r["status"] == "passed"}
    assert flagged and {cell for cell, _ in flagged} <= untrusted
    for row in rows:
        if row["trusted"] == "false" and row["status"] == "passed":
            assert row["untrusted_reason"].startswith("noise ")
            assert f'<span class="badge untrusted" title="{row["untrusted_reason"]}">untrusted</span>' in html
    assert html.count('class="badge untrusted" title=') == len(flagged)
    # the charts too: each flagged bar says so beside its value and in its tooltip
    assert html.count("> untrusted</tspan>") == len(flagged)
    for cell, _ in flagged:
        assert re.search(rf"<title>{re.escape(cell)} \u00b7 [^<]* \(untrusted: noise ", html), cell


def test_quality_page_marks_untrusted_speed(quality: Path) -> None:
    doc = load(QUALITY)
    untrusted = untrusted_ids(doc)
    html = (quality / "quality.html").read_text(encoding="utf-8")
    assert untrusted
    for cell in untrusted:
        row = html[html.index(f'<tr><td><code title="{cell}">') :]
        row = row[: row.index("</tr>")]
        assert 'class="badge untrusted"' in row, cell
    assert html.count('class="badge untrusted"') == len(untrusted)


def test_quality_rows_are_named_by_recipe_within_their_section(quality: Path) -> None:
    """A section is one workload configuration: its rows read ``bf16``, the whole id in the tooltip, and the
    speedup-against-FP32 column shows only in sections where some row has that figure."""
    html = (quality / "quality.html").read_text(encoding="utf-8")
    llm = html[html.index("<code>llm-125m/bs8</code>") : html.index("<code>digits/bs128</code> <span")]
    assert '<code title="llm-125m/bf16/bs8">bf16</code>' in llm
    assert '<code title="llm-125m/tf32/bs8">tf32</code>' in llm
    assert "&times;FP32" not in llm
    digits = html[html.index("<code>digits/bs128</code> <span") :]
    assert "&times;FP32" in digits and '<code title="digits/fp32/bs128">fp32</code>' in digits


# 7. Provenance on every page


def test_every_page_names_gpu_driver_cuda_torch_and_cudnn(example: Path, quality: Path, machines: Path) -> None:
    line = "NVIDIA H200 · driver 580.159.04 · CUDA 13.0 (driver supports 13.0) · PyTorch 2.11.0+cu130 · cuDNN 9.19.0"
    for html_page in [*example.glob("*.html")]:
        assert f"Measured on {line}" in text(html_page.read_text(encoding="utf-8")), html_page.name
    assert "Measured on NVIDIA H100 80GB HBM3 · driver 580.159.04" in text(
        (quality / "quality.html").read_text(encoding="utf-8")
    )
    machines_html = text((machines / "machines.html").read_text(encoding="utf-8"))
    assert "NVIDIA driver CUDA (torch build) PyTorch cuDNN" in machines_html
    assert "580.159.04 13.0 (driver supports 13.0) 2.11.0+cu130 9.19.0" in machines_html


# 6. Wording: reference techniques, cuDNN version, readable technique notes


@pytest.mark.parametrize(("value", "shown"), [(91900, "9.19.0"), (90100, "9.1.0"), (8902, "8.9.2"), (None, "—")])
def test_cudnn_version_reads_as_cudnn_writes_it(value: int | None, shown: str) -> None:
    assert cudnn_version(value) == shown


def test_wording_names_the_fp32_techniques_and_notes_read_as_key_values(example: Path) -> None:
    html = page(example, "resnet50")
    assert "FP32 (no technique)" not in html
    assert "Median step time of FP32 (fp32: cudnn-benchmark) over the cell's" in text(
        chart(html, "Speedup against FP32")
    )
    notes = section(page(example, "gemm-8193"), "Technique notes")
    assert "&#34;" not in notes and "{" not in notes
    assert "<dt>cudnn_benchmark \u203a torch.backends.cudnn.benchmark</dt><dd>true</dd>" in notes
    assert "<th>cuDNN</th><td>9.19.0</td>" in (example / "index.html").read_text(encoding="utf-8")


# 4. Layout: the plugins table spans the page; the environment's rows keep their height


def test_plugins_table_is_full_width_and_columns_align_to_the_top(example: Path) -> None:
    html = (example / "index.html").read_text(encoding="utf-8")
    two_col = html[html.index('<div class="two-col">') : html.index("<h4>Plugins</h4>")]
    assert "plugins" not in two_col
    assert '<div class="table-wrap"><table class="compact plugins">' in html
    css = (example / "static" / "style.css").read_text(encoding="utf-8")
    assert re.search(r"\.two-col \{[^}]*align-items: start", css)


# 5. A chart's series each drawn their own way


def test_series_beyond_the_palette_get_their_own_pattern(example: Path, quality: Path) -> None:
    styles = [charts.series_style(k) for k in range(len(charts.PALETTE) * len(charts.DASHES))]
    assert len(set(styles)) == len(styles)
    throughput = chart(page(example, "resnet50"), "Throughput against batch size")
    paths = re.findall(r'<path d="M[^"]*" (stroke="[^"]+" stroke-width="3"(?: stroke-dasharray="[^"]+")?)>', throughput)
    assert len(paths) == 10 and len(set(paths)) == 10
    curves = (quality / "quality.html").read_text(encoding="utf-8")
    first = curves[curves.index('<figure class="chart-box">') : curves.index("</figure>")]
    keys = re.findall(r'<g class="legend"><path d="M[^"]*" (stroke="[^"]+" stroke-width="3"[^>]*)>', first)
    assert len(keys) >= 12 and len(set(keys)) == len(keys)


def test_a_peak_tick_just_past_a_bar_does_not_cross_its_value() -> None:
    """A cell just under its peak (a power-capped TF32 GEMM at 375.5 TFLOP/s against a 391.2 peak) has its tick just
    past the bar's end, where the value was printed: the value moves past the tick, clear of it by 7 px a character
    (DejaVu Sans digits at 11 px). A tick inside the bar leaves the value where it was."""

    def drawn(value: float, peak: float) -> tuple[float, float, int]:
        svg = charts.bar_chart([charts.Bar("gemm tf32", value, marker=peak)], title="t", unit="TFLOP/s")
        ((text_x, label),) = re.findall(r'<text x="([\d.]+)" y="[\d.]+" font-size="11"[^>]*>([^<]+)<', svg)
        (tick_x,) = re.findall(r'<path d="M([\d.]+),[^"]*" stroke="#111827" stroke-width="3"', svg)
        return float(text_x), float(tick_x), len(label)

    text_x, tick_x, chars = drawn(375.5, 391.2)
    assert not text_x - 1 <= tick_x <= text_x + 7 * chars and text_x > tick_x
    text_x, tick_x, _ = drawn(410.6, 387.4)
    assert tick_x < text_x - 6  # inside the bar; the value right after the bar's end


# 8. A tune file's screens: labelled apart from the full measurement of the same combination


@pytest.mark.parametrize("name", ["tune-resnet50", "tune-vit-b16", "tune-bert-base", "tune-llm"])
def test_no_two_cells_of_a_configuration_share_a_label(name: str) -> None:
    doc = load(ROOT / "reports" / "h200" / f"{name}.json")
    seen: dict[tuple[str, str, object], str] = {}
    for record in doc["cells"]:
        options = json.dumps(analysis.comparable_options(record), sort_keys=True)
        key = (options, analysis.cell_label(record), record.get("batch_size"))
        assert key not in seen, (record["id"], seen.get(key))
        seen[key] = record["id"]


def test_tune_screens_are_named_on_the_workload_page(tmp_path: Path) -> None:
    tune = ROOT / "reports" / "h200" / "tune-resnet50.json"
    doc = load(tune)
    render_site([doc], tmp_path, results_files=[tune])
    grid = section(page(tmp_path, "resnet50"), "Technique &times; batch size")
    full = "amp-fp16+torch-compile+fused-optimizer+channels-last+maxpool-offsets"
    measured = next(c for c in doc["cells"] if c["id"] == f"resnet50/{full}/bs256")
    figure = f"{analysis.throughput(measured):,.0f}"
    row = grid[grid.index(f'<th scope="row">{full}</th>') :]
    assert figure in row[: row.index("</tr>")]
    assert f'<th scope="row">{full} \u00b7 screen-3</th>' in grid
    assert "a tune screen: a short measurement that ranks candidates, not a figure to quote" in grid


# 9. What the best cell is, and which figures are untrusted, in the overview and in summary.md


def test_the_best_table_names_each_recipe_by_its_techniques(example: Path) -> None:
    index = (example / "index.html").read_text(encoding="utf-8")
    best = index[index.index("Best combination per workload") : index.index("Matrix by status")]
    assert "cudnn-benchmark + channels-last + amp-fp16 + fused-optimizer + torch-compile" in text(best)
    assert "first step 56.2 s" in text(best)
    summary = (example / "summary.md").read_text(encoding="utf-8")
    assert (
        "| resnet50/tuned/bs256 (cudnn-benchmark + channels-last + amp-fp16 + fused-optimizer + torch-compile) |"
        in (summary)
    )


def test_summary_md_marks_untrusted_figures(machines: Path) -> None:
    summary = (machines / "summary.md").read_text(encoding="utf-8")
    runs = [untrusted_ids(load(EXAMPLE)), untrusted_ids(load(H100))]
    untrusted = set().union(*runs)
    assert untrusted, "the published runs hold an untrusted cell"
    assert summary.count("**Figures not trusted:**") == sum(1 for ids in runs if ids)
    for cell in untrusted:
        assert f"{cell} (noise " in summary
    marked = [line for line in summary.splitlines() if "(untrusted) |" in line]
    assert len(marked) == len(untrusted) and all(line.split(" | ")[0].lstrip("| ") in untrusted for line in marked)


def test_the_machines_page_names_each_run_s_suite_file_and_code(machines: Path, tmp_path: Path) -> None:
    html = (machines / "machines.html").read_text(encoding="utf-8")
    for doc in (load(EXAMPLE), load(H100)):
        commit = doc["environment"]["ampsuite_commit"]
        code = commit.removesuffix("+dirty")[:8] + ("+dirty" if commit.endswith("+dirty") else "")
        assert f"suite file {doc['run']['suite']['sha256'][:8]} &middot; ampsuite {code}" in html
    assert "The machines ran different suite files" in html
    # one suite file on both: no such note
    same = load(H100)
    same["run"]["suite"]["sha256"] = load(EXAMPLE)["run"]["suite"]["sha256"]
    render_site([load(EXAMPLE), same], tmp_path, results_files=[EXAMPLE, H100])
    assert "The machines ran different suite files" not in (tmp_path / "machines.html").read_text(encoding="utf-8")


def test_cells_at_the_power_cap_are_marked_beside_their_figure(example: Path, machines: Path) -> None:
    # The published H200 run's `tuned` ResNet-50 cell reached the 700 W cap in its last samples only.
    capped = {c["id"] for c in load(EXAMPLE)["cells"] if analysis.power_cap_note(c)}
    assert "resnet50/tuned/bs256" in capped
    html = page(example, "resnet50")
    title = (
        "SM clock lowered with NVML&#39;s software power cap (sw_power_cap) as the reason: median 1,898 MHz, "
        "lowest 1,500 MHz, up to 679 W over the timed steps; trusted: the clocks probe counts a slowdown at the power "
        "cap as the speed the GPU sustains"
    )
    assert f'<span class="badge power-cap" title="{title}">power cap</span>' in html
    # On its workload page each capped cell is marked in the grid and in the table of cells; the overview marks
    # the three that are their workload's best.
    for workload in ("resnet50", "vit-b16", "llm-125m", "gemm-8192"):
        assert page(example, workload).count('class="badge power-cap"') == 2, workload
    assert (example / "index.html").read_text(encoding="utf-8").count('class="badge power-cap"') == 3
    machines_html = (machines / "machines.html").read_text(encoding="utf-8")
    h100 = {c["id"] for c in load(H100)["cells"] if analysis.power_cap_note(c)}
    assert machines_html.count('class="badge power-cap" title=') == len(capped) + len(h100)
    assert 'One marked <span class="badge power-cap">power cap</span> is trusted' in machines_html
