"""Quality suites without running one: the [quality] table, the verdict rule and its statistic, what the report's
best and tune's trust make of a verdict, the data sets' splits, and one seed's training loop."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from ampsuite import analysis
from ampsuite.analysis.quality import quality_lines, quality_summary, quality_verdicts, welch_greater
from ampsuite.contract.errors import SuiteFileError
from ampsuite.contract.wire import Document, check
from ampsuite.run.pool import pool_outcomes
from ampsuite.spec import suitefile
from ampsuite.spec.quality import QualitySpec

SUITE = """\
[workloads.lm]
workload = "llm"
batch_size = 8

[combinations]
fp32 = []
bf16 = ["amp-bf16"]
fp8 = ["amp-bf16", "fp8"]

[quality]
"""


# -- the [quality] table ----------------------------------------------------------------------------------------


def test_the_quality_table_loads_with_its_defaults_and_names_checked() -> None:
    spec = suitefile.loads(SUITE + 'steps = 300\nreferences = { fp8 = "bf16" }\ntargets = { lm = 2.0 }\n').quality
    assert spec == QualitySpec(steps=300, references={"fp8": "bf16"}, targets={"lm": 2.0})
    assert (spec.reference_of("fp8"), spec.reference_of("bf16")) == ("bf16", "fp32")
    assert spec.plan("lm") == {"steps": 300, "samples": 0, "eval_every": 50, "eval_batches": 4, "target": 2.0}
    assert suitefile.loads(SUITE.replace("[quality]\n", "")).quality is None


@pytest.mark.parametrize(
    ("body", "key", "message"),
    [
        ("", "quality.steps", "give the training budget as steps > 0 or as samples > 0"),
        ("steps = 10\nsamples = 100", "quality.steps", "(one of the two)"),
        ('steps = 10\nreference = "fp16"', "quality.reference", "'fp16' is not a combination"),
        ('steps = 10\nreferences = { fp8 = "bf61" }', "quality.references.fp8", "did you mean 'bf16'?"),
        ("steps = 10\ntargets = { llm = 2.0 }", "quality.targets.llm", "'llm' is not a workload id"),
        ("steps = 10\ntargets = { lm = nan }", "quality.targets.lm", "expected a finite number"),
        ("steps = 10\np_value = 0", "quality.p_value", "expected a number > 0"),
        ("steps = 10\nseed = 3", "quality.seed", "did you mean 'seeds'?"),
    ],
)
def test_a_bad_quality_table_is_refused_naming_the_key(body: str, key: str, message: str) -> None:
    with pytest.raises(SuiteFileError) as caught:
        suitefile.loads(SUITE + body + "\n")
    assert caught.value.key == key and message in str(caught.value)


def test_a_default_reference_that_is_no_combination_says_it_was_not_given() -> None:
    text = SUITE.replace("fp32 = []", "tf32 = []") + "\nsteps = 10\n"
    with pytest.raises(SuiteFileError) as caught:
        suitefile.loads(text)
    assert caught.value.key == "quality.reference"
    assert "not given, and its default 'fp32' is no combination: name one of tf32, bf16, fp8" in str(caught.value)


# -- the statistic -----------------------------------------------------------------------------------------------

# Welch's t-test, the first worked example of its Wikipedia article: t = -2.46, p = 0.021 (two-sided), df about 25.
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def test_the_one_sided_welch_test_gives_the_published_values() -> None:
    t, df, p = welch_greater(A2, A1)
    assert (round(t, 2), round(2 * p, 3)) == (2.46, 0.021)
    a, b = statistics.variance(A2) / len(A2), statistics.variance(A1) / len(A1)
    assert df == pytest.approx((a + b) ** 2 / (a**2 / (len(A2) - 1) + b**2 / (len(A1) - 1)))  # Welch-Satterthwaite
    assert round(df) == 25
    t, _, p = welch_greater(A1, A2)  # the other direction: A1 is not higher
    assert t == pytest.approx(-2.46, abs=0.005) and p == pytest.approx(1 - 0.021 / 2, abs=1e-3)


def test_without_spread_the_means_decide() -> None:
    assert welch_greater([2.0, 2.0], [1.0, 1.0])[::2] == (math.inf, 0.0)
    assert welch_greater([1.0, 1.0], [1.0, 1.0])[::2] == (0.0, 1.0)


# -- verdicts ----------------------------------------------------------------------------------------------------


def _run(seed: int, loss: float | None, *, diverged: int | None = None, ttt: float | None = 1.0) -> dict[str, Any]:
    return {
        "seed": seed,
        "steps": 100,
        "samples_per_step": 64,
        "curve": {"steps": [50, 100], "eval_loss": [3.0, loss], "train_loss": [3.1, 2.9], "seconds": [0.5, 1.0]},
        "final_eval_loss": loss,
        "final_eval_accuracy": None,
        "diverged_step": diverged,
        "target": 2.5,
        "time_to_target": ttt,
        "steps_to_target": None if ttt is None else 100,
        "train_seconds": 1.0,
        "eval_seconds": 0.1,
    }


def _record(combination: str, losses: list[float | None], throughput: float, **run: Any) -> dict[str, Any]:
    techniques = {"fp32": [], "bf16": ["amp-bf16"]}.get(combination, ["amp-bf16", combination])
    median = 64 / throughput
    return {
        "id": f"lm/{combination}/bs8",
        "status": "passed",
        "device": "cpu",
        "batch_size": 8,
        "combination": combination,
        "baseline": "fp32",
        "workload": {"id": "lm", "plugin": "llm", "options": {}, "axes": {}, "unit": "tokens"},
        "techniques": [{"name": t, "options": {}} for t in techniques],
        "started": "2026-01-01T00:00:00+00:00",
        "wall_seconds": 1.0,
        "metrics": {
            "step_time": {
                **dict.fromkeys(("median", "mean", "min", "max", "p10", "p90"), median),
                "samples": [median] * 20,
                "n": 20,
                "iqr": 0.0,
                "rel_iqr": 0.0,
                "noise": 0.001,
            },
            "throughput": throughput,
            "samples_per_step": 64,
        },
        "numerics": {"losses": [3.0, 2.9], "loss_at_n": 2.9, "final_loss": 2.8, "nonfinite_step": None},
        "diagnostics": {},
        "notes": {},
        "warnings": [],
        "evidence": None,
        "quality": {"runs": [_run(i, v, **run) for i, v in enumerate(losses)]},
    }


def _doc(*records: dict[str, Any], **rule: Any) -> dict[str, Any]:
    quality = {**QualitySpec(steps=100, targets={"lm": 2.5}).as_dict(), **rule}
    return {
        "format": "ampsuite-results",
        "version": 1,
        "run": {
            "id": "x",
            "started": "2026-01-01T00:00:00+00:00",
            "finished": None,
            "argv": [],
            "suite": {
                "name": "q",
                "path": None,
                "sha256": None,
                "baseline": "fp32",
                "device": "cpu",
                "numerics_tolerance": 0.05,
                "quality": quality,
            },
            "measure": {"noise_target": 0.01},
            "plugins": [],
        },
        "environment": {},
        "cells": list(records),
    }


FP32 = [2.40, 2.42, 2.44]


def test_each_verdict_with_the_numbers_behind_it() -> None:
    doc = _doc(
        _record("fp32", FP32, 100.0),
        _record("bf16", [2.41, 2.42, 2.44], 300.0),  # +0.14%: within the tolerance
        _record("fp16", [2.40, 2.45, 2.50], 290.0),  # +1.2%, but spread wide: not significant
        _record("nomaster", [2.50, 2.51, 2.52], 280.0),  # +3.7%, tight: worse
        _record("nan", [2.4, None, 2.4], 400.0, diverged=60),
    )
    check(doc, Document)  # the record shape is the results file's
    verdicts = quality_verdicts(doc)
    assert {k: v.verdict for k, v in verdicts.items()} == {
        "lm/fp32/bs8": "reference",
        "lm/bf16/bs8": "same quality",
        "lm/fp16/bs8": "same quality",
        "lm/nomaster/bs8": "worse",
        "lm/nan/bs8": "diverged",
    }
    bf16, fp16, worse = verdicts["lm/bf16/bs8"], verdicts["lm/fp16/bs8"], verdicts["lm/nomaster/bs8"]
    assert bf16.t is None and bf16.rel_diff == pytest.approx((2.41 + 2.42 + 2.44) / 3 / 2.42 - 1)
    assert fp16.p is not None and fp16.p >= 0.05 and "not significant" in fp16.reason
    assert worse.p is not None and worse.p < 0.05 and worse.reference == "lm/fp32/bs8"
    assert worse.t == pytest.approx(welch_greater([2.50, 2.51, 2.52], FP32)[0])
    assert verdicts["lm/nan/bs8"].reason == "a seed's loss went non-finite at step 60"
    assert verdicts["lm/fp32/bs8"].time_to_target == 1.0 and verdicts["lm/fp32/bs8"].reached == 3


def test_a_combination_is_judged_against_its_own_reference() -> None:
    doc = _doc(
        _record("fp32", [1.99, 2.0, 2.01], 100.0),
        _record("bf16", FP32, 300.0),
        _record("fp8", [2.41, 2.43, 2.45], 400.0),
        references={"fp8": "bf16"},
    )
    verdicts = quality_verdicts(doc)
    assert verdicts["lm/fp8/bs8"].reference == "lm/bf16/bs8" and verdicts["lm/fp8/bs8"].verdict == "same quality"
    assert verdicts["lm/bf16/bs8"].verdict == "worse"  # 21% above FP32's


def test_a_lower_loss_is_said_to_be_lower_not_within_the_tolerance() -> None:
    verdicts = quality_verdicts(_doc(_record("fp32", FP32, 100.0), _record("bf16", [2.10, 2.12, 2.14], 300.0)))
    lower = verdicts["lm/bf16/bs8"]
    assert lower.verdict == "same quality" and lower.t is None
    assert lower.reason == f"lower than the reference ({lower.rel_diff:+.2%})" and lower.rel_diff < -0.12


def test_without_a_reference_or_a_spread() -> None:
    alone = quality_verdicts(_doc(_record("bf16", FP32, 300.0)))["lm/bf16/bs8"]
    assert alone.verdict == "n/a" and alone.reason == "no fp32 cell with quality runs beside it"
    one_seed = quality_verdicts(_doc(_record("fp32", [2.4], 100.0), _record("bf16", [2.5], 300.0)))["lm/bf16/bs8"]
    assert one_seed.verdict == "worse" and "no spread to test" in one_seed.reason
    diverged_reference = _doc(_record("fp32", [None, 2.4], 100.0), _record("bf16", FP32, 300.0))
    assert quality_verdicts(diverged_reference)["lm/bf16/bs8"].verdict == "n/a"


def test_best_and_tune_pass_over_a_recipe_that_trains_worse() -> None:
    fast_but_worse = _record("nomaster", [2.50, 2.51, 2.52], 900.0)
    doc = _doc(_record("fp32", FP32, 100.0), _record("bf16", [2.41, 2.42, 2.44], 300.0), fast_but_worse)
    best = analysis.best_per_workload(doc)["lm"]
    assert best.record is not None and best.record["id"] == "lm/bf16/bs8"
    (passed_over,) = best.passed_over
    assert passed_over[0] == "lm/nomaster/bs8" and passed_over[2].startswith("trains worse than lm/fp32/bs8: +3.72%")
    from ampsuite.tune.trust import numerics_reason

    assert numerics_reason(fast_but_worse, doc) == passed_over[2]
    assert numerics_reason(doc["cells"][1], doc) is None

    lenient = _doc(*doc["cells"], require_same_quality=False)
    chosen = analysis.best_per_workload(lenient)["lm"].record
    assert chosen is not None and chosen["id"] == "lm/nomaster/bs8"


def test_the_verdicts_in_the_results_file_and_the_terminal() -> None:
    doc = _doc(_record("fp32", FP32, 100.0), _record("nomaster", [2.50, 2.51, 2.52], 280.0))
    summary = quality_summary(doc)
    assert summary is not None and "one-sided Welch t-test at p = 0.05" in summary["rule"]
    doc["run"]["quality"] = summary
    check(doc, Document)
    assert [v["verdict"] for v in summary["verdicts"]] == ["reference", "worse"]
    lines = quality_lines(doc)
    assert "lower than the reference's or at most 0.25% above it" in lines[0]
    assert lines[2].split()[:2] == ["lm/nomaster/bs8", "worse"] and "p = 0.0" in lines[2]
    assert "target 2.5 in 1.0 s (3/3 seeds)" in lines[1]
    assert quality_summary(_doc(_record("fp32", FP32, 1.0)) | {"run": {}}) is None


def test_processes_pool_their_seeds_quality_runs() -> None:
    outcomes = []
    for seed in range(3):
        record = _record("fp32", [2.4], 100.0)
        record["quality"]["runs"][0]["seed"] = seed
        outcomes.append({k: record[k] for k in ("status", "metrics", "warnings", "quality")})
    pooled = pool_outcomes(outcomes, 0.01)
    assert [r["seed"] for r in pooled["quality"]["runs"]] == [0, 1, 2]


# -- the data sets ---------------------------------------------------------------------------------------------


def test_the_text_corpus_splits_by_path_and_windows_its_tokens(tmp_path: Path) -> None:
    from ampsuite.plugins.workloads._text import TokenWindows, corpus_files, held_out_file, prepare_corpus

    root = tmp_path / "lib"
    for i in range(60):
        (root / f"pkg{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"pkg{i % 3}" / f"m{i}.py").write_text(f"x = {i}\n" * 20)
    (root / "site-packages").mkdir()
    (root / "site-packages" / "installed.py").write_text("not the standard library\n")
    files = corpus_files(root)
    assert len(files) == 60 and [r for r, _ in files] == sorted(r for r, _ in files)
    held = [r for r, _ in files if held_out_file(r)]
    assert held and len(held) < 30 and held_out_file(held[0])  # about 5%, by the name alone
    folder = prepare_corpus(tmp_path / "data", root)
    assert prepare_corpus(tmp_path / "data", root) == folder  # written once
    eval_bytes = b"".join(p.read_bytes() for r, p in files if held_out_file(r))
    assert (folder / "eval.bin").read_bytes() == eval_bytes
    windows = TokenWindows(folder, "eval", 16)
    tokens, following = windows[1]
    assert bytes(tokens.tolist()) == eval_bytes[16:32] and following.tolist() == list(eval_bytes[17:33])


def test_the_shuffled_data_set_is_an_order_per_seed_and_epoch() -> None:
    from ampsuite.plugins.workloads._data import Shuffled

    base = list(range(10))
    one, again, other = Shuffled(base, 1, epochs=3), Shuffled(base, 1, epochs=3), Shuffled(base, 2, epochs=3)
    first = [one[i] for i in range(30)]
    assert len(one) == 30 and first == [again[i] for i in range(30)] and first != [other[i] for i in range(30)]
    assert sorted(first[:10]) == base and first[:10] != first[10:20]


def test_half_weights_without_masters_needs_bfloat16() -> None:
    from ampsuite.plugins.techniques.half_weights import HalfWeightsOptions

    with pytest.raises(ValueError, match="master_weights = false needs dtype = 'bfloat16'"):
        HalfWeightsOptions(master_weights=False)
    assert not HalfWeightsOptions(dtype="bfloat16", master_weights=False).master_weights


# -- the H200 suite -------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_the_h200_quality_suite_fits_its_fifteen_minutes(registry: Any) -> None:
    """Its cells, and the decoder's training priced from the default CUDA suite's published step times (FP16 and
    FP8 as bf16's plus a third): under eight minutes, and under twelve with ~10 s a process of start, evaluation
    and timing (its header's figure), which leaves the digits' ~2 minutes within fifteen."""
    from ampsuite.spec import matrix

    spec = suitefile.load(ROOT / "tests" / "gpu" / "quality.toml")
    cells = matrix.expand(spec, registry, "cuda")
    assert [c.id for c in cells] == [
        *(f"llm-125m/{c}/bs8" for c in ("tf32", "bf16", "fp16", "fp8")),
        *(f"digits/{c}/bs128" for c in ("fp32", "tf32", "bf16", "fp16")),
    ]
    quality = spec.quality
    assert quality is not None and quality.reference_of("fp8") == "bf16" and quality.reference_of("fp16") == "tf32"
    published = _medians(ROOT / "reports" / "example" / "results.json")
    tf32, bf16 = published["llm-125m/tf32/bs8"], published["llm-125m/amp-bf16/bs8"]
    training = quality.steps * quality.seeds * (tf32 + bf16 + 2 * bf16 * 4 / 3)
    processes = len(cells) * quality.seeds
    assert training < 8 * 60 and training + processes * 10 < 12 * 60


def _medians(path: Path) -> dict[str, float]:
    from ampsuite import results

    return {
        r["id"]: r["metrics"]["step_time"]["median"] for r in results.load(path)["cells"] if r["status"] == "passed"
    }


@pytest.mark.slow  # scikit-learn's import alone takes a second or two
def test_a_loading_technique_feeds_the_real_data_in_the_workloads_own_order(
    registry: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The _data.py rule on real data: the same shuffled batches through the workload's loader and a technique's."""
    import torch

    from ampsuite.run.cell import build_step

    cell = {
        "workload": "resnet",
        "options": {"source": "digits", "depth": 18, "width": 4, "image_size": 8, "stem": "small", "classes": 10},
        "batch_size": 16,
        "techniques": [],
    }
    data_dir = str(tmp_path_factory.mktemp("data"))
    own = build_step(registry, cell, torch.device("cpu"), 3, data_dir)
    loaded = build_step(
        registry,
        {**cell, "techniques": [{"name": "pageable-loading", "options": {}}]},
        torch.device("cpu"),
        3,
        data_dir,
    )
    assert own.eval_data is not None and own.classifies and loaded.notes["loading"]["loader"] == "pageable"
    for _ in range(3):
        a, b = own.data(), loaded.data()
        assert torch.equal(a.inputs[0], b.inputs[0]) and torch.equal(a.target, b.target)
    (first,) = own.eval_data(1)
    assert torch.equal(first.target, own.eval_data(1)[0].target)  # the same held-out batches at every call


def test_the_held_out_loss_of_an_accumulating_cell_is_the_workloads_loss(registry: Any, tmp_path: Path) -> None:
    """grad-accumulation divides each micro-batch's loss for the update; the evaluation must not see that share."""
    import torch

    from ampsuite.run.cell import build_step
    from ampsuite.run.quality import evaluate

    cell = {"workload": "llm", "options": {"preset": "tiny", "data": "stdlib", "seq_len": 32}, "batch_size": 8}
    cpu = torch.device("cpu")
    plain = build_step(registry, {**cell, "techniques": []}, cpu, 0, str(tmp_path))
    accumulating = build_step(
        registry,
        {**cell, "techniques": [{"name": "grad-accumulation", "options": {"steps": 4}}]},
        cpu,
        0,
        str(tmp_path),
    )
    assert accumulating.notes["grad_accumulation"]["steps"] == 4
    assert evaluate(accumulating, 2)[0] == pytest.approx(evaluate(plain, 2)[0], rel=1e-6)
    assert accumulating.loss_fn is not None and accumulating.loss_fn.training  # training mode is given back
