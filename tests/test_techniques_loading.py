"""pinned-loading and pageable-loading: the same batches as the workload's pool, through a DataLoader."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import torch
from steps import skip_reason, use

from ampsuite import Batch, BuildContext, SkipCell, TrainStep
from ampsuite.plugins.techniques import _loading, loading
from ampsuite.plugins.workloads import _toy, toy
from ampsuite.spec.options import build_options


def toy_step(tmp_path: Any, device: str = "cpu", batch_size: int = 4) -> TrainStep:
    opts = toy.ToyOptions(features=6, hidden=8, layers=1, classes=3)
    return _toy.build(opts, BuildContext(torch.device(device), batch_size, 0, str(tmp_path)))


def take(step: TrainStep, n: int) -> list[Batch]:
    return [step.data() for _ in range(n)]


def assert_same_batches(got: list[Batch], expected: list[Batch]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert len(g.inputs) == len(e.inputs)
        for a, b in zip(g.inputs, e.inputs, strict=True):
            assert torch.equal(a.cpu(), b.cpu())
        assert g.target is not None and e.target is not None
        assert torch.equal(g.target.cpu(), e.target.cpu())


# toy's dataset is 4 batches long: 10 steps cross two epoch boundaries.
STEPS = 10


def test_pageable_loading_feeds_exactly_the_pool_batches_across_epochs(tmp_path: Any) -> None:
    expected = take(toy_step(tmp_path), STEPS)
    step = use(toy_step(tmp_path), "pageable-loading")
    assert isinstance(step.data, _loading.LoaderData)
    assert_same_batches(take(step, STEPS), expected)
    assert step.data.epochs == 2
    assert step.notes["loading"] == {
        "loader": "pageable",
        "pin_memory": False,
        "non_blocking": False,
        "num_workers": 0,
        "prefetch_factor": None,
        "start_method": multiprocessing.get_start_method(),
        "batches_per_epoch": 4,
        "sampler": "endless",
    }


def test_worker_loading_crosses_epochs_without_restarting_its_prefetch(tmp_path: Any) -> None:
    # A loader restarted at each epoch's end drains its workers' prefetch queue there; with 4 batches an
    # epoch every 4th timed step would wait for a whole batch. One endless epoch: one iterator throughout.
    step = use(toy_step(tmp_path), "pageable-loading", num_workers=2, prefetch_factor=2)
    iterator = step.data._iterator
    take(step, STEPS)
    assert step.data._iterator is iterator
    assert step.data.epochs == 2


def test_pageable_loading_with_worker_processes_feeds_the_same_batches(tmp_path: Any) -> None:
    expected = take(toy_step(tmp_path), STEPS)
    step = use(toy_step(tmp_path), "pageable-loading", num_workers=2, prefetch_factor=1)
    assert_same_batches(take(step, STEPS), expected)
    assert step.notes["loading"]["num_workers"] == 2


def test_the_loading_step_still_trains(tmp_path: Any) -> None:
    reference = toy_step(tmp_path)
    run = reference.compose()
    expected = [float(run(reference.data())) for _ in range(6)]
    step = use(toy_step(tmp_path), "pageable-loading")
    run = step.compose()
    assert [float(run(step.data())) for _ in range(6)] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name", ["pinned-loading", "pageable-loading"])
def test_loading_needs_a_data_path(name: str) -> None:
    assert (
        skip_reason("gemm", name, device="cuda") == f"{name} needs a workload with trait 'data-path'; 'gemm' has none"
    )
    assert skip_reason("toy", name, device="cuda") is None


@pytest.mark.parametrize("name", ["pinned-loading", "pageable-loading"])
def test_loading_skips_a_step_without_a_dataset(tmp_path: Any, name: str) -> None:
    step = toy_step(tmp_path)
    step.dataset = None
    if name == "pinned-loading":
        step.device = torch.device("cuda")  # get past the device check without touching CUDA
    with pytest.raises(SkipCell, match="needs a host dataset"):
        use(step, name)


def test_pinned_loading_is_meaningless_on_cpu(tmp_path: Any) -> None:
    assert skip_reason("toy", "pinned-loading") == (
        "pinned-loading: pinned memory only speeds up host-to-GPU copies; this run is on cpu"
    )
    with pytest.raises(SkipCell, match="pinned memory only speeds up host-to-GPU copies"):
        use(toy_step(tmp_path), "pinned-loading")


def test_a_dataset_smaller_than_one_batch_is_a_skip(tmp_path: Any) -> None:
    step = toy_step(tmp_path)
    step.batch_size = 1000
    with pytest.raises(SkipCell, match="fewer than one batch of 1000"):
        use(step, "pageable-loading")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_workers": -1}, "num_workers: expected an integer >= 0, got -1"),
        ({"prefetch_factor": 0}, "prefetch_factor: expected an integer >= 1, got 0"),
        ({"start_method": "thread"}, "start_method: expected one of '', 'fork', 'spawn', 'forkserver', got 'thread'"),
    ],
)
def test_loading_options_are_validated(options: dict[str, Any], message: str) -> None:
    for options_type in (loading.LoadingOptions, loading.PageableOptions):
        with pytest.raises(ValueError, match=f"^{message}$"):
            build_options(options_type, options)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_loading_feeds_pinned_batches_with_asynchronous_copies(tmp_path: Any) -> None:
    expected = take(toy_step(tmp_path, "cuda"), STEPS)
    step = toy_step(tmp_path, "cuda")
    collate = step.collate
    assert collate is not None
    pinned: list[bool] = []

    def recording_collate(item: Any) -> Batch:
        batch = collate(item)
        pinned.append(all(t.is_pinned() for t in (*batch.inputs, batch.target) if t is not None))
        return batch

    step.collate = recording_collate
    step = use(step, "pinned-loading", num_workers=2)
    got = take(step, STEPS)
    torch.cuda.synchronize()
    assert all(t.device.type == "cuda" for b in got for t in b.inputs)
    assert_same_batches(got, expected)
    assert pinned == [True] * STEPS
    assert step.notes["loading"]["loader"] == "pinned" and step.notes["loading"]["non_blocking"] is True
