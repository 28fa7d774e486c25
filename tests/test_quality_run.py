"""The CPU quality suite run as CI runs it: real data, three seeds per cell in worker processes, and the verdicts.

tests/cpu/quality.toml, plus one recipe that diverges (the fault plugin's NaN after 40 healthy steps), through
``ampsuite run`` and ``ampsuite show``: bf16 trains as well as FP32, bfloat16 weights without FP32 masters
train worse, the NaN recipe diverges, and the results file, the terminal and the report say so with the
numbers behind each verdict.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ampsuite import cli, results
from ampsuite.spec.tomltext import toml_lines

SUITE = Path(__file__).resolve().parent / "cpu" / "quality.toml"
BUDGET_SECONDS = 120


@pytest.fixture(scope="module")
def quality_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], float]:
    root = tmp_path_factory.mktemp("quality")
    data = tomllib.loads(SUITE.read_text(encoding="utf-8"))
    data["combinations"]["nan"] = ["fault-nan"]
    data["combination_options"]["nan"] = {"fault-nan": {"after_steps": 40}}
    data["exclude"].append({"workload": "digits", "combination": "nan"})
    suite = root / "quality.toml"
    suite.write_text("\n".join(toml_lines(data)) + "\n", encoding="utf-8")
    out = root / "results.json"
    start = time.perf_counter()
    # As the suite's header runs it: no second pass for untrusted speed figures, which retimes cells, trains none.
    argv = ["run", str(suite), "--no-peaks", "--no-again", "-o", str(out), "--report-dir", str(root / "report")]
    code = cli.main(argv)
    seconds = time.perf_counter() - start
    assert code == 0
    return root, results.load(out), seconds


@pytest.mark.slow
def test_the_cpu_quality_suite_judges_each_recipe(quality_run: tuple[Path, dict[str, Any], float]) -> None:
    _, doc, seconds = quality_run
    verdicts = {v["cell"]: v for v in doc["run"]["quality"]["verdicts"]}
    assert {cell: v["verdict"] for cell, v in verdicts.items()} == {
        "lm/fp32/bs16": "reference",
        "lm/bf16/bs16": "same quality",
        "lm/bf16-no-masters/bs16": "worse",
        "lm/nan/bs16": "diverged",
        "digits/fp32/bs32": "reference",
        "digits/bf16/bs32": "same quality",
    }
    worse = verdicts["lm/bf16-no-masters/bs16"]
    assert worse["reference"] == "lm/fp32/bs16" and worse["p"] < 0.05 and worse["rel_diff"] > 0.0025
    assert seconds < BUDGET_SECONDS, f"the CPU quality suite took {seconds:.0f} s"


@pytest.mark.slow
def test_each_cell_holds_every_seeds_training_and_its_speed(quality_run: tuple[Path, dict[str, Any], float]) -> None:
    _, doc, _ = quality_run
    cells = {r["id"]: r for r in doc["cells"]}
    fp32 = cells["lm/fp32/bs16"]
    runs = fp32["quality"]["runs"]
    assert [r["seed"] for r in runs] == [0, 1, 2] and len(fp32["metrics"]["step_time"]["processes"]) == 3
    curve = runs[0]["curve"]
    assert curve["steps"] == list(range(25, 201, 25)) and curve["eval_loss"][-1] < curve["eval_loss"][0]
    assert all(r["time_to_target"] is not None and r["steps_to_target"] <= 200 for r in runs)
    assert fp32["notes"]["data"]["name"] == "python-stdlib" and fp32["metrics"]["throughput"] > 0
    digits = cells["digits/fp32/bs32"]["quality"]["runs"][0]
    assert digits["final_eval_accuracy"] > 0.8 and cells["digits/fp32/bs32"]["notes"]["data"]["splits"]["eval"]
    nan = cells["lm/nan/bs16"]["quality"]["runs"]
    assert all(r["final_eval_loss"] is None and r["diverged_step"] == 50 for r in nan)


@pytest.mark.slow
def test_show_and_the_report_give_the_verdicts(
    quality_run: tuple[Path, dict[str, Any], float], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _, _ = quality_run
    capsys.readouterr()
    assert cli.main(["show", str(root / "results.json")]) == 0
    shown = capsys.readouterr().out
    assert "one-sided Welch t-test at p = 0.05" in shown
    line = next(ln for ln in shown.splitlines() if ln.strip().startswith("lm/bf16-no-masters/bs16"))
    assert line.split()[1] == "worse" and "p = " in line and "vs " in line
    page = (root / "report" / "quality.html").read_text(encoding="utf-8")
    assert "verdict-worse" in page and "verdict-diverged" in page and "<svg" in page
    assert "| lm/nan/bs16 | diverged |" in (root / "report" / "summary.md").read_text(encoding="utf-8")
