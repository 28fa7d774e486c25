"""ampsuite tune: the search end to end in real workers, the numerics guard, and the budget."""

from __future__ import annotations

import dataclasses
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import toy_suite
from records import write_sealed

from ampsuite import Technique, TrainStep, hookimpl, results
from ampsuite import tune as tune_module
from ampsuite.analysis.estimate import budget_text
from ampsuite.cli import main
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import ExitCode, SuiteFileError
from ampsuite.contract.wire import Status
from ampsuite.host import session
from ampsuite.host.manager import PluginSettings
from ampsuite.run import selfcheck
from ampsuite.spec.matrix import expand
from ampsuite.spec.screens import screen_id, screened_cell
from ampsuite.spec.suitefile import loads
from ampsuite.spec.suitespec import SuiteSpec
from ampsuite.tune import (
    Decision,
    Phase,
    RowKind,
    Step,
    TuneConfig,
    TuneSummary,
    Winner,
    WorkloadTune,
    recipe_toml,
    tune_summary,
    untrusted_reason,
)
from ampsuite.tune.space import Candidate, option_choices, workload_configs

TUNE_MEASURE = {
    "warmup_steps": 2,
    "min_steps": 10,
    "max_steps": 2000,
    "max_seconds": 0.4,
    "noise_target": 0.5,
    "numerics_steps": 3,
}
COMPILED = {"compiled": ["amp-bf16", "torch-compile"]}
COORDINATE_DESCENT = {"inductor": {"coordinate_descent_tuning": [True]}}
"""A [tune.torch-compile] table: one inductor setting for tune to try."""


def tune_suite(more: dict[str, list[str]] | None = None, **tables: Any) -> str:
    """The toy suite tune starts from: FP32, AMP-bf16 and AMP-bf16 with the fused optimizer, then the combinations
    ``more``; ``tables`` are more top-level tables (``tune``, ``techniques``, ``combination_options``)."""
    return toy_suite(
        "tune-toy",
        timeout=60,
        cpu_threads=1,
        toy={"batch_size": 64, "hidden": 128},
        combinations={
            "fp32": [],
            "amp-bf16": ["amp-bf16"],
            "bf16-fused": ["amp-bf16", "fused-optimizer"],
            **(more or {}),
        },
        measure=TUNE_MEASURE,
        tables=tables,
    )


CHEAT_PLUGIN = '''
"""A technique that makes every step nearly free and its loss NaN: fast, and never trustworthy."""
import torch
from ampsuite import Technique, hookimpl


def apply(step, options):
    def wrap(fn, step):
        def cheat(batch):
            return torch.tensor(float("nan"))
        return cheat
    step.wrappers.append(wrap)
    return step


@hookimpl
def ampsuite_techniques():
    return [Technique(name="cheat", summary="skips the step; the loss is NaN", apply=apply)]
'''


class NeedsCompile:
    """A technique that requires torch-compile, as a model rewrite made for the compiler does: the tune must wait
    for torch-compile to join a path before it tries it, and leave it out of the ablation row without compile."""

    @hookimpl
    def ampsuite_techniques(self) -> list[Technique]:
        def apply(step: TrainStep, options: object) -> TrainStep:
            return step

        return [
            Technique(
                name="needs-compile",
                summary="requires torch-compile",
                apply=apply,
                requires=frozenset({"torch-compile"}),
            )
        ]


NEEDS_COMPILE = [("needs-compile", NeedsCompile())]


def _tune_cli(tmp_path: Path, suite: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["tune", str(suite), "--budget", "60s", "--report-dir", str(out), *extra])
    return code, out


@pytest.mark.slow
def test_tune_end_to_end_on_cpu_within_60s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(tune_suite({"noop": ["noop"], "tf32": ["tf32"]}), encoding="utf-8")
    code, out = _tune_cli(tmp_path, suite)
    printed = capsys.readouterr().out
    assert code == 0, printed
    doc = results.load(out / "results.json")
    summary = TuneSummary.from_json(doc["run"]["tune"])
    assert summary.elapsed_seconds <= 60.0 + 6.0  # a capped cell may take its kill grace
    (toy,) = summary.workloads
    winner = toy.winner
    assert winner is not None and winner.throughput > 0
    # The FP32 cell is measured first, in full.
    assert doc["cells"][0]["id"] == "toy/fp32/bs64" and doc["cells"][0]["status"] == Status.PASSED
    # Every record is an ordinary cell record; amp-fp16 was tried although the suite does not declare it.
    assert any(r["combination"] == "amp-fp16" for r in doc["cells"])
    kinds = [row.kind for row in toy.ablation]
    assert kinds[:2] == [RowKind.FP32, RowKind.TF32] and RowKind.WINNER in kinds
    assert [row.label for row in toy.ablation][:3] == ["FP32", "TF32", "winner"]
    tf32 = toy.ablation[1]
    assert tf32.status == Status.SKIPPED and "CUDA" in tf32.note
    recipe = (out / "recipe.toml").read_text(encoding="utf-8")
    assert recipe in printed
    if not winner.beats_fp32:
        # A loaded machine can leave the FP32 cell untrusted and the fastest trustworthy recipe slower than it:
        # then there is no recipe to paste, and the file says so.
        assert "# toy: no recipe beats FP32 on this machine" in recipe and "tuned-toy" not in recipe
    else:
        combos = tomllib.loads(recipe)["combinations"]
        assert combos["tuned-toy"] == list(winner.techniques)
        # The snippet is a suite file's own syntax: it drops into a suite that loads.
        loads(tune_suite({"tuned-toy": combos["tuned-toy"]}))
    html = (out / "tune.html").read_text(encoding="utf-8")
    assert "<svg" in html and "Ablation" in html and (out / "tune.md").exists()
    # --resume measures nothing again.
    code, _ = _tune_cli(tmp_path, suite, "--resume")
    assert code == 0
    assert results.load(out / "results.json")["run"]["tune"]["started_cells"] == 0
    # The winner's fidelity check is built from its record: same workload options, techniques and their options.
    (check,) = selfcheck.tuned_checks(doc)
    record = next(r for r in doc["cells"] if r["id"] == winner.cell_id)
    assert check.batch_size == 64 and check.options == record["workload"]["options"]
    assert list(check.techniques) == [t["name"] for t in record["techniques"]]
    assert check.technique_options == {t["name"]: t["options"] for t in record["techniques"]}
    capsys.readouterr()
    main(["selfcheck", "--tuned", str(out / "results.json"), "--rounds", "1", "--min-ratio", "0"])
    assert f"tuned {winner.cell_id}: harness" in capsys.readouterr().out


@pytest.mark.slow
def test_a_faster_candidate_with_a_nonfinite_loss_is_never_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tune_cheat_plugin.py").write_text(CHEAT_PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = tmp_path / "suite.toml"
    suite.write_text(tune_suite({"bf16-cheat": ["amp-bf16", "cheat"], "cheat": ["cheat"]}), encoding="utf-8")
    code, out = _tune_cli(tmp_path, suite, "-p", "tune_cheat_plugin")
    assert code == 0, capsys.readouterr().out
    doc = results.load(out / "results.json")
    cheats = [r for r in doc["cells"] if "cheat" in [t["name"] for t in r["techniques"]] and r["status"] == "passed"]
    assert cheats, "the cheat was measured"
    fastest = max(doc["cells"], key=lambda r: r["metrics"].get("throughput") or 0.0)
    assert "cheat" in [t["name"] for t in fastest["techniques"]]  # it was the fastest cell...
    assert untrusted_reason(fastest, doc) is not None and "non-finite" in str(untrusted_reason(fastest, doc))
    winner = TuneSummary.from_json(doc["run"]["tune"]).workloads[0].winner
    assert winner is not None and "cheat" not in winner.techniques  # ...and never chosen
    assert "cheat" not in recipe_toml(doc["run"]["tune"])


class FakeWorker:
    """Stands in for the worker: each cell 'takes' ``cost`` seconds of a fake clock (or its timeout)."""

    def __init__(self, registry: Any, cost: float) -> None:
        self.now = 0.0
        self.cost = cost
        self.registry = registry
        self.starts: list[tuple[float, float]] = []

    def clock(self) -> float:
        return self.now

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        self.starts.append((self.now, timeout))
        record = results.base_record(cell, self.registry)
        if self.cost > timeout:
            self.now += timeout
            record.update(status=Status.TIMEOUT, evidence={"timeout_seconds": timeout}, wall_seconds=timeout)
            return record
        self.now += self.cost
        fast = 1.0 + 0.1 * len(cell.techniques)  # every technique helps: the search never stops by itself
        median = 0.01 / fast
        record.update(
            status=Status.PASSED,
            wall_seconds=self.cost,
            metrics={"step_time": _step_time(median), "throughput": cell.batch_size / median},
            numerics={
                "losses": [2.0, 1.9, 1.8],
                "loss_at_n": 1.8,
                "nonfinite_step": None,
                "nonfinite_what": None,
                # the GradScaler's starting scale, as the worker keeps it: float16 training carries a loss scale
                "scale_start": 65536.0 if {"amp-fp16", "half-weights"} & {t for t, _ in cell.techniques} else None,
            },
        )
        return record


def _step_time(median: float) -> dict[str, Any]:
    """A complete step_time (the results loader checks every key) around ``median``."""
    samples = [median * f for f in (0.99, 1.0, 1.01)] * 34
    return {
        "samples": samples,
        "n": len(samples),
        "median": median,
        "mean": median,
        "min": min(samples),
        "max": max(samples),
        "p10": samples[0],
        "p90": samples[2],
        "iqr": 0.02 * median,
        "rel_iqr": 0.02,
        "noise": 0.001,
    }


@pytest.mark.parametrize("cost", [7.0, 45.0])
def test_no_candidate_starts_after_the_budget(tmp_path: Path, registry: Any, cost: float) -> None:
    spec_text = tune_suite({"noop": ["noop"], "more": ["amp-bf16", "inject-fault"]})
    (tmp_path / "s.toml").write_text(spec_text, encoding="utf-8")
    plan = session.plan(
        tmp_path / "s.toml", settings=PluginSettings(extra=("ampsuite.plugins.faults",), autoload=False)
    )
    fake = FakeWorker(plan.registry, cost)
    budget = 30.0
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=budget, clock=fake.clock)
    lines: list[str] = []
    summary = tune_summary(plan, config, lines.append, measure=fake)
    assert fake.starts, "something was measured"
    for start, timeout in fake.starts:
        assert start < budget and start + timeout <= budget + 1e-9  # a cell's timeout never reaches past the budget
    assert fake.now <= budget + 1e-9
    assert summary.budget_spent and all("left]" in line for line in lines)
    if cost < budget:
        assert summary.refused_cells > 0 and any("not started" in line for line in lines)
    # A candidate the budget left out was not found wanting: its step says so, so that a tune page never calls
    # "not better" an option variant it never measured.
    unmeasured = [s for w in summary.workloads for s in w.steps if s.cell_id is None]
    assert all(s.decision is Decision.NOT_MEASURED and s.status == "not started (budget)" for s in unmeasured)
    doc = results.load(config.output)
    if cost > budget:  # the one cell that ran was cut by the budget: interrupted, so --resume runs it again
        assert doc["cells"][0]["status"] == Status.INTERRUPTED


def test_option_variants_come_from_literal_types_and_known_choices(registry: Any) -> None:
    variants = option_choices(registry, "torch-compile", {"mode": "default", "backend": "inductor"})
    assert ("mode", "reduce-overhead") in variants and ("mode", "default") not in variants
    # An option the suite leaves unset is at its default: that value is not a variant (else BERT-base's winner is
    # measured twice, once as "@torch-compile.mode=default").
    assert ("mode", "default") not in option_choices(registry, "torch-compile", {})
    # max-autotune compiles for minutes (past 7 on an H200 for ResNet-50): never a variant of its own accord.
    assert ("mode", "max-autotune") not in variants
    assert Candidate(("amp-bf16", "torch-compile"), 8, {"torch-compile": {"mode": "max-autotune"}}).combination == (
        "amp-bf16+torch-compile@torch-compile.mode=max-autotune"
    )


def test_the_suite_declares_option_values_to_try(registry: Any) -> None:
    current = {"mode": "default", "backend": "inductor", "fullgraph": False}
    declared = {"mode": ["max-autotune-no-cudagraphs"], "fullgraph": [True]}
    variants = option_choices(registry, "torch-compile", current, declared)
    # [tune.torch-compile] replaces the values of the options it names, and a flag is tried when declared.
    assert variants == [("mode", "max-autotune-no-cudagraphs"), ("fullgraph", True)]
    # A value the technique refuses with the options it would join is none: compile modes are inductor's.
    assert option_choices(registry, "torch-compile", {**current, "backend": "aot_eager"}, declared) == [
        ("fullgraph", True)
    ]


def test_the_suite_declares_values_of_inductor_entries_to_try(registry: Any) -> None:
    """[tune.torch-compile.inductor] lists values per entry: each is a variant of its own, OPTION.ENTRY, set on
    top of the suite's table; an entry at the value the table already has is none."""
    current = {"mode": "default", "backend": "inductor", "inductor": {"combo_kernels": True}}
    declared = {"inductor.combo_kernels": [True, False], "inductor.triton.tile_reductions": [True]}
    variants = option_choices(registry, "torch-compile", current, declared)
    assert variants == [
        ("mode", "reduce-overhead"),
        ("inductor.combo_kernels", False),
        ("inductor.triton.tile_reductions", True),
    ]
    # Entries are inductor's: none is a variant under another backend.
    assert (
        option_choices(registry, "torch-compile", {**current, "backend": "aot_eager", "inductor": {}}, declared) == []
    )
    candidate = Candidate(
        ("amp-bf16", "torch-compile"), 8, {"torch-compile": {"inductor.triton.tile_reductions": True}}
    )
    assert candidate.combination == "amp-bf16+torch-compile@torch-compile.inductor.triton.tile_reductions=True"


def test_a_variant_entry_goes_into_the_suites_inductor_table(registry: Any) -> None:
    """A candidate's OPTION.ENTRY override is merged into [techniques.torch-compile.inductor] in its cell, and the
    [tune.torch-compile.inductor] table is checked at load like any other option value."""
    suite = (
        "[workloads.toy]\nbatch_size = 8\n[combinations]\nfp32 = []\nc = ['amp-bf16', 'torch-compile']\n"
        "[techniques.torch-compile.inductor]\ncombo_kernels = true\n"
        "[tune.torch-compile.inductor]\ncoordinate_descent_tuning = [true]\n"
    )
    spec = loads(suite, "s.toml")
    assert spec.tune_choices == {"torch-compile": {"inductor.coordinate_descent_tuning": (True,)}}
    (config,) = workload_configs(spec, expand(spec, registry, "cpu"), {})
    candidate = Candidate(("amp-bf16", "torch-compile"), 8).with_option(
        "torch-compile", "inductor.coordinate_descent_tuning", True, None
    )
    cell = candidate.cell(spec, registry, "cpu", config)
    assert dict(cell.techniques)["torch-compile"]["inductor"] == {
        "combo_kernels": True,
        "coordinate_descent_tuning": True,
    }
    assert cell.combination == "amp-bf16+torch-compile@torch-compile.inductor.coordinate_descent_tuning=True"
    for bad, pattern in [
        ("coordinate_descent_tunin = [true]", r"tune\.torch-compile\.inductor\.coordinate_descent_tunin: not a "),
        ("coordinate_descent_tuning = [true, 2]", r"tune\.torch-compile\.inductor\.coordinate_descent_tuning\[1\]: "),
        ("coordinate_descent_tuning = true", r"tune\.torch-compile\.inductor\.coordinate_descent_tuning: expected a "),
    ]:
        text = suite.replace("coordinate_descent_tuning = [true]", bad)
        with pytest.raises(SuiteFileError, match=pattern):
            expand(loads(text, "s.toml"), registry, "cpu")


def test_declared_choices_are_measured_against_the_winner(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(COMPILED, tune={"torch-compile": COORDINATE_DESCENT}), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = FakeWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    summary = tune_summary(plan, config, lambda line: None, measure=fake)
    (toy,) = summary.workloads
    assert "torch-compile" in toy.winner.techniques
    options = [s for s in toy.steps if s.phase is Phase.OPTION]
    tried = [s.combination for s in options if "coordinate_descent_tuning" in s.combination]
    assert len(tried) == 1 and tried[0].endswith("+torch-compile@torch-compile.inductor.coordinate_descent_tuning=True")
    assert tried[0].split("@")[0] == toy.winner.combination.split("@")[0]
    # FP32 is measured once, in full, and that record is also its starting point.
    assert [r["combination"] for r in results.load(config.output)["cells"]].count("fp32") == 1
    assert next(s for s in toy.steps if s.phase is Phase.START).combination == "fp32"


class TieWorker(FakeWorker):
    """fp16 is 0.5% faster than bf16 with the same companions, within noise: screened again, 0.5% slower. Unless
    the gain ``holds``."""

    holds = False

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        names = {t for t, _ in cell.techniques}
        fp16 = 0.995 if "/screen-" in cell.id and not self.holds else 1.005
        speed = (1.0 + 0.5 * len(names)) * (fp16 if "amp-fp16" in names else 1.0)
        median = 0.01 / speed
        record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def test_between_figures_within_noise_bf16_wins_and_resume_keeps_the_best_so_far(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = TieWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    finals = {
        s.combination: s.throughput for s in toy.steps if s.phase is Phase.FINAL and "/screen" not in str(s.cell_id)
    }
    assert finals["amp-fp16+fused-optimizer"] > finals["amp-bf16+fused-optimizer"]  # fp16 was (slightly) faster...
    assert toy.winner.combination == "amp-bf16+fused-optimizer"  # ...and bf16 won: no loss scale to collapse
    # screened against each other: no clear gain
    (settled,) = [s for c, s in _decisions(toy, Phase.FINAL) if s.decision is Decision.NOT_CONFIRMED]
    assert settled.detail.startswith("screens ") and " against " in settled.detail
    # --resume after the last ablation row was lost: only that row is measured again, and the records
    # taken from the file count for "best so far" as fresh ones do.
    doc = results.load(config.output)
    last = toy.ablation[-1].cell_id
    assert last is not None
    doc["cells"] = [r for r in doc["cells"] if r["id"] != last]
    write_sealed(config.output, doc)
    lines: list[str] = []
    tune_summary(plan, dataclasses.replace(config, resume=True), lines.append, measure=fake)
    (line,) = [line for line in lines if "best so far" in line or "no trusted" in line]
    assert f"{last.split('/')[1]}/bs64 (ablation)" in line
    fp16 = finals["amp-fp16+fused-optimizer"]
    assert line.endswith(f"best so far amp-fp16+fused-optimizer/bs64 (an earlier run) {fp16:,.0f} samples/s")


def test_a_finalist_a_little_faster_than_the_simpler_choice_wins_when_its_screens_confirm_it(tmp_path: Path) -> None:
    # the ends of two paths (fp16's, bf16's), 0.5% apart: no greedy step held them against each other
    toy = _tune_toy(tmp_path, TieWorker, tune_suite(), holds=True)
    assert toy.winner.combination == "amp-fp16+fused-optimizer"
    (settled,) = [(c, s) for c, s in _decisions(toy, Phase.FINAL) if s.decision is Decision.CONFIRMED]
    assert settled[0] == "amp-fp16+fused-optimizer" and " against " in settled[1].detail


class DtypeWorker(FakeWorker):
    """fp16 is faster eager, but bf16 with fused-optimizer is the fastest (ResNet-50 on an H200, in miniature)."""

    @staticmethod
    def speed(names: set[str]) -> float:
        if "amp-fp16" in names:
            return 3.2 if "fused-optimizer" in names else 3.0
        if "amp-bf16" in names:
            return 4.0 if "fused-optimizer" in names else 2.4
        return 1.0

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        median = 0.01 / self.speed({t for t, _ in cell.techniques})
        record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def test_the_search_follows_each_amp_dtype_not_only_the_faster_eager_one(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite({"noop": ["noop"]}), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = DtypeWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    summary = tune_summary(plan, config, lambda line: None, measure=fake)
    (toy,) = summary.workloads
    assert sorted(toy.winner.techniques) == ["amp-bf16", "fused-optimizer"]
    greedy = [s.combination for s in toy.steps if s.phase is Phase.GREEDY]
    assert greedy.index("amp-fp16+fused-optimizer") < greedy.index("amp-bf16+fused-optimizer")  # fp16's path first
    finals = {s.combination for s in toy.steps if s.phase is Phase.FINAL}
    assert {"amp-fp16+fused-optimizer", "amp-bf16+fused-optimizer"} <= finals  # both paths' ends in full


class CompanionWorker(FakeWorker):
    """fp16 and bf16 gain alike from fused-optimizer and noop, fp16 a little faster; with ``spoils``, noop halves
    bf16's speed (a companion that does not carry over to the other dtype)."""

    spoils = False

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        names = {t for t, _ in cell.techniques}
        speed = (
            1.0
            + 0.5 * len(names - {"amp-fp16", "amp-bf16"})
            + 0.2 * ("amp-fp16" in names)
            + 0.1 * ("amp-bf16" in names)
        )
        if self.spoils and {"amp-bf16", "noop"} <= names:
            speed *= 0.5
        median = 0.01 / speed
        record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def _tune_with_noop(tmp_path: Path, worker: type[FakeWorker], **settings: Any) -> WorkloadTune:
    """A fresh tune of the toy suite with ``noop`` in its space, measured by ``worker`` given ``settings``."""
    return _tune_toy(tmp_path, worker, tune_suite({"noop": ["noop"]}), **settings)


def _tune_toy(tmp_path: Path, worker: type[FakeWorker], suite: str, **settings: Any) -> WorkloadTune:
    """A fresh tune of ``suite`` (tune_suite's text), measured by ``worker`` given ``settings``."""
    (tmp_path / "s.toml").write_text(suite, encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = worker(plan.registry, 1.0)
    budget = settings.pop("budget", 600.0)
    for name, value in settings.items():
        setattr(fake, name, value)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=budget, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    return toy


@pytest.mark.parametrize("spoils", [False, True])
def test_a_later_path_starts_from_the_leading_paths_companions(tmp_path: Path, spoils: bool) -> None:
    toy = _tune_with_noop(tmp_path, CompanionWorker, spoils=spoils)
    bf16 = [s for s in toy.steps if s.phase is Phase.GREEDY and "amp-bf16" in s.combination]
    # fp16's path ran first and ended with both companions; bf16's first screen is bf16 with both
    head = bf16[0]
    assert set(head.combination.split("+")) == {"amp-bf16", "fused-optimizer", "noop"}
    if not spoils:
        # one screen instead of a round of one companion each and then the pair: the path goes on from there
        assert head.decision is Decision.HEAD_START and len(bf16) == 1
        finals = {s.combination for s in toy.steps if s.phase is Phase.FINAL}
        assert head.combination in finals  # the bf16 path's end, in full
        assert sorted(toy.winner.techniques) == ["amp-fp16", "fused-optimizer", "noop"]
    else:
        # slower than bf16 alone: the path starts from bf16 alone and finds fused-optimizer on its own
        assert head.decision is Decision.NOT_FASTER
        kept = [s.combination for s in bf16 if s.decision is Decision.KEPT]
        assert kept == ["amp-bf16+fused-optimizer"]
        finals = {s.combination for s in toy.steps if s.phase is Phase.FINAL}
        assert "amp-bf16+fused-optimizer" in finals


class HalfWeightsWorker(FakeWorker):
    """fp16 autocast is the fastest start; the model itself in half (half-weights, Apex O2) is faster once
    companions join (ResNet-50 on an H200, in miniature)."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        names = {t for t, _ in cell.techniques}
        speed = max(
            (v for k, v in {"amp-fp16": 3.0, "amp-bf16": 2.4, "half-weights": 2.9}.items() if k in names), default=1.0
        )
        if "noop" in names:
            speed *= 1.2 if "half-weights" in names else 1.1
        median = 0.01 / speed
        record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def test_a_technique_that_replaces_autocast_starts_a_path_of_its_own(tmp_path: Path) -> None:
    # needs-compile is pruned with every AMP dtype too, but also alone (it requires torch-compile): no start
    more = {"noop": ["noop"], "o2": ["half-weights"], "pool": ["torch-compile", "needs-compile"]}
    (tmp_path / "s.toml").write_text(tune_suite(more), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml", objects=NEEDS_COMPILE)
    fake = HalfWeightsWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    starts = {s.combination: s.decision for s in toy.steps if s.phase is Phase.START}
    assert starts == dict.fromkeys(["fp32", "amp-fp16", "amp-bf16", "half-weights"], Decision.HEALTHY)
    greedy = [s.combination for s in toy.steps if s.phase is Phase.GREEDY]
    # Never grown onto an AMP path, which prunes it, nor onto its own: a path of its own, after the faster fp16's.
    assert not [c for c in greedy if "half-weights" in c and "amp-" in c]
    assert greedy.index("amp-fp16+noop") < greedy.index("half-weights+noop")
    assert toy.winner is not None and toy.winner.techniques == ("half-weights", "noop")


class NearMissWorker(FakeWorker):
    """bf16 is the start; noop and fused-optimizer each make it ``gain`` faster. A screen's noise is 0.6% here, so
    that a single step must clear 1.2% (the sum of two figures' noise) where a full one clears 1%. When the gain does
    not ``hold``, a repeated screen (``.../screen-N``) finds it gone: the first screen's was the machine's drift."""

    gain = 1.011
    holds = True

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        names = {t for t, _ in cell.techniques}
        gain = self.gain if self.holds or "/screen-" not in cell.id else 0.999
        speed = (2.0 if "amp-bf16" in names else 1.0) * gain ** len(names & {"noop", "fused-optimizer"})
        median = 0.01 / speed
        step_time = {**_step_time(median), "noise": 0.006 if screened_cell(cell.id) else 0.001}
        record["metrics"] = {"step_time": step_time, "throughput": cell.batch_size / median}
        return record


def _decisions(toy: WorkloadTune, phase: Phase) -> list[tuple[str, Step]]:
    """(combination, step) of each step in ``phase`` but the repeated screens (``.../screen-N``), in order."""
    return [
        (s.combination, s)
        for s in toy.steps
        if s.phase is phase and not str(s.cell_id).rsplit("/", 1)[-1].startswith("screen-")
    ]


@pytest.mark.parametrize("gain", [1.011, 1.004])
def test_near_misses_of_a_greedy_round_are_screened_together(tmp_path: Path, gain: float) -> None:
    toy = _tune_with_noop(tmp_path, NearMissWorker, gain=gain)
    bf16 = [(c, s) for c, s in _decisions(toy, Phase.GREEDY) if c.startswith("amp-bf16+")]
    both = {"amp-bf16", "noop", "fused-optimizer"}
    # The first round: neither alone clears the screens' noise, then both together.
    together, joint = bf16[2]
    assert set(together.split("+")) == both
    assert toy.winner is not None
    if gain > 1.01:
        # Together they do (+2.2%): the path takes both, and in full each is clearly worth its place.
        assert [s.decision for c, s in bf16[:2]] == [Decision.NOT_FASTER, Decision.NOT_FASTER]
        assert joint.decision is Decision.KEPT_TOGETHER and len(bf16) == 3
        assert sorted(toy.winner.techniques) == sorted(both)
        contributions = {r.label: r.contribution for r in toy.ablation}
        assert contributions["without noop"] == contributions["without fused-optimizer"] == pytest.approx(gain - 1)
    else:
        # +0.8% together is no clear gain either. The round's fastest near miss is then screened beside the path until
        # each has three screens, and each of its is faster each time: kept; the next round's likewise.
        assert joint.decision is Decision.NOT_FASTER
        assert {s.decision for c, s in bf16[:2]} == {Decision.CONFIRMED, Decision.NOT_FASTER}
        confirmed = [(c, s.detail) for c, s in bf16 if s.decision is Decision.CONFIRMED]
        assert [len(c.split("+")) for c, _ in confirmed] == [2, 3] and set(confirmed[1][0].split("+")) == both
        assert all(d.startswith("each of its screens faster than each of the incumbent's (") for _, d in confirmed)
        repeats = [s for s in toy.steps if s.combination.startswith("amp-bf16") and "/screen-" in str(s.cell_id)]
        # round 1: two repeats each of the path and the near miss; round 2: the near miss's, the path's already taken
        assert len(repeats) == 6 and {s.decision for s in repeats} == {Decision.CONFIRMING}
        # The finalists lie within 1% of each other: the simplest would win, but each step was confirmed.
        assert sorted(toy.winner.techniques) == sorted(both)


def test_progress_names_each_repeated_screen(tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite({"noop": ["noop"]}), encoding="utf-8")
    fake = NearMissWorker(session.plan(suite).registry, 1.0)
    fake.gain = 1.004
    lines: list[str] = []
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    tune_summary(session.plan(suite), config, lines.append, measure=fake)
    assert [line for line in lines if "amp-bf16/bs64 (screen 2) " in line and "best so far" in line]
    assert [line for line in lines if "amp-bf16/bs64 (screen 3) " in line]


def test_a_near_miss_that_repeated_screens_do_not_confirm_is_turned_down(tmp_path: Path) -> None:
    toy = _tune_with_noop(tmp_path, NearMissWorker, gain=1.004, holds=False)
    greedy = [s for c, s in _decisions(toy, Phase.GREEDY) if c.startswith("amp-bf16+")]
    (unconfirmed,) = [s for s in greedy if s.decision is Decision.NOT_CONFIRMED]
    # The round's fastest near miss screened again, three times each: it lost its lead, and the path ended.
    assert unconfirmed.detail.startswith("screens 12,") and " against 12,800.0, 12,800.0" in unconfirmed.detail
    assert unconfirmed.describe() == f"not confirmed: {unconfirmed.detail}"
    assert not [s for s in greedy if s.decision.kept]
    assert toy.winner is not None and toy.winner.techniques == ("amp-bf16",)


def test_a_near_miss_the_budget_cannot_screen_again_is_not_confirmed(tmp_path: Path) -> None:
    # At 1 s a cell: FP32, two starts, the first round's two screens and the joint one take 6 s, and the search phases
    # leave 20% of the budget to the ablation: with 10 s, one repeat fits, the next does not.
    toy = _tune_with_noop(tmp_path, NearMissWorker, gain=1.004, budget=10.0)
    greedy = [s for c, s in _decisions(toy, Phase.GREEDY)]
    unconfirmed = [s for s in greedy if s.decision is Decision.NOT_CONFIRMED]
    assert [s.detail for s in unconfirmed] == ["the budget left a repeat unmeasured"]
    assert not [s for s in greedy if s.decision.kept]
    repeats = [s for s in toy.steps if s.decision is Decision.CONFIRMING]
    assert len(repeats) == 1 and str(repeats[0].cell_id).endswith("/screen-2")
    refused = [s for s in toy.steps if s.phase is Phase.GREEDY and s.cell_id is None]
    assert refused and {s.decision for s in refused} == {Decision.NOT_MEASURED}


class RecordingNearMissWorker(NearMissWorker):
    """NearMissWorker that keeps the id of each cell it measures."""

    ids: list[str]

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        self.ids.append(cell.id)
        return super().__call__(cell, spec, timeout)


def _a_near_miss_tuned(tmp_path: Path, budget: float) -> tuple[Path, RecordingNearMissWorker, TuneConfig]:
    """The toy suite with noop, where noop and fused-optimizer are each +0.4% (near misses that hold), tuned once
    within ``budget``: (the suite file, its recording worker, the config)."""
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite({"noop": ["noop"]}), encoding="utf-8")
    fake = RecordingNearMissWorker(session.plan(suite).registry, 1.0)
    fake.gain, fake.ids = 1.004, []
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=budget, clock=fake.clock)
    tune_summary(session.plan(suite), config, lambda line: None, measure=fake)
    return suite, fake, config


def test_screen_ids_name_their_cell_and_selfcheck_leaves_every_screen_out() -> None:
    assert screen_id("toy/amp-bf16/bs64") == "toy/amp-bf16/bs64/screen"
    assert screen_id("toy/amp-bf16/bs64", 3) == "toy/amp-bf16/bs64/screen-3"
    assert (
        screened_cell("toy/amp-bf16/bs64/screen-3") == screened_cell("toy/amp-bf16/bs64/screen") == "toy/amp-bf16/bs64"
    )
    for plain in ("toy/amp-bf16/bs64", "toy/screen/bs64", "toy/a/bs64/screen-x", "toy/a/bs64/screens"):
        assert screened_cell(plain) is None
    record = {"status": Status.PASSED, "world_size": 1, "workload": {"plugin": "toy"}, "batch_size": 64}
    doc = {"cells": [{**record, "id": i} for i in ("toy/a/bs64", "toy/a/bs64/screen", "toy/a/bs64/screen-2")]}
    assert [c.name for c in selfcheck.cell_checks(doc)] == ["cell toy/a/bs64"]


class InterruptingWorker(FakeWorker):
    """Ctrl-C during the ``n``-th ablation cell (the worker's record says ``interrupted``, as run_record's does)."""

    def __init__(self, registry: Any, cost: float, n: int) -> None:
        super().__init__(registry, cost)
        self.n = n
        self.ablation = 0

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        if self.ablation_phase:
            self.ablation += 1
            if self.ablation == self.n:
                record.update(status=Status.INTERRUPTED, evidence={"reason": "interrupted"}, metrics={})
        return record

    ablation_phase = False


def test_an_interrupted_tune_keeps_its_search_and_writes_outputs_of_this_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(tune_suite(), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "tune.md").write_text("an older run's page\n", encoding="utf-8")
    real_tune = tune_module.search.tune
    workers: list[InterruptingWorker] = []

    def fake_tune(plan: Any, config: TuneConfig, progress: Any) -> dict[str, Any]:
        worker = InterruptingWorker(plan.registry, 1.0, 2)
        workers.append(worker)
        real_ablation = tune_module.search._ablation

        def ablation(*args: Any) -> None:
            worker.ablation_phase = True
            real_ablation(*args)

        monkeypatch.setattr(tune_module.search, "_ablation", ablation)
        return real_tune(plan, dataclasses.replace(config, clock=worker.clock), progress, measure=worker)

    monkeypatch.setattr(tune_module, "tune", fake_tune)
    code = main(["tune", str(suite), "--budget", "600s", "--report-dir", str(out)])
    assert code == int(ExitCode.INTERRUPTED), capsys.readouterr()
    summary = TuneSummary.from_json(results.load(out / "results.json")["run"]["tune"])
    assert summary.incomplete is True
    (toy,) = summary.workloads
    assert toy.winner is not None and toy.steps  # the search so far is kept...
    statuses = [row.status for row in toy.ablation]
    # ...with the ablation rows measured before the interruption, then the rest marked for --resume.
    assert statuses[0] == Status.PASSED and "interrupted" in statuses[1:]
    assert all(s in (Status.PASSED, "interrupted") for s in statuses)
    md = (out / "tune.md").read_text(encoding="utf-8")
    assert md.startswith("# ampsuite tune") and "**Interrupted**" in md  # not the older run's page
    assert "Interrupted:" in (out / "tune.html").read_text(encoding="utf-8")
    assert "# interrupted" in (out / "recipe.toml").read_text(encoding="utf-8")


class ClockWorker(FakeWorker):
    """Cells with fused-optimizer are the fastest, and carry the clocks probe's ``warning``."""

    def __init__(self, registry: Any, warning: str) -> None:
        super().__init__(registry, 1.0)
        self.warning = warning

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        if "fused-optimizer" in {t for t, _ in cell.techniques}:
            record["warnings"] = [self.warning]
        return record


@pytest.mark.parametrize(
    ("warning", "chosen"),
    [
        ("clocks throttled: sw_thermal_slowdown during the timed steps", False),
        ("unstable timing: torch.compile compiled 1 graph(s) during the timed steps", False),
        ("torch.compile: 1 graph break, 2 graphs (most frequent: Attempted to call function marked as skipped)", True),
        ("power-capped: the SM clock fell to 1545 MHz, 16% below 1830 MHz at up to 694 W (sw_power_cap)", True),
    ],
)
def test_disturbed_timings_are_never_chosen_and_neither_the_power_cap_nor_a_graph_break_disturbs(
    tmp_path: Path, warning: str, chosen: bool
) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = ClockWorker(plan.registry, warning)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    assert ("fused-optimizer" in toy.winner.techniques) is chosen
    finals = [s for s in toy.steps if s.phase is Phase.FINAL and "fused-optimizer" in s.combination]
    assert finals and all((s.untrusted is None) is chosen for s in finals)


class CoordinateWorker(FakeWorker):
    """torch-compile's coordinate descent (an inductor entry) is 5% faster: tune keeps it, and the ablation
    prices it."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        options = dict(cell.techniques)
        tuned = bool(options.get("torch-compile", {}).get("inductor", {}).get("coordinate_descent_tuning"))
        median = 0.01 / (1.0 + 0.1 * len(options)) / (1.05 if tuned else 1.0)
        record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def test_an_option_value_tune_chose_has_its_own_ablation_row(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(COMPILED, tune={"torch-compile": COORDINATE_DESCENT}), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = CoordinateWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    summary = tune_summary(plan, config, lambda line: None, measure=fake)
    (toy,) = summary.workloads
    assert toy.winner.combination.endswith("@torch-compile.inductor.coordinate_descent_tuning=True")
    rows = {row.label: row for row in toy.ablation}
    row = rows["without torch-compile.inductor.coordinate_descent_tuning=True"]
    assert row.removed == "torch-compile.inductor.coordinate_descent_tuning=True"
    assert row.combination == toy.winner.combination.split("@")[0]  # the winner before the option step
    assert row.contribution == pytest.approx(0.05)
    assert rows["winner"].kind is RowKind.WINNER and row.kind is RowKind.WITHOUT
    assert rows["winner"].options == ("torch-compile.inductor.coordinate_descent_tuning=True",) and row.options == ()
    page = tune_module.tune_markdown(summary)
    techniques = " + ".join(toy.winner.techniques)
    assert f"| winner | {techniques} (torch-compile.inductor.coordinate_descent_tuning=True) | passed |" in page
    # Leaving a technique out drops its options with it; the other techniques' rows keep them.
    assert "coordinate_descent" not in rows["without torch-compile"].combination
    assert rows["without amp-bf16"].combination.endswith("@torch-compile.inductor.coordinate_descent_tuning=True")


class ThrottledOnceWorker(ClockWorker):
    """Like ClockWorker, until ``cooled`` is set: then no cell carries the warning (``cut``: cells are interrupted)."""

    cooled = False
    cut = False
    ids: list[str]

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        self.ids.append(cell.id)
        if self.cooled:
            record["warnings"] = []
        if self.cut:
            record.update(status=Status.INTERRUPTED, evidence={"reason": "interrupted"}, metrics={})
        return record


def test_resume_measures_a_throttled_record_again_and_keeps_it_when_cut_short(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = ThrottledOnceWorker(plan.registry, "clocks throttled: sw_thermal_slowdown during the timed steps")
    fake.ids = []
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    assert "fused-optimizer" not in toy.winner.techniques
    throttled = {r["id"] for r in results.load(config.output)["cells"] if r.get("warnings")}
    assert {i for i in throttled if not i.endswith("/screen")}  # full records the search passed over

    # Cut short: the throttled records are what the file keeps, and the run stops as Ctrl-C stops it.
    fake.ids, fake.cut = [], True
    before = {r["id"]: r for r in results.load(config.output)["cells"]}
    with pytest.raises(KeyboardInterrupt):
        tune_summary(plan, dataclasses.replace(config, resume=True), lambda line: None, measure=fake)
    assert len(fake.ids) == 1 and fake.ids[0] in throttled
    assert results.load(config.output)["cells"] == list(before.values())

    # Cooled down: each throttled full record is measured again (screens are not), and now the fastest wins.
    fake.ids, fake.cut, fake.cooled = [], False, True
    lines: list[str] = []
    (toy,) = tune_summary(plan, dataclasses.replace(config, resume=True), lines.append, measure=fake).workloads
    assert "fused-optimizer" in toy.winner.techniques
    again = {i for i in fake.ids if i in throttled}
    assert again == {i for i in throttled if not i.endswith("/screen")}
    assert sum("measured again, the file's record says clocks throttled" in line for line in lines) == len(again)
    assert not any(r.get("warnings") for r in results.load(config.output)["cells"] if r["id"] in again)


class RoundsWorker(FakeWorker):
    """reduce-overhead alone is within noise (+0.5%, gone when screened again), coordinate descent alone is 5% faster,
    both together 10%."""

    holds = False

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        options = dict(cell.techniques)
        compile_options = options.get("torch-compile", {})
        repeated = "/screen-" in cell.id and not self.holds
        gain = (1.05 if compile_options.get("inductor", {}).get("coordinate_descent_tuning") else 1.0) * (
            (0.999 if repeated else 1.005) if compile_options.get("mode") == "reduce-overhead" else 1.0
        )
        if (
            compile_options.get("inductor", {}).get("coordinate_descent_tuning")
            and compile_options.get("mode") == "reduce-overhead"
        ):
            gain = 1.10
        median = 0.01 / (1.0 + 0.1 * len(options)) / gain
        record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def _options(toy: WorkloadTune) -> list[tuple[str, Decision]]:
    """(the option settings, decision) of each option variant step but the screens that confirm a near miss."""
    steps = _decisions(toy, Phase.OPTION)
    return [(c.split("@", 1)[1], s.decision) for c, s in steps if s.decision is not Decision.CONFIRMING]


def test_an_option_passed_over_is_tried_again_on_top_of_a_value_kept_after_it(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(COMPILED, tune={"torch-compile": COORDINATE_DESCENT}), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = RoundsWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    assert _options(toy) == [
        ("torch-compile.mode=reduce-overhead", Decision.NOT_CONFIRMED),
        ("torch-compile.inductor.coordinate_descent_tuning=True", Decision.KEPT),
        ("torch-compile.inductor.coordinate_descent_tuning=True@torch-compile.mode=reduce-overhead", Decision.KEPT),
    ]
    assert toy.winner.combination.endswith(
        "@torch-compile.inductor.coordinate_descent_tuning=True@torch-compile.mode=reduce-overhead"
    )


class FileReadingWorker(RecordingNearMissWorker):
    """Reads the results file from disk before each cell: what a run killed at that moment would leave."""

    output: Path
    seen: list[list[dict[str, Any]]]

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        path = self.output
        on_disk = results.load(path) if path.exists() else {"run": {}}
        self.seen.append((on_disk["run"].get("tune") or {}).get("confirmations") or [])
        return super().__call__(cell, spec, timeout)


def test_a_verdict_is_in_the_results_file_before_the_next_cell_runs(tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite({"noop": ["noop"]}), encoding="utf-8")
    fake = FileReadingWorker(session.plan(suite).registry, 1.0)
    fake.gain, fake.ids, fake.seen, fake.output = 1.004, [], [], tmp_path / "out" / "results.json"
    config = TuneConfig(output=fake.output, budget_seconds=600.0, clock=fake.clock)
    tune_summary(session.plan(suite), config, lambda line: None, measure=fake)
    last_repeat = max(i for i, c in enumerate(fake.ids) if c.endswith("/screen-3"))
    first_after = next(seen for i, seen in enumerate(fake.seen) if i > last_repeat)
    assert first_after and first_after[0]["confirmed"] is True and " against " in first_after[0]["screens"]


def test_a_damaged_verdict_in_the_file_is_tested_again_not_trusted(tmp_path: Path) -> None:
    suite, fake, config = _a_near_miss_tuned(tmp_path, 600.0)
    doc = results.load(config.output)
    verdicts = doc["run"]["tune"]["confirmations"]
    first = dict(verdicts[0])
    verdicts[0]["confirmed"] = "yes"  # not a bool: whoever edited the file, the entry decides nothing
    verdicts[1:] = [*verdicts[1:], 42, {"key": "toy"}]
    write_sealed(config.output, doc)
    fake.ids = []
    resumed = dataclasses.replace(config, resume=True)
    (toy,) = tune_summary(session.plan(suite), resumed, lambda line: None, measure=fake).workloads
    near = first["near"].rsplit("/", 1)[0]
    # The damaged pair is decided again, from its six screens in the file (all of one run: nothing to measure), the
    # others are taken as they stand; the file's entries are whole again.
    confirmed = {c: s.detail for c, s in _decisions(toy, Phase.GREEDY) if s.decision is Decision.CONFIRMED}
    assert confirmed[near].startswith("each of its screens faster")
    assert [d for c, d in confirmed.items() if c != near and d.startswith("as decided on ")]
    assert not [i for i in fake.ids if "/screen-" in i]
    assert sorted(toy.winner.techniques) == ["amp-bf16", "fused-optimizer", "noop"]
    saved = results.load(config.output)["run"]["tune"]["confirmations"]
    assert {v["near"]: v["confirmed"] for v in saved}[first["near"]] is True and len(saved) == len(verdicts) - 2


class HoldingRoundsWorker(RoundsWorker):
    """RoundsWorker whose reduce-overhead gain (+0.5%) holds up when screened again."""

    holds = True


def test_an_option_value_within_noise_is_kept_when_its_screens_confirm_it(tmp_path: Path) -> None:
    suite = tune_suite(COMPILED, tune={"torch-compile": {"mode": ["reduce-overhead"]}})
    toy = _tune_toy(tmp_path, HoldingRoundsWorker, suite)
    (option,) = [(c, s) for c, s in _decisions(toy, Phase.OPTION) if "@" in c and s.decision is not Decision.CONFIRMING]
    assert option[0].endswith("@torch-compile.mode=reduce-overhead") and option[1].decision is Decision.CONFIRMED
    assert option[1].describe().startswith("kept, confirmed: each of its screens faster than each of the incumbent's (")
    assert toy.winner.combination == option[0]
    # the winner's full record, not a screen, is the recipe's figure
    assert not str(toy.winner.cell_id).endswith("/screen")
    screens = [s for s in toy.steps if s.phase is Phase.OPTION and s.decision is Decision.CONFIRMING]
    assert {str(s.cell_id).rsplit("/", 1)[1] for s in screens} == {"screen", "screen-2", "screen-3"}


class ModesWorker(RoundsWorker):
    """As RoundsWorker, and max-autotune 3% faster whatever else is set: better than plain compile, worse than
    coordinate descent with reduce-overhead."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        record = super().__call__(cell, spec, timeout)
        options = dict(cell.techniques)
        if options.get("torch-compile", {}).get("mode") == "max-autotune":
            median = 0.01 / (1.0 + 0.1 * len(options)) / 1.03
            record["metrics"] = {"step_time": _step_time(median), "throughput": cell.batch_size / median}
        return record


def test_resume_tries_the_option_values_already_measured_before_new_ones(tmp_path: Path) -> None:
    """Records at hand cost nothing, so they come first: otherwise a mode declared after a tune (max-autotune) is
    measured first on --resume and kept, and the budget ends before the winner already in the file (coordinate
    descent + reduce-overhead, 4% faster on an H200) is reached again."""
    suite = tmp_path / "s.toml"

    def with_modes(*modes: str) -> str:
        return tune_suite(COMPILED, tune={"torch-compile": {**COORDINATE_DESCENT, "mode": list(modes)}})

    suite.write_text(with_modes("reduce-overhead"), encoding="utf-8")
    fake = ModesWorker(session.plan(suite).registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (first,) = tune_summary(session.plan(suite), config, lambda line: None, measure=fake).workloads
    best = "@torch-compile.inductor.coordinate_descent_tuning=True@torch-compile.mode=reduce-overhead"
    assert first.winner.combination.endswith(best)

    suite.write_text(with_modes("reduce-overhead", "max-autotune"), encoding="utf-8")
    fake.starts = []
    lines: list[str] = []
    resumed = dataclasses.replace(config, resume=True)
    (toy,) = tune_summary(session.plan(suite), resumed, lines.append, measure=fake).workloads
    assert toy.winner.combination == first.winner.combination
    options = _options(toy)
    assert options[:3] == [
        ("torch-compile.mode=reduce-overhead", Decision.NOT_CONFIRMED),
        ("torch-compile.inductor.coordinate_descent_tuning=True", Decision.KEPT),
        ("torch-compile.inductor.coordinate_descent_tuning=True@torch-compile.mode=reduce-overhead", Decision.KEPT),
    ]
    # One cell: max-autotune on top of coordinate descent; the winner (this machine's record) and its ablation
    # rows were all at hand.
    assert len(fake.starts) == 1
    assert not [line for line in lines if "measured again" in line]
    assert (
        "torch-compile.inductor.coordinate_descent_tuning=True@torch-compile.mode=max-autotune",
        Decision.NOT_BETTER,
    ) in options


def test_the_recipe_keeps_each_winners_own_option_values(registry: Any) -> None:
    """Two workloads whose winners want different compile modes: each combination carries its own, and the
    snippet expands to cells that run with them (a suite-wide [techniques] table could hold one)."""

    def winner(key: str, mode: str) -> WorkloadTune:
        # Only tune's own choice, as summaries of early versions kept it.
        techniques = ("amp-bf16", "torch-compile")
        recipe = Winner(f"{'+'.join(techniques)}@torch-compile.mode={mode}", techniques, 8, f"{key}/x/bs8", 100.0)
        return WorkloadTune(key, "samples", winner=replace(recipe, overrides={"torch-compile": {"mode": mode}}))

    summary = TuneSummary(device="cpu", workloads=(winner("a", "reduce-overhead"), winner("b", "max-autotune")))
    recipe = recipe_toml(summary)
    assert "one per suite" not in recipe and "[techniques." not in recipe
    suite = "[workloads.a]\nplugin = 'toy'\nbatch_size = 8\n[workloads.b]\nplugin = 'toy'\nbatch_size = 8\n"
    cells = expand(loads(suite + recipe, "recipe.toml"), registry, "cpu")
    modes = {(c.workload_id, c.combination): dict(c.techniques)["torch-compile"]["mode"] for c in cells}
    assert modes[("a", "tuned-a")] == "reduce-overhead" and modes[("b", "tuned-b")] == "max-autotune"
    assert modes[("a", "tuned-b")] == "max-autotune"  # the combination's, whichever workload runs it


def test_the_recipe_carries_the_tune_suites_own_option_values(registry: Any) -> None:
    """A winner measured with the tune suite's [techniques.torch-compile] values: the snippet sets them on its
    combination, so a suite without that table runs the recipe as measured (as ResNet-50's tuned winner needs)."""
    winner = Winner(
        combination="amp-fp16+torch-compile",
        techniques=("amp-fp16", "torch-compile"),
        batch_size=8,
        cell_id="a/amp-fp16+torch-compile/bs8",
        throughput=100.0,
        speedup_vs_fp32=2.0,
        options={"torch-compile": {"mode": "reduce-overhead", "inductor": {"triton.tile_reductions": True}}},
    )
    summary = TuneSummary(device="cuda", workloads=(WorkloadTune("a", "samples", winner=winner),))
    recipe = recipe_toml(summary)
    suite = "[workloads.a]\nplugin = 'toy'\nbatch_size = 8\n"
    (cell,) = [c for c in expand(loads(suite + recipe, "recipe.toml"), registry, "cpu") if c.combination == "tuned-a"]
    compile_options = dict(cell.techniques)["torch-compile"]
    assert compile_options["mode"] == "reduce-overhead"
    assert compile_options["inductor"] == {"triton.tile_reductions": True}


def test_tune_builds_its_own_candidates_whatever_a_combination_sets(tmp_path: Path) -> None:
    """[combination_options] belong to the suite's rows; tune's candidates run with the suite-wide values."""
    suite = tune_suite(
        COMPILED,
        techniques={"torch-compile": {"backend": "aot_eager"}},
        combination_options={"compiled": {"torch-compile": {"fullgraph": True}}},
    )
    (tmp_path / "s.toml").write_text(suite, encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = FakeWorker(plan.registry, 1.0)
    seen: list[dict[str, Any]] = []

    def measure(cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        seen.extend(o for name, o in cell.techniques if name == "torch-compile")
        return fake(cell, spec, timeout)

    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=measure).workloads
    assert toy.winner is not None and seen
    assert all(o["backend"] == "aot_eager" and o["fullgraph"] is False for o in seen)


def test_a_resumed_search_reports_its_screens_against_the_files_last_winner(tmp_path: Path) -> None:
    """A technique added to the space is screened first; the file already holds a trusted winner, and
    "best so far" must say so rather than name the FP32 cell (an H200 resume printed "fp32 391" beside a
    3,501 img/s winner in its file)."""
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite(), encoding="utf-8")
    plan = session.plan(suite)
    fake = FakeWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    (first,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    winner = first.winner
    suite.write_text(tune_suite(COMPILED), encoding="utf-8")
    plan = session.plan(suite)
    lines: list[str] = []
    tune_summary(plan, dataclasses.replace(config, resume=True), lines.append, measure=fake)
    screen = next(line for line in lines if "torch-compile" in line and "(screen)" in line)
    assert winner is not None
    expected = f"best so far {winner.name} (the file's last winner) {winner.throughput:,.0f}"
    assert expected in screen, screen


def test_tune_leaves_no_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `ampsuite tune` had left an empty ampsuite-tune-* folder in the system's temporary directory."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "s.toml").write_text(tune_suite(), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml")
    fake = FakeWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    tune_summary(plan, config, lambda line: None, measure=fake)
    assert not list(scratch.glob("ampsuite-tune-*"))


class IdsWorker(FakeWorker):
    """FakeWorker that remembers which cells it measured."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        self.ids.append(cell.id)
        return super().__call__(cell, spec, timeout)

    ids: list[str]


def test_resume_measures_again_a_record_whose_options_the_suite_file_changed(tmp_path: Path) -> None:
    """When cudnn-batch-norm gains `fuse = true` in the tune file, its earlier records, measured unfused, have
    the ids of the new candidates; they are measured again rather than taken out of the file by hand."""

    def accumulating(steps: int) -> str:
        more = {"accumulated": ["amp-bf16", "grad-accumulation"]}
        return tune_suite(more, techniques={"grad-accumulation": {"steps": steps}})

    suite = tmp_path / "s.toml"
    suite.write_text(accumulating(2), encoding="utf-8")
    plan = session.plan(suite)
    fake = IdsWorker(plan.registry, 1.0)
    fake.ids = []
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    tune_summary(plan, config, lambda line: None, measure=fake)
    first = {r["id"]: r for r in results.load(config.output)["cells"]}
    accumulated = {i for i, r in first.items() if "grad-accumulation" in {t["name"] for t in r["techniques"]}}
    assert accumulated

    suite.write_text(accumulating(4), encoding="utf-8")
    plan = session.plan(suite)
    fake.ids, lines = [], []
    tune_summary(plan, dataclasses.replace(config, resume=True), lines.append, measure=fake)
    changed = [i for i in fake.ids if i in accumulated]
    assert changed and sum("the file's record measured other technique options" in line for line in lines) == len(
        changed
    )
    # Beside them, only records measured again to be held against the new figures (like with like): finalists in
    # full, and the screens of a greedy round that holds a new screen.
    again = set(fake.ids) - accumulated
    for cell_id in again:
        name, phase = (
            cell_id.split("/", 1)[1].removesuffix("/screen"),
            "screen" if cell_id.endswith("screen") else "full",
        )
        assert any(f"{name} ({phase}) measured again, held against" in line for line in lines)
    after = {r["id"]: r for r in results.load(config.output)["cells"]}
    for cell_id in changed:
        (options,) = [t["options"] for t in after[cell_id]["techniques"] if t["name"] == "grad-accumulation"]
        assert options == {"steps": 4}
    for cell_id in set(first) - accumulated - again:
        assert after[cell_id] == first[cell_id]
    (backup,) = (tmp_path / "out").glob("results.*.json")  # the file as it was: nothing measured is lost
    assert {r["id"]: r for r in results.load(backup)["cells"]} == first


def _then_noop(tmp_path: Path, worker: type[FakeWorker], budget: float) -> tuple[Path, Any, TuneConfig, WorkloadTune]:
    """A first tune of the toy suite (winner bf16 + fused-optimizer), then noop added to the suite's space: the suite
    file, the worker, the first run's config (for a ``--resume`` of it) and its result."""
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite(), encoding="utf-8")
    fake = worker(session.plan(suite).registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=budget, clock=fake.clock)
    (first,) = tune_summary(session.plan(suite), config, lambda line: None, measure=fake).workloads
    assert sorted(first.winner.techniques) == ["amp-bf16", "fused-optimizer"]
    suite.write_text(tune_suite({"noop": ["noop"]}), encoding="utf-8")
    return suite, fake, config, first


# -- records of the file: beside this machine, or measured again --------------------------------------------


def _rescale(record: dict[str, Any], factor: float) -> None:
    """``record``, when a passed full measurement, as if measured on a machine ``factor`` times faster."""
    if record["status"] == Status.PASSED and not record["id"].endswith("/screen"):
        median = record["metrics"]["step_time"]["median"] / factor
        record["metrics"] = {"step_time": _step_time(median), "throughput": record["batch_size"] / median}


def _as_if_elsewhere(path: Path, factor: float) -> dict[str, dict[str, Any]]:
    """Rewrite the file's records as if another machine, ``factor`` times faster, measured them."""
    doc = results.load(path)
    for record in doc["cells"]:
        record["machine"] = {**record["machine"], "host": "elsewhere", "gpu_uuid": None}
        _rescale(record, factor)
    results.ResultsWriter(path, doc)  # written with its checksum
    return {r["id"]: r for r in doc["cells"]}


def _first_tune(tmp_path: Path, budget: float = 600.0) -> tuple[Path, FakeWorker, TuneConfig, WorkloadTune]:
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite(), encoding="utf-8")
    fake = FakeWorker(session.plan(suite).registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=budget, clock=fake.clock)
    (first,) = tune_summary(session.plan(suite), config, lambda line: None, measure=fake).workloads
    return suite, fake, config, first


def test_every_record_names_the_machine_that_measured_it(tmp_path: Path) -> None:
    import socket

    _, _, config, _ = _first_tune(tmp_path)
    machines = [r["machine"] for r in results.load(config.output)["cells"]]
    assert machines and all(m["host"] == socket.gethostname() and m["gpu_uuid"] is None for m in machines)


def test_a_resumed_tune_on_this_machine_takes_the_files_records_as_they_are(tmp_path: Path) -> None:
    suite, fake, config, first = _first_tune(tmp_path)
    before = len(fake.starts)
    lines: list[str] = []
    resumed = dataclasses.replace(config, resume=True)
    (again,) = tune_summary(session.plan(suite), resumed, lines.append, measure=fake).workloads
    assert len(fake.starts) == before  # nothing measured again
    assert again.winner.cell_id == first.winner.cell_id
    assert not any("another machine" in line for line in lines)


@pytest.mark.slow
def test_the_file_counts_its_tune_runs_and_an_ampsuite_run_resume_is_not_one(tmp_path: Path) -> None:
    """The header's "the last of N runs" counts tune runs: ``run.resumed`` also grows with ``ampsuite run
    --resume`` of the same file, which measures cells but runs no search."""

    def text() -> str:
        doc = results.load(config.output)
        return budget_text(TuneSummary.from_json(doc["run"]["tune"]), doc)

    suite, fake, config, _ = _first_tune(tmp_path)
    assert text() == "budget 10 min 0 s, used 10 s"
    tune_summary(session.plan(suite), dataclasses.replace(config, resume=True), lambda line: None, measure=fake)
    assert text() == "the last of 2 runs: budget 10 min 0 s, used 0 s"
    argv = ["run", str(suite), "-o", str(config.output), "--resume", "-k", "fp32", "--no-report", "--no-peaks"]
    assert main(argv) == 0
    assert len(results.load(config.output)["run"]["resumed"]) == 2
    assert text() == "the last of 2 runs: budget 10 min 0 s, used 0 s"
    tune_summary(session.plan(suite), dataclasses.replace(config, resume=True), lambda line: None, measure=fake)
    assert text() == "the last of 3 runs: budget 10 min 0 s, used 0 s"


def test_a_resumed_tune_measures_another_machines_records_again_before_holding_them_against_anything(
    tmp_path: Path,
) -> None:
    """The file's figures come from a machine 20% faster: held as they are against this machine's, they would
    win every comparison they enter. Each is measured again here, and the file as it was is kept aside."""
    suite, fake, config, first = _first_tune(tmp_path)
    elsewhere = _as_if_elsewhere(config.output, 1.2)
    fake.now, before = 0.0, len(fake.starts)
    lines: list[str] = []
    resumed = dataclasses.replace(config, resume=True)
    summary = tune_summary(session.plan(suite), resumed, lines.append, measure=fake)
    (again,) = summary.workloads
    assert len(fake.starts) > before
    assert any("measured on another machine (elsewhere)" in line for line in lines)
    doc = results.load(config.output)
    used = {s.cell_id for s in again.steps if s.cell_id} | {r.cell_id for r in again.ablation}
    for record in doc["cells"]:
        if record["id"] in used:
            assert record["machine"]["host"] != "elsewhere", record["id"]
    assert again.winner.combination == first.winner.combination
    assert again.winner.throughput == pytest.approx(first.winner.throughput)
    assert again.winner.throughput < elsewhere[first.winner.cell_id]["metrics"]["throughput"]
    assert list(config.output.parent.glob("results.*.json"))  # the file as it was, kept aside


def test_another_machines_record_the_budget_cannot_measure_again_is_not_used(tmp_path: Path) -> None:
    suite, fake, config, _ = _first_tune(tmp_path)
    _as_if_elsewhere(config.output, 1.2)
    fake.now = 0.0
    resumed = dataclasses.replace(config, resume=True, budget_seconds=0.5)  # less than one cell costs
    (again,) = tune_summary(session.plan(suite), resumed, lambda line: None, measure=fake).workloads
    assert again.winner is None
    assert again.reason == "the FP32 cell did not pass (not measured: the budget was spent)"
    # the file keeps every record it had: nothing measured is lost
    assert all(r["machine"]["host"] == "elsewhere" for r in results.load(config.output)["cells"])


@pytest.mark.parametrize(
    ("odd", "where"),
    [
        ("a summary", "run.tune: expected an object"),
        ({"workloads": [1, "x", None]}, "run.tune.workloads[0]: expected an object"),
        ("winner batch abc", "run.tune.workloads[0].winner.batch_size: expected an integer, got str 'abc'"),
    ],
)
def test_resume_over_a_file_whose_summary_no_reader_could_use_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], odd: Any, where: str
) -> None:
    """It ended in an internal error (exit 3) when the search read the file's last winner."""
    suite, _, config, _ = _first_tune(tmp_path)
    doc = results.load(config.output)
    if odd == "winner batch abc":
        doc["run"]["tune"]["workloads"][0]["winner"]["batch_size"] = "abc"
    else:
        doc["run"]["tune"] = odd
    results.ResultsWriter(config.output, doc)  # sealed: only its content is odd
    capsys.readouterr()
    code = main(["tune", str(suite), "--resume", "--report-dir", str(config.output.parent)])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE_ERROR and err.count("\n") == 1
    assert err.startswith(f"ampsuite: error: {config.output}: corrupt results file: {where}"), err


# -- the budget's estimates -------------------------------------------------------------------------------


def test_a_compile_measured_once_prices_every_candidate_that_compiles_and_no_other() -> None:
    """On an H200 a compiled screen takes 189 s, 157 of them its first step, and an eager one ~25 s: priced alike,
    every candidate would be estimated at 236 s and the tune would start none of them."""
    from ampsuite.tune.budget import ESTIMATE_MARGIN, Budget

    budget = Budget(600.0, clock=lambda: 0.0)
    key = ("resnet50", "screen")
    budget.record(key, 20.0, ("amp-fp16",), first_step_seconds=14.0)
    budget.record(key, 189.0, ("amp-fp16", "torch-compile"), first_step_seconds=157.0)
    rest = 189.0 - 157.0  # the largest cost beyond a first step
    assert budget.estimate(key, 2.0, ("amp-fp16", "fused-optimizer")) == pytest.approx((rest + 14.0) * ESTIMATE_MARGIN)
    compiled = (rest + 157.0) * ESTIMATE_MARGIN
    assert budget.estimate(key, 2.0, ("amp-fp16", "torch-compile", "channels-last")) == pytest.approx(compiled)
    assert budget.estimate(key, 2.0, ("amp-bf16", "torch-compile")) == pytest.approx(compiled)  # either dtype
    assert budget.estimate(key, 2.0, ()) == pytest.approx((rest + 14.0) * ESTIMATE_MARGIN)  # FP32 as AMP eager
    # Records without a first step (older callers, fakes) keep the largest wall as the estimate.
    plain = Budget(600.0, clock=lambda: 0.0)
    plain.record(key, 10.0)
    plain.record(key, 30.0, ("x",))
    assert plain.estimate(key, 2.0, ("y",)) == pytest.approx(30.0 * ESTIMATE_MARGIN)


def test_a_graph_compiled_earlier_in_this_run_is_priced_as_the_cheapest_first_step() -> None:
    """A full measurement of a screen compiled earlier finds its graph in the cache (12-18 s of first step on an
    H200, against 265 s cold); priced as a compile, a finalist at the end of the fp16 path is refused with 413 s
    left."""
    from ampsuite.tune.budget import ESTIMATE_MARGIN, Budget

    budget = Budget(600.0, clock=lambda: 0.0)
    screen, full = ("resnet50", "screen"), ("resnet50", "full")
    budget.record(screen, 20.0, ("amp-fp16",), first_step_seconds=11.0, graph="resnet50/amp-fp16/bs256")
    graph = "resnet50/amp-fp16+torch-compile/bs256"
    budget.record(screen, 275.0, ("amp-fp16", "torch-compile"), first_step_seconds=265.0, graph=graph)
    cold = budget.estimate(full, 2.0, ("amp-fp16", "torch-compile", "channels-last"), "resnet50/other/bs256")
    assert cold == pytest.approx((10.0 + 265.0) * ESTIMATE_MARGIN)  # another graph: a compile
    assert budget.estimate(full, 2.0, ("amp-fp16", "torch-compile"), graph) == pytest.approx(
        (10.0 + 11.0) * ESTIMATE_MARGIN
    )
    cached = (f"{graph} (compiled earlier in this run)", 11.0)
    assert budget.priced_by(full, ("amp-fp16", "torch-compile"), graph) == cached
    # Without a graph (older callers) a candidate is priced by its techniques, as before.
    assert budget.estimate(full, 2.0, ("amp-fp16", "torch-compile")) == pytest.approx((10.0 + 265.0) * ESTIMATE_MARGIN)


class CacheWorker(FakeWorker):
    """A compiled cell's first step takes 45 s, or 1 s when its graph (the cell id without the phase) was measured
    before; the rest of any cell 5 s."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        graph = cell.id.removesuffix("/screen")
        compiled = any(t == "torch-compile" for t, _ in cell.techniques)
        first = (1.0 if graph in self.graphs else 45.0) if compiled else 0.5
        self.graphs.add(graph)
        self.cost = first + 5.0
        record = super().__call__(cell, spec, timeout)
        if record["status"] == Status.PASSED:
            record["metrics"]["first_step_seconds"] = first
        return record

    graphs: set[str]


def test_a_finalist_whose_screen_compiled_its_graph_is_priced_without_a_compile(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(tune_suite(COMPILED))
    plan = session.plan(tmp_path / "s.toml")
    fake = CacheWorker(plan.registry, 1.0)
    fake.graphs = set()
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=250.0, clock=fake.clock)
    (toy,) = tune_summary(plan, config, lambda line: None, measure=fake).workloads
    finals = {s.combination: s.decision for s in toy.steps if s.phase is Phase.FINAL}
    # Priced as a compile, the paths' ends would be left out and a slower recipe win. (The bf16 path starts from the
    # fp16 path's companions, as fast: the tie goes to the recipe without a loss scale.)
    assert finals["amp-fp16+fused-optimizer+torch-compile"] is Decision.TRUSTED
    assert finals["amp-bf16+fused-optimizer+torch-compile"] is Decision.TRUSTED
    assert toy.winner.combination == "amp-bf16+fused-optimizer+torch-compile"


def test_the_searchs_compiles_price_the_ablations_rows_fp32_included() -> None:
    """Priced from no cell at all (no ablation cell run yet, and no FP32 compile), the ablation's first row, FP32 +
    compile + channels-last + fused SGD, starts on an H200 with 125 s left and is cut by the budget during its
    compile, and the eager row after it never starts."""
    from ampsuite.tune.budget import ESTIMATE_MARGIN, Budget

    now = [0.0]
    budget = Budget(442.0, clock=lambda: now[0])
    screen, full = ("resnet50", "screen"), ("resnet50", "full")
    budget.record(screen, 30.0, ("amp-fp16", "torch-compile", "fused-optimizer"), first_step_seconds=13.1)
    budget.record(screen, 108.8, ("amp-bf16", "torch-compile"), first_step_seconds=91.7)
    budget.record(screen, 10.2, ("amp-bf16", "fused-optimizer"), first_step_seconds=3.7)
    winner = ("amp-fp16", "torch-compile", "fused-optimizer", "channels-last")
    budget.record(full, 18.0, winner, first_step_seconds=11.1)
    now[0] = 442.0 - 125.2
    ablation = ("resnet50", "ablation")
    fp32 = budget.estimate(ablation, 2.0, ("torch-compile", "fused-optimizer", "channels-last"))
    assert fp32 == pytest.approx((108.8 - 91.7 + 91.7) * ESTIMATE_MARGIN) and not budget.fits(fp32)
    eager = budget.estimate(ablation, 2.0, ("amp-fp16", "fused-optimizer", "channels-last"))
    assert eager == pytest.approx((108.8 - 91.7 + 3.7) * ESTIMATE_MARGIN) and budget.fits(eager)
    # A refusal names the cell whose first step it charged.
    compiled = ("torch-compile", "fused-optimizer", "channels-last")
    assert budget.priced_by(ablation, compiled) == ("amp-bf16+torch-compile", pytest.approx(91.7))
    assert budget.priced_by(ablation, ("amp-fp16", "fused-optimizer")) == ("amp-bf16+fused-optimizer", 3.7)
    assert budget.priced_by(ablation, ("amp-fp16",)) is None and budget.priced_by(("bert", "screen"), compiled) is None
    # A phase once measured prices its rest from its own cells: a screen is shorter than a full measurement.
    assert budget.estimate(full, 2.0, ("amp-fp16",)) == pytest.approx((18.0 - 11.1) * ESTIMATE_MARGIN)
    # Another workload is priced from nothing of this one's.
    assert budget.estimate(("bert", "screen"), 2.0, ("torch-compile",)) == pytest.approx(2.0 * ESTIMATE_MARGIN + 1.0)


class FullCostWorker(FakeWorker):
    """A screen takes 1 s, a full measurement 20 s."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        self.cost = 1.0 if cell.id.endswith("/screen") else 20.0
        return super().__call__(cell, spec, timeout)


def test_a_resumed_search_out_of_budget_still_chooses_among_the_full_records_it_holds(tmp_path: Path) -> None:
    suite, fake, config, first = _then_noop(tmp_path, FullCostWorker, 5000.0)
    # noop joined the space, and the next call's budget pays for its screens, not for the new path's end.
    fake.now = 0.0
    resumed = dataclasses.replace(config, resume=True, budget_seconds=12.0, clock=fake.clock)
    (toy,) = tune_summary(session.plan(suite), resumed, lambda line: None, measure=fake).workloads
    finals = {s.combination: s.decision for s in toy.steps if s.phase is Phase.FINAL}
    # The file's winner is a finalist again (the bf16 path's head start passed it by), its full record at hand, free;
    # the file's other full records stand in for the finalists the budget left out, free...
    assert finals[first.winner.combination] is Decision.TRUSTED
    assert finals["amp-fp16+fused-optimizer"] is Decision.STOOD_IN
    assert toy.winner.cell_id == first.winner.cell_id  # ...and it wins: not a slower one the file held
    # With the budget for its finalists, the search measures them and nothing stands in.
    fake.now = 0.0
    funded = dataclasses.replace(resumed, budget_seconds=5000.0)
    (full,) = tune_summary(session.plan(suite), funded, lambda line: None, fake).workloads
    assert all(s.decision is not Decision.STOOD_IN for s in full.steps)


def test_first_steps_of_an_earlier_run_price_this_runs_candidates_and_nothing_else() -> None:
    """Priced without a compile (no cell of the call has compiled a subset of it) although the file holds
    amp-fp16 + torch-compile's 157 s first step, the ablation's fp16 + compile + channels-last starts on an H200
    with 131 or 92 s left and the budget cuts it."""
    from ampsuite.tune.budget import ESTIMATE_MARGIN, Budget

    budget = Budget(131.0, clock=lambda: 0.0)
    budget.learn("resnet50", ("amp-fp16", "torch-compile"), 156.8)
    budget.learn("resnet50", ("amp-fp16", "fused-optimizer", "channels-last"), 4.0)
    ablation = ("resnet50", "ablation")
    candidate = ("amp-fp16", "torch-compile", "channels-last")
    # Before this run has measured a cell: the measurement's own seconds, start-up, and the earlier compile.
    assert budget.estimate(ablation, 2.0, candidate) == pytest.approx((2.0 + 156.8) * ESTIMATE_MARGIN + 6.0)
    assert not budget.fits(budget.estimate(ablation, 2.0, candidate))
    assert budget.priced_by(ablation, candidate) == ("amp-fp16+torch-compile (an earlier run)", 156.8)
    # The rest of a cell is this run's own: an earlier record's wall says nothing of it.
    budget.record(ablation, 10.1, ("amp-fp16", "fused-optimizer", "channels-last"), first_step_seconds=4.0)
    assert budget.estimate(ablation, 2.0, candidate) == pytest.approx((10.1 - 4.0 + 156.8) * ESTIMATE_MARGIN)
    assert budget.estimate(ablation, 2.0, ("amp-fp16",)) == pytest.approx((10.1 - 4.0) * ESTIMATE_MARGIN)
    assert budget.estimate(("bert", "screen"), 2.0, candidate) == pytest.approx(2.0 * ESTIMATE_MARGIN + 1.0)


class CompileWorker(FakeWorker):
    """A compiled cell takes 50 s, 45 of them its first step; any other 1 s."""

    def __call__(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        compiled = any(t == "torch-compile" for t, _ in cell.techniques)
        self.cost = 50.0 if compiled else 1.0
        record = super().__call__(cell, spec, timeout)
        if record["status"] == Status.PASSED:
            record["metrics"]["first_step_seconds"] = 45.0 if compiled else 0.5
        return record


def test_a_resumed_tune_prices_its_compiles_from_the_files_first_steps(tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text(tune_suite(COMPILED), encoding="utf-8")
    fake = CompileWorker(session.plan(suite).registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=5000.0, clock=fake.clock)
    tune_summary(session.plan(suite), config, lambda line: None, measure=fake)
    # A technique joins the space; the next call has less than a compile's time.
    suite.write_text(tune_suite({**COMPILED, "noop": ["noop"]}), encoding="utf-8")
    fake.starts, lines = [], []
    resumed = dataclasses.replace(config, resume=True, budget_seconds=45.0, clock=fake.clock)
    fake.now = 0.0
    tune_summary(session.plan(suite), resumed, lines.append, measure=fake)
    started = [c for c in results.load(config.output)["cells"] if "noop" in c["combination"]]
    assert started and all("torch-compile" not in c["combination"] for c in started)  # the eager screens ran...
    refused = [line for line in lines if "torch-compile+noop not started" in line]
    assert refused and "priced as that of " in refused[0] and "(an earlier run), 45.0 s" in refused[0]  # ...no compile


def test_a_technique_that_requires_another_waits_in_the_pool_and_leaves_the_ablation_with_it(tmp_path: Path) -> None:
    # A technique that requires torch-compile, pruned from the pool at the first greedy step where no path had
    # compiled yet, would never be tried on a compiled step (an H200 tune of ResNet-50 lost one so).
    more = {**COMPILED, "pooled": ["amp-bf16", "torch-compile", "needs-compile"], "graphs": ["amp-bf16", "cuda-graphs"]}
    (tmp_path / "s.toml").write_text(tune_suite(more), encoding="utf-8")
    plan = session.plan(tmp_path / "s.toml", objects=NEEDS_COMPILE)
    fake = FakeWorker(plan.registry, 1.0)
    config = TuneConfig(output=tmp_path / "out" / "results.json", budget_seconds=600.0, clock=fake.clock)
    summary = tune_summary(plan, config, lambda line: None, measure=fake)
    (toy,) = summary.workloads
    assert "needs-compile" in toy.winner.techniques
    pooled = [s for s in toy.steps if "needs-compile" in s.combination]
    assert pooled and all("torch-compile" in s.combination for s in pooled)  # never a skipped cell without it
    # A device requirement is no technique to wait for: cuda-graphs is tried, and expansion skips it on a CPU.
    graphs = [s for s in toy.steps if "cuda-graphs" in s.combination]
    assert graphs and graphs[0].status == Status.SKIPPED
    (row,) = [r for r in toy.ablation if r.removed == "torch-compile"]
    assert "needs-compile" not in row.techniques and row.status == Status.PASSED
    assert row.label == "without torch-compile (and needs-compile, which requires it)"
