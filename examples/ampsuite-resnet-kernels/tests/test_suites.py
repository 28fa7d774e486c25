"""The package's GPU suites load, and on a CUDA device every cell of theirs would run (expanded here without one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ampsuite.spec import matrix, suitefile
from ampsuite.testing import load_plugins

from ampsuite_resnet_kernels import cudnn_batch_norm, maxpool_offsets, persistent_batch_norm, stem_pad

SUITES = sorted((Path(__file__).resolve().parents[1] / "suites").glob("*.toml"))


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.name)
def test_every_cell_of_the_suite_runs_on_a_cuda_device(path: Path) -> None:
    registry = load_plugins(plugins=[stem_pad, maxpool_offsets, persistent_batch_norm, cudnn_batch_norm])
    cells = matrix.expand(suitefile.load(path), registry, "cuda")
    assert len(cells) > 1 and {c.id: c.skip_reason for c in cells if c.skip_reason} == {}
    names = {name for cell in cells for name in cell.technique_names}
    assert names & {"stem-pad", "maxpool-offsets", "persistent-batch-norm", "cudnn-batch-norm"}


def test_there_are_suites() -> None:
    assert [p.name for p in SUITES] == ["resnet50-cudnn-bn.toml", "resnet50-stack.toml"]
