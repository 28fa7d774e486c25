"""Statistics on known samples (checked by hand) and the stopping rule on a fake clock.

The fake clock advances only inside the fake step, by a scripted duration, so
every sample and every stopping decision is exact and independent of the
machine's load.
"""

from __future__ import annotations

import itertools
import math
import types
from collections.abc import Iterable
from typing import Any

import pytest
import torch

from ampsuite.run import measure
from ampsuite.run.measure import relative_noise, summarize, time_steps
from ampsuite.spec.suitespec import MeasureSpec

# Hand computation for [1, 2, 3, 4, 5] (inclusive quantiles, positions over n-1 = 4 gaps):
#   q1 = 2, median = 3, q3 = 4, iqr = 2; p10 at position 0.4 -> 1.4, p90 at 3.6 -> 4.6
#   noise = 1.2533 * (2 / 1.349) / sqrt(5) / 3 = 1.2533 * 1.48258 / 2.23607 / 3 = 0.276992
# For [4, 1, 3, 2] (sorted 1, 2, 3, 4; n-1 = 3 gaps):
#   q1 at 0.75 -> 1.75, median 2.5, q3 at 2.25 -> 3.25, iqr 1.5; p10 at 0.3 -> 1.3, p90 at 2.7 -> 3.7
#   noise = 1.2533 * (1.5 / 1.349) / sqrt(4) / 2.5 = 1.2533 * 1.11193 / 2 / 2.5 = 0.278718
SUMMARIES = [
    (
        [1.0, 2.0, 3.0, 4.0, 5.0],
        dict(n=5, median=3.0, mean=3.0, min=1.0, max=5.0, p10=1.4, p90=4.6, iqr=2.0, rel_iqr=2 / 3, noise=0.276992),
    ),
    (
        [4.0, 1.0, 3.0, 2.0],
        dict(n=4, median=2.5, mean=2.5, min=1.0, max=4.0, p10=1.3, p90=3.7, iqr=1.5, rel_iqr=0.6, noise=0.278718),
    ),
    (
        [0.25, 0.25, 0.25],
        dict(n=3, median=0.25, mean=0.25, min=0.25, max=0.25, p10=0.25, p90=0.25, iqr=0.0, rel_iqr=0.0, noise=0.0),
    ),
    (
        [7.0],
        dict(n=1, median=7.0, mean=7.0, min=7.0, max=7.0, p10=7.0, p90=7.0, iqr=0.0, rel_iqr=0.0, noise=math.inf),
    ),
]


@pytest.mark.parametrize(("samples", "expected"), SUMMARIES, ids=["1-to-5", "unsorted-4", "constant", "single"])
def test_summarize_known_samples(samples: list[float], expected: dict[str, float]) -> None:
    stats = summarize(samples)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=1e-5), key


def test_summarize_keeps_raw_samples_in_its_dict() -> None:
    samples = [3.0, 1.0, 2.0]
    d = summarize(samples)
    assert d["samples"] == [3.0, 1.0, 2.0]
    assert set(d) == {"samples", "n", "median", "mean", "min", "max", "p10", "p90", "p99", "iqr", "rel_iqr", "noise"}


def test_summarize_refuses_no_samples() -> None:
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


@pytest.mark.parametrize(
    ("samples", "noise"),
    [([], math.inf), ([1.0, 2.0], math.inf), ([0.0, 0.0, 0.0], math.inf), ([2.0, 2.0, 2.0, 2.0], 0.0)],
)
def test_relative_noise_edge_cases(samples: list[float], noise: float) -> None:
    assert relative_noise(samples) == noise


def test_relative_noise_shrinks_with_more_samples_of_the_same_spread() -> None:
    few = [1.0, 2.0, 3.0, 4.0, 5.0]
    many = few * 4
    # same quartiles (2 and 4 around 3), four times the samples: half the standard error
    assert relative_noise(many) == pytest.approx(relative_noise(few) * math.sqrt(5 / 20), rel=0.2)
    assert relative_noise(many) < relative_noise(few)


def test_relative_noise_is_scale_free() -> None:
    samples = [1.0, 1.5, 1.2, 1.1, 1.3]
    assert relative_noise([s * 1e-3 for s in samples]) == pytest.approx(relative_noise(samples))


# ---------------------------------------------------------------------------
# the stopping rule
# ---------------------------------------------------------------------------


class FakeStep:
    """A step whose k-th call takes durations[k] seconds of fake time."""

    def __init__(self, durations: Iterable[float]) -> None:
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = 0
        self.batches: list[Any] = []

    def clock(self) -> float:
        return self.now

    def data(self) -> Any:
        return ("batch", self.calls)

    def run(self, batch: Any) -> None:
        self.batches.append(batch)
        self.calls += 1
        self.now += next(self.durations)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def make(durations: Iterable[float]) -> FakeStep:
        step = FakeStep(durations)
        monkeypatch.setattr(measure, "time", types.SimpleNamespace(perf_counter=step.clock))
        return step

    return make


def spec(**kw: Any) -> MeasureSpec:
    base: dict[str, Any] = dict(warmup_steps=0, min_steps=5, max_steps=100, max_seconds=1e9, noise_target=0.01)
    return MeasureSpec(**{**base, **kw})


CPU = torch.device("cpu")
NOISY = (0.01, 0.03)  # alternating: IQR/median stays large, the noise target is never met


def test_stable_steps_stop_at_min_steps(fake) -> None:
    step = fake(itertools.repeat(0.01))
    samples = time_steps(step.run, step.data, CPU, spec(min_steps=5))
    assert len(samples) == 5
    assert relative_noise(samples) <= 0.01


def test_min_steps_are_honoured_even_when_the_noise_target_is_met_earlier(fake) -> None:
    step = fake(itertools.repeat(0.01))
    assert len(time_steps(step.run, step.data, CPU, spec(min_steps=9))) == 9


@pytest.mark.parametrize("max_steps", [20, 17, 5])
def test_noisy_steps_stop_exactly_at_max_steps(fake, max_steps: int) -> None:
    step = fake(itertools.cycle(NOISY))
    samples = time_steps(step.run, step.data, CPU, spec(min_steps=5, max_steps=max_steps, noise_target=1e-9))
    assert len(samples) == max_steps == step.calls


def test_noise_target_met_later_stops_before_the_step_budget(fake) -> None:
    durations = itertools.chain([0.01, 0.05, 0.01, 0.05, 0.01], itertools.repeat(0.02))
    step = fake(durations)
    s = spec(min_steps=5, max_steps=1000, noise_target=0.05)
    samples = time_steps(step.run, step.data, CPU, s)
    assert relative_noise(samples[:5]) > s.noise_target  # not after the first chunk
    assert 5 < len(samples) < s.max_steps
    assert relative_noise(samples) <= s.noise_target


def test_time_budget_stops_noisy_steps(fake) -> None:
    step = fake(itertools.cycle((0.1, 0.15)))
    s = spec(min_steps=3, max_steps=10_000, max_seconds=1.0, noise_target=1e-9)
    samples = time_steps(step.run, step.data, CPU, s)
    assert sum(samples) >= s.max_seconds
    assert sum(samples) < s.max_seconds + 2 * 0.15  # chunks are sized by the observed rate
    assert len(samples) < s.max_steps


def test_min_steps_are_honoured_when_the_time_budget_is_already_spent(fake) -> None:
    step = fake(itertools.repeat(1.0))
    s = spec(min_steps=7, max_seconds=0.5, noise_target=1e-9)
    assert len(time_steps(step.run, step.data, CPU, s)) == 7


def test_raw_samples_are_the_step_durations_in_order(fake) -> None:
    durations = [0.011, 0.012, 0.013, 0.014, 0.015, 0.016, 0.017]
    step = fake(itertools.chain(durations, itertools.repeat(0.01)))
    samples = time_steps(step.run, step.data, CPU, spec(min_steps=7, max_steps=7))
    assert samples == pytest.approx(durations)
    assert step.batches == [("batch", i) for i in range(7)]  # one fresh batch per step


def test_the_warm_up_runs_its_steps_then_goes_on_until_its_seconds_have_passed(fake) -> None:
    step = fake(itertools.repeat(0.01))
    assert measure.warm_up(step.run, step.data, CPU, spec(warmup_steps=3)) == 3 == step.calls
    step = fake(itertools.repeat(0.01))
    assert measure.warm_up(step.run, step.data, CPU, spec()) == 0 == step.calls
    step = fake(itertools.repeat(0.01))
    ran = measure.warm_up(step.run, step.data, CPU, spec(warmup_steps=3, warmup_seconds=1.5))
    assert ran == step.calls and 1.5 - 1e-9 <= step.now < 1.5 + 2 * 0.01  # chunks sized by the observed rate
    assert step.batches == [("batch", i) for i in range(ran)]  # one fresh batch per step, as timed steps have
    step = fake(itertools.repeat(0.01))
    assert measure.warm_up(step.run, step.data, CPU, spec(warmup_steps=0, warmup_seconds=0.1)) == step.calls >= 10


def test_a_warm_up_whose_first_steps_were_fast_grows_its_chunks_no_more_than_doubling(fake) -> None:
    # Five steps a hundred times faster than the rest (a cache, a cold start's clocks): sized by their rate alone,
    # the next chunk would take 100x the time left.
    step = fake(itertools.chain(itertools.repeat(0.0001, 5), itertools.repeat(0.01)))
    measure.warm_up(step.run, step.data, CPU, spec(warmup_steps=5, warmup_seconds=1.5))
    assert 1.5 <= step.now < 3.0


def test_ranks_warm_up_in_chunks_that_rank_0s_clock_sizes(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    from ampsuite.run import rank

    step = fake(itertools.repeat(0.01))
    monkeypatch.setattr(rank, "time", types.SimpleNamespace(perf_counter=step.clock))
    # Rank 0's clock has run twice as far as this rank's at every exchange: its 1.0 s decides, not this rank's.
    monkeypatch.setattr(rank, "exchange", lambda elapsed: [2 * elapsed, elapsed])
    ran = rank.agreed_warm_up(step.run, step.data, CPU, spec(warmup_steps=5, warmup_seconds=1.0))
    assert ran == step.calls and 0.5 - 1e-9 <= step.now < 0.5 + 0.05


def test_a_warm_up_whose_steps_slow_down_still_stops_soon_after_its_seconds(fake) -> None:
    # A GPU at its power cap: steps take twice as long once the clocks fall, so a chunk sized at the first rate
    # overshoots by at most that chunk's second half.
    step = fake(itertools.chain(itertools.repeat(0.01, 5), itertools.repeat(0.02)))
    measure.warm_up(step.run, step.data, CPU, spec(warmup_steps=5, warmup_seconds=1.0))
    assert 1.0 <= step.now < 2.0


# ---------------------------------------------------------------------------
# several processes pooled, and the timing warnings
# ---------------------------------------------------------------------------

# Three processes whose medians differ by 10% of the pooled median (hand computation):
#   pooled, sorted: .98 .99 1.00 1.01 1.02 1.08 ... 1.12 1.18 ... 1.22 (15 samples, 14 gaps)
#   q1 at 3.5 -> 1.015, median 1.10, q3 at 10.5 -> 1.185, iqr 0.17, rel_iqr 0.1545
#   pooled noise  = 1.2533 * (0.17 / 1.349) / sqrt(15) / 1.1 = 0.037073
#   between noise = stdev(1.0, 1.1, 1.2) / sqrt(3) / 1.1 = 0.1 / 1.73205 / 1.1 = 0.052486
RUNS = [
    [0.98, 0.99, 1.00, 1.01, 1.02],
    [1.08, 1.09, 1.10, 1.11, 1.12],
    [1.18, 1.19, 1.20, 1.21, 1.22],
]


def test_between_process_noise_is_the_standard_error_of_the_medians() -> None:
    assert measure.between_process_noise([1.0, 1.1, 1.2], 1.1) == pytest.approx(0.052486, rel=1e-4)
    assert measure.between_process_noise([1.0, 1.1, 1.2], 1.1) == pytest.approx(0.1 / math.sqrt(3) / 1.1)
    assert measure.between_process_noise([1.0], 1.0) == 0.0
    assert measure.between_process_noise([1.0, 1.0], 0.0) == math.inf


def test_pool_takes_the_between_process_noise_when_the_medians_disagree() -> None:
    stats = measure.pool(RUNS)
    assert (stats["n"], stats["median"], stats["iqr"]) == (15, pytest.approx(1.10), pytest.approx(0.17))
    assert relative_noise([s for r in RUNS for s in r]) == pytest.approx(0.037073, rel=1e-4)
    assert stats["noise"] == pytest.approx(0.052486, rel=1e-4)


def test_pool_keeps_the_pooled_noise_when_the_medians_agree() -> None:
    runs = [[1.0, 2.0, 3.0, 4.0, 5.0]] * 3
    stats = measure.pool(runs)
    assert stats["noise"] == pytest.approx(relative_noise(runs[0] * 3)) != 0
    assert stats == summarize(runs[0] * 3)


@pytest.mark.parametrize(
    ("samples", "target", "expected"),
    [
        ([1.0, 1.0, 1.0], 0.01, []),
        (
            [s for r in RUNS for s in r],
            0.01,
            [
                "noise 3.71% above the target 1.00% after 15 steps: figure not trusted",
                "unstable: interquartile range is 15% of the median",
            ],
        ),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, ["unstable: interquartile range is 67% of the median"]),
        ([0.96, 0.96, 1.0, 1.04, 1.04], 1.0, []),  # an IQR of 8% of the median is below the threshold
    ],
)
def test_timing_warnings(samples: list[float], target: float, expected: list[str]) -> None:
    assert measure.timing_warnings(summarize(samples), target) == expected
