"""What "best" means (only trustworthy cells are crowned) and GEMM's dtype compared as precision."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from records import cell, doc

from ampsuite import analysis
from ampsuite.report import markdown_summary, render_site, write_csv

# ---------------------------------------------------------------------------
# best_per_workload: trustworthy only
# ---------------------------------------------------------------------------


def _scale_collapsed(record: dict[str, Any]) -> dict[str, Any]:
    record["numerics"] |= {"scale_collapsed_step": 3, "scale_at_collapse": 1e-30}
    return record


def test_a_tune_screen_is_never_crowned() -> None:
    # A report of a tune's results file holds the short screens beside the full records.
    screen = cell("amp", median=0.004)
    screen["id"] += "/screen"
    result = analysis.best_per_workload(doc(cell("fp32", median=0.04), cell("amp", median=0.005), screen))
    best = result["toy"]
    assert best.record is not None and best.record["id"] == "toy/amp/bs32"
    assert best.passed_over == [("toy/amp/bs32/screen", pytest.approx(8000), analysis.best.SCREEN)]


def test_a_faster_cell_with_a_bad_figure_is_never_crowned_and_says_why() -> None:
    result = analysis.best_per_workload(
        doc(
            cell("fp32", median=0.04),
            cell("tf32", median=0.02),
            cell("amp", median=0.005, nonfinite="loss", loss=None),  # fastest, loss went non-finite
            cell("amp-fp16", median=0.008, noise=0.05),  # second, noise 5% over the 1% target
        )
    )
    best = result["toy"]
    assert best.record is not None and best.record["id"] == "toy/tf32/bs32"
    assert [(cell_id, round(value)) for cell_id, value, _ in best.passed_over] == [
        ("toy/amp/bs32", 6400),
        ("toy/amp-fp16/bs32", 4000),
    ]
    reasons = [why for _, _, why in best.passed_over]
    assert reasons[0] == "loss went non-finite at step 1"
    assert reasons[1] == "noise 5.00% above target 1.00%"


def test_a_collapsed_loss_scale_or_drift_disqualifies() -> None:
    d = doc(
        cell("fp32", median=0.04),
        _scale_collapsed(cell("amp", median=0.01)),
        cell("amp-fp16", median=0.02, loss=1.5),  # 50% from FP32: drift
    )
    best = analysis.best_per_workload(d)["toy"]
    assert best.record is not None and best.record["id"] == "toy/fp32/bs32"
    assert [why for _, _, why in best.passed_over] == [
        "loss scale collapsed at step 3",
        "loss drifted from FP32 by 50.00%",
    ]
    amp = d["cells"][1]
    assert analysis.untrusted_reason(amp, d) == "loss scale collapsed at step 3"
    assert analysis.untrusted_reason(d["cells"][0], d) is None


def test_a_workload_without_a_trustworthy_cell_has_no_best_but_lists_why() -> None:
    d = doc(cell("amp", median=0.01, noise=0.2), cell("amp-fp16", status="oom"))
    best = analysis.best_per_workload(d)["toy"]
    assert best.record is None and best.derived is None
    assert best.passed_over == [("toy/amp/bs32", pytest.approx(3200.0), "noise 20.00% above target 1.00%")]
    text = markdown_summary(d)
    assert "| toy | no trustworthy cell |" in text
    assert "- toy: toy/amp/bs32 (3,200/s): noise 20.00% above target 1.00%" in text


def test_the_overview_shows_passed_over_cells_with_their_reason(tmp_path: Path) -> None:
    d = doc(cell("fp32", median=0.04), cell("amp", median=0.005, nonfinite="loss", loss=None))
    html = render_site([d], tmp_path).read_text()
    row = re.search(r'<tr class="passed-over">(.*?)</tr>', html, re.DOTALL)
    assert row is not None
    assert "toy/amp/bs32</a> (6,400 samples/s: loss went non-finite at step 1)" in row.group(1)


# ---------------------------------------------------------------------------
# GEMM: dtype is the precision axis
# ---------------------------------------------------------------------------

# TFLOP/s of one 8192^3 product per dtype on an H200 (README); a product is 2 * 8192^3 FLOPs.
GEMM_TFLOPS = {("float32", "fp32"): 51.0, ("float32", "tf32"): 407.0, ("float16", "fp32"): 752.0}
GEMM_TFLOPS[("bfloat16", "fp32")] = 804.0
FLOPS = 2 * 8192**3


def gemm_cell(dtype: str, combination: str, *, declared: bool = True) -> dict[str, Any]:
    median = FLOPS / (GEMM_TFLOPS[(dtype, combination)] * 1e12)
    record = cell(combination, median=median, batch=1, workload="gemm-8192", flops_per_step=FLOPS)
    options = {"m": 8192, "n": 8192, "k": 8192, "batch": 1, "dtype": dtype}
    record["id"] = f"gemm-8192[dtype={dtype}]/{combination}/bs1"
    record["workload"] = {"id": "gemm-8192", "plugin": "gemm", "options": options, "axes": {"dtype": dtype}}
    record["workload"]["unit"] = "products"
    if declared:
        record["workload"]["precision_option"] = "dtype"
    return record


def gemm_doc(*, declared: bool = True) -> dict[str, Any]:
    return doc(*(gemm_cell(dtype, combo, declared=declared) for dtype, combo in GEMM_TFLOPS))


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "record-before-precision_option"])
def test_gemm_dtypes_are_compared_against_the_float32_cell(declared: bool) -> None:
    d = analysis.derive(gemm_doc(declared=declared))
    bf16 = d["gemm-8192[dtype=bfloat16]/fp32/bs1"]
    assert bf16.fp32_id == "gemm-8192[dtype=float32]/fp32/bs1"
    assert bf16.tf32_id == "gemm-8192[dtype=float32]/tf32/bs1"
    assert bf16.speedup_vs_fp32 == pytest.approx(804 / 51)
    assert bf16.speedup_vs_tf32 == pytest.approx(804 / 407)
    assert d["gemm-8192[dtype=float16]/fp32/bs1"].speedup_vs_fp32 == pytest.approx(752 / 51)
    assert d["gemm-8192[dtype=float32]/fp32/bs1"].speedup_vs_fp32 == pytest.approx(1.0)
    best = analysis.best_per_workload(gemm_doc(declared=declared))["gemm-8192"]
    assert best.record is not None and best.record["id"] == "gemm-8192[dtype=bfloat16]/fp32/bs1"
    assert best.derived is not None and best.derived.speedup_vs_fp32 == pytest.approx(15.76, abs=0.01)


def test_an_undeclared_option_still_splits_configurations() -> None:
    d = gemm_doc()
    for record in d["cells"]:
        record["workload"]["precision_option"] = None
        record["workload"]["plugin"] = "my-gemm"
    bf16 = analysis.derive(d)["gemm-8192[dtype=bfloat16]/fp32/bs1"]
    assert bf16.fp32_id == bf16.cell_id  # its own configuration: an option is not precision unless declared


def test_gemm_summaries_carry_the_speedups_under_unique_labels(tmp_path: Path) -> None:
    d = gemm_doc()
    text = markdown_summary(d)
    row = next(line for line in text.splitlines() if line.startswith("| gemm-8192 |"))
    assert "gemm-8192\\[dtype=bfloat16]/fp32/bs1" in row and "| 15.76\u00d7 | 1.98\u00d7 |" in row

    rows = list(csv.DictReader(write_csv(d, tmp_path / "r.csv").open(encoding="utf-8")))
    assert len({r["cell_id"] for r in rows}) == len(rows) == 4
    by_id = {r["cell_id"]: r for r in rows}
    assert float(by_id["gemm-8192[dtype=float16]/fp32/bs1"]["speedup_vs_fp32"]) == pytest.approx(752 / 51)

    render_site([d], tmp_path / "site")
    [page] = (tmp_path / "site").glob("workload-gemm-8192-*.html")
    html = page.read_text()
    assert html.count("<section") >= 1 and "precision option: dtype" in html
    # The grid's row labels (one row per combination and dtype) are unique and name the dtype.
    labels = re.findall(r'<th scope="row">(.*?)</th>', html)
    assert labels, "no grid row labels found"
    assert not [label for label, n in Counter(labels).items() if n > 1]
    assert any("dtype=bfloat16" in label for label in labels)
    assert "15.76\u00d7" in html and "1.98\u00d7" in html


def test_baseline_lines_name_what_each_baseline_ran_with() -> None:
    def rec(combination: str, techniques: list[str]) -> dict:
        return {
            "id": f"w/{combination}/bs8",
            "combination": combination,
            "techniques": [{"name": t} for t in techniques],
        }

    doc = {
        "run": {"suite": {"baseline": "fp32"}},
        "cells": [rec("fp32", ["cudnn-benchmark"]), rec("tf32", ["cudnn-benchmark", "tf32"]), rec("amp", ["amp-bf16"])],
    }
    assert analysis.baseline_lines(doc) == [
        "\u00d7FP32: against the fp32 cell, float32 with cudnn-benchmark.",
        "\u00d7TF32: against the tf32 cell, float32 with TF32 matmuls, cudnn-benchmark.",
    ]
    plain = {"run": {"suite": {"baseline": "fp32"}}, "cells": [rec("fp32", [])]}
    assert analysis.baseline_lines(plain) == ["\u00d7FP32: against the fp32 cell, float32 with PyTorch's defaults."]


# ---------------------------------------------------------------------------
# A headline never crowns a recipe slower than FP32
# ---------------------------------------------------------------------------


def _fp32_untrusted_and_faster() -> dict[str, Any]:
    # The FP32 cell is the fastest but too noisy to quote; the fastest trustworthy cell runs at 0.60x of it.
    return doc(cell("fp32", median=0.03, noise=0.05), cell("amp", median=0.05), cell("amp-fp16", median=0.08))


def test_a_best_slower_than_fp32_reads_no_recipe_beats_fp32(tmp_path: Path) -> None:
    d = _fp32_untrusted_and_faster()
    best = analysis.best_per_workload(d)["toy"]
    assert best.record is not None and best.record["id"] == "toy/amp/bs32"
    assert not best.beats_fp32 and best.headline == analysis.NO_GAIN == "no recipe beats FP32 on this machine"
    row = next(line for line in markdown_summary(d).splitlines() if line.startswith("| toy |"))
    assert "no recipe beats FP32 on this machine; fastest trustworthy: toy/amp/bs32" in row
    html = render_site([d], tmp_path).read_text()
    assert '<strong class="no-gain">no recipe beats FP32 on this machine</strong>; fastest trustworthy:' in html


def test_a_best_faster_than_fp32_is_the_headline() -> None:
    d = doc(cell("fp32", median=0.04), cell("amp", median=0.01))
    best = analysis.best_per_workload(d)["toy"]
    assert best.beats_fp32 and best.headline is None
    assert "no recipe beats" not in markdown_summary(d)


def test_tune_writes_no_recipe_slower_than_fp32() -> None:
    from ampsuite.tune import TuneSummary, Winner, WorkloadTune, recipe_toml, tune_markdown

    def summary(speedup: float) -> TuneSummary:
        winner = Winner("amp-fp16", ("amp-fp16",), 8, "bert-tiny/amp-fp16/bs8", 100.0, speedup_vs_fp32=speedup)
        return TuneSummary(workloads=(WorkloadTune("bert-tiny", "sequences", winner=winner),))

    slower = recipe_toml(summary(0.22))
    assert "tuned-bert-tiny =" not in slower
    assert "# bert-tiny: no recipe beats FP32 on this machine" in slower
    assert "No recipe beats FP32 on this machine" in tune_markdown(summary(0.22))
    assert 'tuned-bert-tiny = ["amp-fp16"]' in recipe_toml(summary(1.5))


# ---------------------------------------------------------------------------
# measure_again: an untrusted headline is measured again before anything is crowned
# ---------------------------------------------------------------------------


def test_a_noisy_fastest_cell_and_its_fp32_reference_are_measured_again() -> None:
    d = doc(
        cell("fp32", median=0.04),
        cell("tf32", median=0.02),
        cell("amp", median=0.01, noise=0.05),  # fastest, noise 5% over the 1% target
        cell("fp32", median=0.04, workload="other"),
        cell("amp", median=0.02, workload="other"),  # fastest and trusted: nothing to do
    )
    assert analysis.measure_again(d) == ["toy/fp32/bs32", "toy/amp/bs32"]


def test_a_fastest_cell_ruled_out_by_its_numerics_is_not_measured_again() -> None:
    d = doc(cell("fp32", median=0.04), cell("amp", median=0.01, noise=0.05, nonfinite="loss", loss=None))
    assert analysis.measure_again(d) == []


def test_an_unstable_spread_counts_as_untrusted_timing_too() -> None:
    unstable = ["unstable: interquartile range is 40% of the median"]  # the worker's words for a wide spread
    d = doc(cell("fp32", median=0.04), cell("amp", median=0.01, warnings=unstable))
    assert analysis.measure_again(d) == ["toy/fp32/bs32", "toy/amp/bs32"]


def test_an_untrusted_figure_says_when_the_gpu_waited() -> None:
    waiting, busy = cell("amp", median=0.01, noise=0.03), cell("amp-fp16", median=0.02, noise=0.03)
    waiting["metrics"]["utilization"] = {"source": "nvml-gpm", "sm_active": 0.68}
    busy["metrics"]["utilization"] = {"source": "nvml-gpm", "sm_active": 0.9}
    d = doc(cell("fp32", median=0.04), waiting, busy)
    notes = {r["id"]: analysis.derive(d)[r["id"]].trust_note for r in d["cells"]}
    assert notes["toy/amp/bs32"] == (
        "noise 3.00% above target 1.00%; SMs active 68% of the timed steps (NVML): "
        "the GPU waited on the host or a synchronisation"
    )
    assert notes["toy/amp-fp16/bs32"] == "noise 3.00% above target 1.00%"  # busy SMs: no cause is claimed
