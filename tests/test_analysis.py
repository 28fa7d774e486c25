"""Derived figures: speedups, memory saving, numerics verdicts, trust, compare rules, history."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from records import asv_result_file, cell, doc

from ampsuite import analysis

# ---------------------------------------------------------------------------
# derive
# ---------------------------------------------------------------------------


def test_speedups_are_median_ratios_within_one_configuration() -> None:
    d = analysis.derive(doc(cell("fp32", median=0.04), cell("tf32", median=0.02), cell("amp", median=0.01)))
    amp = d["toy/amp/bs32"]
    assert amp.speedup_vs_fp32 == pytest.approx(4.0)
    assert amp.speedup_vs_tf32 == pytest.approx(2.0)
    assert amp.speedup_vs_baseline == pytest.approx(2.0)
    assert (amp.fp32_id, amp.tf32_id, amp.baseline_id) == ("toy/fp32/bs32", "toy/tf32/bs32", "toy/tf32/bs32")
    assert d["toy/fp32/bs32"].speedup_vs_fp32 == pytest.approx(1.0)
    assert d["toy/fp32/bs32"].speedup_vs_tf32 == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("other", "why"),
    [
        ({"batch": 64}, "batch size"),
        ({"options": {"width": 16}}, "workload options"),
        ({"device": "cpu"}, "device"),
        ({"workload": "other"}, "workload id"),
    ],
)
def test_references_never_cross_configurations(other: dict[str, Any], why: str) -> None:
    d = analysis.derive(doc(cell("fp32", median=0.04), cell("tf32", median=0.02), cell("amp", median=0.01, **other)))
    amp = next(v for k, v in d.items() if "/amp/" in k)
    assert amp.speedup_vs_fp32 is None, why
    assert amp.speedup_vs_tf32 is None, why
    assert amp.fp32_id is None, why


@pytest.mark.parametrize("status", ["failed", "oom", "skipped", "timeout", "crashed", "interrupted"])
def test_no_ratio_against_or_for_a_cell_that_did_not_pass(status: str) -> None:
    d = analysis.derive(doc(cell("fp32", status=status), cell("amp", median=0.01), cell("tf32", status=status)))
    assert d["toy/amp/bs32"].speedup_vs_fp32 is None
    assert d["toy/amp/bs32"].memory_saving is None
    assert d["toy/fp32/bs32"].speedup_vs_fp32 is None
    assert d["toy/fp32/bs32"].numerics_verdict == "n/a"
    assert d["toy/fp32/bs32"].trusted is False


@pytest.mark.parametrize(
    ("fp32_memory", "memory", "kinds", "expected"),
    [
        (1000, 600, ("cuda-allocated", "cuda-allocated"), 0.4),
        (1000, 1200, ("cuda-allocated", "cuda-allocated"), -0.2),
        (1000, 600, ("cuda-allocated", "cpu-rss"), None),
        (None, 600, ("cuda-allocated", "cuda-allocated"), None),
    ],
)
def test_memory_saving(fp32_memory: int | None, memory: int, kinds: tuple[str, str], expected: float | None) -> None:
    d = analysis.derive(
        doc(cell("fp32", memory=fp32_memory, memory_kind=kinds[0]), cell("amp", memory=memory, memory_kind=kinds[1]))
    )
    got = d["toy/amp/bs32"].memory_saving
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("metrics", "peaks", "tflops", "mfu"),
    [
        ({"tflops": 100.0, "matmul_dtype": "bfloat16"}, {"bfloat16": 800.0}, 100.0, 0.125),
        ({"flops_per_step": 5e12, "matmul_dtype": "bfloat16"}, {"bfloat16": 1000.0}, 500.0, 0.5),
        ({"tflops": 100.0, "matmul_dtype": "float16"}, {"bfloat16": 800.0}, 100.0, None),
        ({"tflops": 100.0}, {"bfloat16": 800.0}, 100.0, None),
        ({"tflops": 100.0, "matmul_dtype": "bfloat16"}, None, 100.0, None),
        ({}, {"bfloat16": 800.0}, None, None),
    ],
)
def test_tflops_and_mfu(
    metrics: dict[str, Any], peaks: dict[str, float] | None, tflops: float | None, mfu: float | None
) -> None:
    record = cell("amp", median=0.01)
    record["metrics"] |= metrics
    d = analysis.derive(doc(record, peaks=peaks))["toy/amp/bs32"]
    assert d.tflops == (None if tflops is None else pytest.approx(tflops))
    assert d.mfu == (None if mfu is None else pytest.approx(mfu))


@pytest.mark.parametrize(
    ("case", "fp32", "amp", "tolerance", "verdict", "diff"),
    [
        ("within tolerance", {"loss": 1.0}, {"loss": 1.02}, None, "ok", 0.02),
        ("above default tolerance", {"loss": 1.0}, {"loss": 1.10}, None, "drift", 0.10),
        ("below the reference too", {"loss": 2.0}, {"loss": 1.8}, None, "drift", 0.10),
        ("suite tolerance", {"loss": 1.0}, {"loss": 1.10}, 0.2, "ok", 0.10),
        ("non-finite loss", {"loss": 1.0}, {"loss": None, "nonfinite": "loss"}, None, "non-finite", None),
        ("bad gradients, no scaler", {"loss": 1.0}, {"loss": 1.0, "nonfinite": "gradients"}, None, "non-finite", 0.0),
        (
            "bad gradients, scaler skips",
            {"loss": 1.0},
            {"loss": 1.01, "nonfinite": "gradients", "scaler": True},
            None,
            "ok",
            0.01,
        ),
        ("reference not finite", {"loss": None, "nonfinite": "loss"}, {"loss": 1.0}, None, "n/a", None),
        ("reference failed", {"status": "failed"}, {"loss": 1.0}, None, "n/a", None),
        ("cell failed", {"loss": 1.0}, {"status": "oom"}, None, "n/a", None),
    ],
)
def test_numerics_verdicts(
    case: str, fp32: dict[str, Any], amp: dict[str, Any], tolerance: float | None, verdict: str, diff: float | None
) -> None:
    d = analysis.derive(doc(cell("fp32", **fp32), cell("amp", **amp), tolerance=tolerance))["toy/amp/bs32"]
    assert d.numerics_verdict == verdict, case
    assert d.loss_rel_diff == (None if diff is None else pytest.approx(diff)), case


def test_verdict_without_fp32_cell_is_na() -> None:
    d = analysis.derive(doc(cell("tf32"), cell("amp", loss=5.0)))
    assert d["toy/amp/bs32"].numerics_verdict == "n/a"
    assert d["toy/amp/bs32"].loss_rel_diff is None


def test_fp32_reference_of_zero_loss() -> None:
    d = analysis.derive(doc(cell("fp32", loss=0.0), cell("amp", loss=0.0), cell("tf32", loss=0.1)))
    assert d["toy/amp/bs32"].numerics_verdict == "ok"
    assert d["toy/tf32/bs32"].loss_rel_diff == math.inf
    assert d["toy/tf32/bs32"].numerics_verdict == "drift"


@pytest.mark.parametrize(
    ("noise", "target", "warnings", "trusted"),
    [
        (0.005, None, [], True),
        (0.02, None, [], False),
        (0.02, 0.03, [], True),
        (0.005, None, ["unstable: relative noise 3% after max steps"], False),
        (0.005, None, ["GPU clocks throttled during the timed steps"], False),
        (0.005, None, ["channels-last had no effect: model has no convolutions"], True),
    ],
)
def test_trust(noise: float, target: float | None, warnings: list[str], trusted: bool) -> None:
    d = analysis.derive(doc(cell("amp", noise=noise, warnings=warnings), noise_target=target))["toy/amp/bs32"]
    assert d.trusted is trusted
    assert (d.trust_note is None) is trusted


def test_best_per_workload_takes_the_highest_passed_throughput() -> None:
    result = analysis.best_per_workload(
        doc(
            cell("fp32", median=0.04),
            cell("amp", median=0.01),
            cell("amp-fp16", median=0.01),  # a tie keeps the earlier cell
            cell("tf32", status="failed"),
            cell("fp32", median=0.05, workload="other"),
            cell("amp", status="oom", workload="third"),
        )
    )
    assert list(result) == ["toy", "other"]
    assert result["toy"].record["id"] == "toy/amp/bs32"
    assert result["toy"].derived.speedup_vs_fp32 == pytest.approx(4.0)


def test_status_counts_lists_every_status() -> None:
    counts = analysis.status_counts(doc(cell("fp32"), cell("amp", status="oom"), cell("tf32", status="oom")))
    assert list(counts)[: len(analysis.STATUSES)] == list(analysis.STATUSES)
    assert counts["passed"] == 1 and counts["oom"] == 2 and counts["skipped"] == 0


# ---------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "a", "b", "verdict"),
    [
        ("within noise", {"median": 1.0}, {"median": 1.005}, "same"),
        ("faster", {"median": 1.0}, {"median": 0.9}, "improved"),
        ("slower", {"median": 1.0}, {"median": 1.1}, "regressed"),
        ("noisy run widens the threshold", {"median": 1.0, "noise": 0.02}, {"median": 1.03}, "same"),
        ("IQRs overlap", {"median": 1.0, "iqr": 0.5}, {"median": 1.1, "iqr": 0.5}, "same"),
        ("passed then oom", {"median": 1.0}, {"status": "oom"}, "regressed"),
        ("failed then passed", {"status": "failed"}, {"median": 1.0}, "improved"),
        ("skipped in both", {"status": "skipped"}, {"status": "skipped"}, "same"),
        ("passed then interrupted", {"median": 1.0}, {"status": "interrupted"}, "not comparable"),
        ("batch size", {"median": 1.0}, {"median": 0.5, "batch": 64}, "not comparable"),
        ("options", {"median": 1.0}, {"median": 0.5, "options": {"width": 9}}, "not comparable"),
        (
            "matmul dtype",
            {"median": 1.0, "matmul_dtype": "tf32"},
            {"median": 0.5, "matmul_dtype": "bfloat16"},
            "not comparable",
        ),
    ],
)
def test_compare_rules(case: str, a: dict[str, Any], b: dict[str, Any], verdict: str) -> None:
    ca, cb = cell("amp", **a), cell("amp", **b)
    cb["id"] = ca["id"]  # same cell id, whatever the record says
    [result] = analysis.compare(doc(ca), doc(cb))
    assert result.verdict == verdict, (case, result.reason)
    assert result.reason


def test_compare_overlap_is_explained_and_change_reported() -> None:
    [result] = analysis.compare(doc(cell("amp", median=1.0, iqr=0.5)), doc(cell("amp", median=1.1, iqr=0.5)))
    assert result.change == pytest.approx(0.1)
    assert "overlap" in result.reason
    assert result.threshold == pytest.approx(analysis.MIN_RELATIVE_CHANGE)


def test_compare_uses_raw_samples_for_the_iqr_when_present() -> None:
    a, b = cell("amp", median=1.0, iqr=0.0), cell("amp", median=1.1, iqr=0.0)
    a["metrics"]["step_time"]["samples"] = [0.8, 0.9, 1.0, 1.1, 1.2]
    b["metrics"]["step_time"]["samples"] = [0.9, 1.0, 1.1, 1.2, 1.3]
    [result] = analysis.compare(doc(a), doc(b))
    assert result.verdict == "same"


def _on(record: dict[str, Any], host: str, uuid: str | None = None) -> dict[str, Any]:
    record["machine"] = {"host": host, "device": "NVIDIA H200", "gpu_uuid": uuid, "driver": None, "max_sm_mhz": None}
    return record


def test_compare_says_when_two_records_come_from_two_machines() -> None:
    [one] = analysis.compare(
        doc(_on(cell("amp", median=1.0), "a", "GPU-1")), doc(_on(cell("amp", median=0.9), "b", "GPU-1"))
    )
    assert one.beside is True and "two machines" not in one.reason  # one GPU, whatever the host is called
    [two] = analysis.compare(
        doc(_on(cell("amp", median=1.0), "a", "GPU-1")), doc(_on(cell("amp", median=0.9), "a", "GPU-2"))
    )
    assert two.beside is False and two.verdict == "improved" and two.reason.endswith("; measured on two machines")
    [old] = analysis.compare(doc(cell("amp", median=1.0)), doc(_on(cell("amp", median=0.9), "a")))
    assert old.beside is None  # an older record names no machine: nothing is said either way


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"host": "x", "gpu_uuid": "GPU-1"}, {"host": "y", "gpu_uuid": "GPU-1"}, True),
        ({"host": "x", "gpu_uuid": "GPU-1"}, {"host": "x", "gpu_uuid": "GPU-2"}, False),
        ({"host": "x", "device": "cpu", "gpu_uuid": None}, {"host": "x", "device": "cpu", "gpu_uuid": None}, True),
        ({"host": "x", "device": "cpu", "gpu_uuid": None}, {"host": "y", "device": "cpu", "gpu_uuid": None}, False),
        (None, None, False),
    ],
)
def test_beside_is_one_gpu_else_one_device_on_one_host(a: Any, b: Any, expected: bool) -> None:
    ra, rb = ({"machine": m} if m is not None else {} for m in (a, b))
    assert analysis.machines.beside(ra, rb) is expected


def test_compare_techniques_and_gpu_make_cells_incomparable() -> None:
    a, b = cell("amp", median=1.0), cell("amp-fp16", median=0.5)
    b["id"] = a["id"]
    [result] = analysis.compare(doc(a), doc(b))
    assert result.verdict == "not comparable" and "techniques" in result.reason
    [result] = analysis.compare(doc(cell("amp", median=1.0)), doc(cell("amp", median=0.5), gpu="NVIDIA A100"))
    assert result.verdict == "not comparable" and "GPU" in result.reason


def test_compare_reports_cells_missing_on_either_side() -> None:
    results = analysis.compare(doc(cell("fp32"), cell("tf32")), doc(cell("tf32"), cell("amp")))
    assert [(c.cell_id, c.verdict) for c in results] == [
        ("toy/tf32/bs32", "same"),
        ("toy/amp/bs32", "missing"),
        ("toy/fp32/bs32", "missing"),
    ]
    assert results[1].a is None and results[2].b is None


# ---------------------------------------------------------------------------
# history
# ---------------------------------------------------------------------------


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_history_from_two_results_files(tmp_path: Path) -> None:
    new = doc(
        cell("amp", median=0.01), cell("fp32", status="oom"), commit="b" * 40, started="2025-02-01T00:00:00+00:00"
    )
    old = doc(cell("amp", median=0.02), cell("fp32", median=0.04), commit="a" * 40, started="2025-01-01T00:00:00Z")
    paths = [_write(tmp_path / "new.json", new), _write(tmp_path / "old.json", old)]
    result = analysis.history(paths)
    assert list(result) == ["toy/amp/bs32", "toy/fp32/bs32"]
    amp = result["toy/amp/bs32"]
    assert [p.label for p in amp] == ["a" * 12, "b" * 12]
    assert [p.throughput for p in amp] == pytest.approx([1600.0, 3200.0])
    assert amp[0].noise == pytest.approx(0.002)
    assert [p.label for p in result["toy/fp32/bs32"]] == ["a" * 12]  # the oom cell has no point


def test_history_labels_runs_without_commit_by_run_id() -> None:
    d = doc(cell("amp"), run_id="run-7")
    d["environment"]["workdir_commit"] = None
    assert analysis.history(d)["toy/amp/bs32"][0].label == "run-7"


def _asv_file(
    commit: str, date_ms: int, machine: str, values: list[Any], noise: list[Any] | None = None
) -> dict[str, Any]:
    params = [["'toy/fp32/bs32'", "'toy/amp/bs32'"]]
    benchmarks: dict[str, Any] = {
        "benchmarks.track_seconds_per_sample": [values, params, "v1", date_ms, 1.0],
        "benchmarks.time_import": [[0.5], [], "v1"],
    }
    if noise is not None:
        benchmarks["benchmarks.track_noise"] = [noise, params, "v1"]
    return asv_result_file(commit, date_ms, machine, benchmarks)


def test_history_from_an_asv_results_directory(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _write(root / "benchmarks.json", {"version": 2})
    _write(root / "h200" / "machine.json", {"machine": "h200", "version": 1})
    _write(
        root / "h200" / "22222222-virtualenv-py3.11.json",
        _asv_file("2" * 40, 1_700_100_000_000, "h200", [0.0005, 0.00025], [0.004, 0.003]),
    )
    _write(
        root / "h200" / "11111111-virtualenv-py3.11.json", _asv_file("1" * 40, 1_700_000_000_000, "h200", [0.001, None])
    )
    result = analysis.history(root)
    assert list(result) == ["toy/amp/bs32", "toy/fp32/bs32"]
    fp32 = result["toy/fp32/bs32"]
    assert [p.label for p in fp32] == ["1" * 12, "2" * 12]
    assert [p.throughput for p in fp32] == pytest.approx([1000.0, 2000.0])
    assert [p.noise for p in fp32] == [None, pytest.approx(0.004)]
    assert fp32[0].date.startswith("2023-11-14")
    assert [p.throughput for p in result["toy/amp/bs32"]] == pytest.approx([4000.0])


def test_history_keeps_machines_apart(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "11111111-env.json", _asv_file("1" * 40, 1_700_000_000_000, "a100", [0.001, 0.001]))
    result = analysis.history([tmp_path, doc(cell("amp"))])
    assert "toy/amp/bs32 @ a100" in result
    assert "toy/amp/bs32 @ NVIDIA H200" in result


def test_history_rejects_other_asv_versions(tmp_path: Path) -> None:
    data = _asv_file("1" * 40, 1_700_000_000_000, "h200", [0.001, 0.001])
    data["version"] = 1
    _write(tmp_path / "m" / "11111111-env.json", data)
    with pytest.raises(ValueError, match="version"):
        analysis.history(tmp_path)


def test_history_rejects_unknown_files(tmp_path: Path) -> None:
    from ampsuite.contract.errors import ResultsFileError

    with pytest.raises(ResultsFileError, match=r"x\.json: neither an ampsuite results file nor an asv results file"):
        analysis.history(_write(tmp_path / "x.json", {"hello": 1}))


def test_history_takes_the_noise_of_asv_results_from_their_interval(tmp_path: Path) -> None:
    # The benchmarks hand asv samples; asv keeps a 99% interval of the median, which is the noise the page shows.
    params = [["'toy/fp32/bs32'", "'toy/amp/bs32'"]]
    row = [[0.001, 0.002], params, "v1", 1_700_000_000_000, 1.0, [0.00099, None], [0.00103, None]]
    path = _write(
        tmp_path / "r.json", asv_result_file("1" * 40, 1_700_000_000_000, "m", {"cells.track_seconds_per_sample": row})
    )
    result = analysis.history(path)
    (fp32,), (amp,) = result["toy/fp32/bs32"], result["toy/amp/bs32"]
    assert fp32.noise == pytest.approx(0.00004 / 2 / 2.5758 / 0.001) and amp.noise is None
