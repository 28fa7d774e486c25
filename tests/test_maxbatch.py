"""Max-batch search: doubling then bisection, every attempt a recorded cell, one summary per combination.

The search logic is checked against a simulated memory ceiling (no workers);
one real search on CPU runs the toy workload with a wide hidden layer under
``suite.memory_limit_gb``, so that the ceiling is the worker's address-space
limit and the out-of-memory attempts are real.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_MEASURE, toy_suite

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode
from ampsuite.run import maxbatch
from ampsuite.run.maxbatch import QUANTUM, RESOLUTION, SearchConfig, midpoint
from ampsuite.spec.matrix import expand
from ampsuite.spec.suitefile import loads

# ---------------------------------------------------------------------------
# the search logic, against a simulated ceiling
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ran", "failed", "expected"),
    [
        (64, 128, 96),  # a multiple of 8 halfway
        (96, 128, 112),
        (112, 128, 120),
        (112, 120, None),  # gap 8 <= max(8, 112 // 16 = 7)
        (4096, 8192, 6144),
        (6144, 6656, 6400),
        (6144, 6400, None),  # gap 256 <= 6144 // 16 = 384
        (1, 8, None),  # gap 7 <= 8
        (2, 16, 8),  # 9 rounded down to a multiple of 8
        (3, 5, None),
    ],
)
def test_midpoint_table(ran: int, failed: int, expected: int | None) -> None:
    assert midpoint(ran, failed) == expected


def test_midpoint_always_strictly_between_and_a_multiple_of_8_from_8_on() -> None:
    for ran in range(1, 300):
        for failed in range(ran + 1, 700):
            mid = midpoint(ran, failed)
            if failed - ran <= max(QUANTUM, ran // RESOLUTION):
                assert mid is None
            else:
                assert mid is not None
                assert ran < mid < failed
                assert mid < QUANTUM or mid % QUANTUM == 0


class FakeSearch:
    """Stands in for maxbatch._Search: attempts 'run' when their batch fits under a ceiling."""

    def __init__(self, registry: Any, ceiling: int, limit: int = 65536, fail_above: int | None = None) -> None:
        self.ceiling = ceiling
        self.fail_above = fail_above
        self.config = SearchConfig(output=Path("unused.json"), limit=limit)
        spec = loads(_suite(4.0), "fake.toml")
        self.plan = type("P", (), {"spec": spec, "registry": registry})()
        self.attempt_spec = spec
        self.tried: list[int] = []
        self.records: list[dict[str, Any]] = []
        self.writer = type("W", (), {"add": lambda _self, r: self.records.append(r)})()
        self.report = lambda record: None

    def run(self, cell: Any, spec: Any, *, report: bool = True) -> dict[str, Any]:
        bs = cell.batch_size
        if "search-bs" in cell.id:
            self.tried.append(bs)
        if self.fail_above is not None and bs > self.fail_above:
            status, evidence = "failed", {"type": "RuntimeError", "message": "CUDNN_STATUS_NOT_SUPPORTED"}
        elif bs > self.ceiling:
            status, evidence = "oom", {"type": "OutOfMemoryError", "message": "out of memory"}
        else:
            status, evidence = "passed", None
        metrics = {"throughput": 10.0 * bs} if status == "passed" else {}
        record = {
            "id": cell.id,
            "status": status,
            "batch_size": bs,
            "metrics": metrics,
            "warnings": [],
            "evidence": evidence,
        }
        self.records.append(record)
        return record


@pytest.fixture
def toy_cell(registry) -> Any:
    spec = loads(_suite(4.0), "fake.toml")
    (cell,) = expand(spec, registry, "cpu")
    return cell


def _search(fake: FakeSearch, cell: Any, start: int) -> dict[str, Any]:
    return maxbatch._search_one(fake, "toy/fp32", cell, start)  # type: ignore[arg-type]


def test_doubles_until_the_first_oom_then_bisects(registry, toy_cell) -> None:
    fake = FakeSearch(registry, ceiling=1000)
    summary = _search(fake, toy_cell, 64)
    assert fake.tried[:5] == [64, 128, 256, 512, 1024]
    facts = summary["metrics"]["max_batch"]
    assert facts["first_failure"] - facts["largest"] <= max(8, facts["largest"] // 16)
    assert facts["largest"] <= 1000 < facts["first_failure"]
    assert facts["largest"] % 8 == 0
    assert (summary["id"], summary["status"], summary["batch_size"]) == (
        "toy/fp32/max-batch",
        "passed",
        facts["largest"],
    )
    assert summary["warnings"] == []
    assert [a["batch_size"] for a in facts["attempts"]] == fake.tried


def test_a_start_that_does_not_fit_halves_down(registry, toy_cell) -> None:
    fake = FakeSearch(registry, ceiling=100)
    summary = _search(fake, toy_cell, 1024)
    assert fake.tried[:4] == [1024, 512, 256, 128]
    facts = summary["metrics"]["max_batch"]
    assert facts["largest"] <= 100 < facts["first_failure"] <= 128
    assert facts["first_failure"] - facts["largest"] <= 8


def test_the_limit_stops_the_doubling(registry, toy_cell) -> None:
    fake = FakeSearch(registry, ceiling=10**9, limit=300)
    summary = _search(fake, toy_cell, 64)
    assert fake.tried == [64, 128, 256, 300]
    facts = summary["metrics"]["max_batch"]
    assert (facts["largest"], facts["reached_limit"], facts["first_failure"]) == (300, True, None)


def test_nothing_fits_is_an_oom_summary_without_a_measurement(registry, toy_cell) -> None:
    fake = FakeSearch(registry, ceiling=0)
    summary = _search(fake, toy_cell, 4)
    assert fake.tried == [4, 2, 1]
    assert summary["status"] == "oom"
    assert summary["evidence"]["reason"].startswith("no batch size ran: toy/fp32/search-bs1 ended oom")
    assert summary["metrics"]["max_batch"]["largest"] is None


def test_a_failure_that_is_not_oom_bounds_the_search_with_a_warning(registry, toy_cell) -> None:
    fake = FakeSearch(registry, ceiling=10**9, fail_above=500)
    summary = _search(fake, toy_cell, 64)
    facts = summary["metrics"]["max_batch"]
    assert facts["largest"] <= 500 < facts["first_failure"]
    assert facts["bounded_by"]["status"] == "failed"
    assert any("not by memory" in w and "CUDNN_STATUS_NOT_SUPPORTED" in w for w in summary["warnings"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": 0}, "start must be an integer >= 1, got 0"),
        ({"limit": 0}, "limit must be an integer >= 1, got 0"),
        ({"start": 64, "limit": 32}, "start (64) must not exceed limit (32)"),
        ({"timeout": 0.0}, "timeout must be > 0, got 0.0"),
    ],
)
def test_search_config_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SearchConfig(output=Path("x.json"), **kwargs)


# ---------------------------------------------------------------------------
# the command, for real, on CPU
# ---------------------------------------------------------------------------


def _suite(memory_limit_gb: float, start: int = 8) -> str:
    """One wide toy layer, in FP32, its batch search starting at ``start``."""
    return toy_suite(
        "maxbatch",
        timeout=120,
        memory_limit_gb=memory_limit_gb,
        toy={"batch_size": start, "features": 1, "hidden": 4096, "layers": 1},
        measure={**FAST_MEASURE, "max_steps": 3, "numerics_steps": 1, "noise_target": 1.0},
    )


def test_refused_on_cpu_without_a_memory_limit(write_suite, tmp_path: Path, capsys) -> None:
    path = write_suite(_suite(0))
    out = tmp_path / "mb.json"
    assert cli.main(["max-batch", str(path), "-o", str(out)]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"ampsuite: error: {path}: max-batch on a CPU needs suite.memory_limit_gb")
    assert not out.exists()


def test_bad_start_is_a_one_line_usage_error(write_suite, capsys) -> None:
    path = write_suite(_suite(8))
    assert cli.main(["max-batch", str(path), "--start", "0"]) == ExitCode.USAGE_ERROR
    assert capsys.readouterr().err.strip() == "ampsuite: error: max-batch: start must be an integer >= 1, got 0"


@pytest.fixture(scope="module")
def cpu_search(tmp_path_factory, registry) -> tuple[int, str, dict[str, Any], Path]:
    """(exit code, stdout, results document, results path) of one real search on CPU."""
    root = tmp_path_factory.mktemp("maxbatch")
    # memory_limit_gb is room on top of what a worker maps after its imports: with 0.35 GiB the wide
    # layer's activations hit it at a few thousand samples.
    suite_path = root / "mb.toml"
    suite_path.write_text(_suite(0.35, start=256))
    out = root / "mb.json"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(["max-batch", str(suite_path), "-o", str(out), "--data-dir", str(root / "data")])
    return code, buffer.getvalue(), results.load(out), out


@pytest.mark.slow
def test_real_search_records_every_attempt_and_a_summary(cpu_search) -> None:
    code, stdout, doc, _ = cpu_search
    assert code == ExitCode.OK, stdout
    ids = [r["id"] for r in doc["cells"]]
    assert ids[-1] == "toy/fp32/max-batch"
    attempts = [r for r in doc["cells"] if "/search-bs" in r["id"]]
    assert len(attempts) == len(ids) - 1
    for r in attempts:
        assert r["id"] == f"toy/fp32/search-bs{r['batch_size']}"
        assert r["status"] in ("passed", "oom"), r["evidence"]
    assert doc["run"]["finished"] is not None
    assert doc["run"]["max_batch"]["attempt_measure"]["numerics_steps"] == 1


def test_real_search_doubles_then_bisects_to_the_resolution(cpu_search) -> None:
    _, _, doc, _ = cpu_search
    attempts = [(r["batch_size"], r["status"]) for r in doc["cells"] if "/search-bs" in r["id"]]
    first_oom = next(i for i, (_, status) in enumerate(attempts) if status == "oom")
    assert [bs for bs, _ in attempts[: first_oom + 1]] == [256 * 2**i for i in range(first_oom + 1)]
    passed = [bs for bs, status in attempts if status == "passed"]
    ooms = [bs for bs, status in attempts if status == "oom"]
    assert max(passed) < min(ooms)  # memory decides: every size that ran is below every size that did not
    summary = doc["cells"][-1]
    facts = summary["metrics"]["max_batch"]
    assert facts["largest"] == max(passed) == summary["batch_size"]
    assert facts["first_failure"] == min(ooms)
    assert min(ooms) - max(passed) <= max(8, max(passed) // 16)
    assert facts["bounded_by"]["status"] == "oom"
    assert "allocate" in facts["bounded_by"]["why"]


def test_real_search_summary_is_measured_at_the_maximum(cpu_search) -> None:
    _, stdout, doc, _ = cpu_search
    summary = doc["cells"][-1]
    assert summary["status"] == "passed", summary["evidence"]
    assert summary["metrics"]["throughput"] > 0
    assert summary["metrics"]["step_time"]["n"] == 3  # the suite's measure, not the attempts'
    largest = summary["metrics"]["max_batch"]["largest"]
    assert f"toy/fp32/max-batch: {largest} (" in stdout
    assert "toy/fp32/search-bs256: passed" in stdout


def test_search_results_show_like_any_results_file(cpu_search) -> None:
    assert cli.main(["show", str(cpu_search[3])]) == ExitCode.OK
