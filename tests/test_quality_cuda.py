"""Quality runs on CUDA: the pinned DataLoader with worker processes, evaluation under each precision recipe, and
the verdicts, on a short budget (one H100: 236 s for the ten cells, two seeds each). Skipped without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampsuite.testing import run_suite

pytestmark = [pytest.mark.cuda, pytest.mark.slow]

SUITE = {
    "suite": {"name": "quality-cuda", "device": "cuda", "timeout": 300},
    "workloads": {
        "lm": {"workload": "llm", "preset": "tiny", "data": "stdlib", "batch_size": 32, "lr": 1e-3},
        "digits": {
            "workload": "resnet",
            "source": "digits",
            "depth": 18,
            "width": 16,
            "image_size": 8,
            "stem": "small",
            "classes": 10,
            "batch_size": 64,
        },
    },
    "combinations": {
        "fp32": [],
        "bf16": ["amp-bf16"],
        "fp16": ["amp-fp16"],
        "bf16-o2": ["half-weights"],
        "bf16-compiled": ["amp-bf16", "torch-compile"],
    },
    "combination_options": {"bf16-o2": {"half-weights": {"dtype": "bfloat16"}}},
    "quality": {"steps": 120, "eval_every": 40, "eval_batches": 4, "seeds": 2, "targets": {"lm": 3.0}},
}


@pytest.fixture(scope="module")
def cuda_quality(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return run_suite(SUITE, Path(tmp_path_factory.mktemp("quality-cuda")), isolated=True, device="cuda").doc


def test_every_recipe_trains_its_seeds_through_the_pinned_loader(cuda_quality: dict) -> None:
    for record in cuda_quality["cells"]:
        assert record["status"] == "passed", (record["id"], record.get("evidence"))
        runs = record["quality"]["runs"]
        assert [r["seed"] for r in runs] == [0, 1] and all(r["final_eval_loss"] is not None for r in runs)
        assert runs[0]["curve"]["steps"] == [40, 80, 120]
        assert runs[0]["curve"]["eval_loss"][-1] < runs[0]["curve"]["eval_loss"][0], record["id"]


def test_each_recipe_gets_a_verdict_against_fp32(cuda_quality: dict) -> None:
    from ampsuite.analysis import quality_verdicts

    verdicts = quality_verdicts(cuda_quality)
    assert len(verdicts) == len(cuda_quality["cells"])
    for cell, verdict in verdicts.items():
        expected = {"reference"} if "/fp32/" in cell else {"same quality", "worse"}
        assert verdict.verdict in expected, (cell, verdict.reason)
