"""The extras-checkpointing technique, through ampsuite's pytest plugin."""

from __future__ import annotations

import pytest
import torch
from ampsuite import Batch, BuildContext, TrainStep, Workload, hookimpl
from ampsuite.testing import SuiteFileError
from torch import nn

from ampsuite_extras import _checkpointing, _lstm, checkpointing, lstm

PLUGINS = [lstm, checkpointing]
LSTM = {"plugin": "lstm-lm", "batch_size": 4, "vocab": 32, "hidden": 16, "layers": 3, "seq_len": 8}
CKPT = "extras-checkpointing"


def test_lstm_cells_checkpoint_their_blocks_without_changing_the_losses(ampsuite_run):
    result = ampsuite_run({"workloads": {"lstm": LSTM}, "combinations": {"fp32": [], "ckpt": [CKPT]}}, plugins=PLUGINS)
    result.assert_all_passed()
    notes = result.notes("lstm/ckpt/bs4")["extras_checkpointing"]
    assert notes["checkpointed"] == ["blocks.0", "blocks.1", "blocks.2"]
    assert notes["blocks"] == 3
    assert "extras_checkpointing" not in result.notes("lstm/fp32/bs4")
    # Recomputation replays the same forward: same seed, same data, same losses.
    plain, ckpt = result.numerics("lstm/fp32/bs4")["losses"], result.numerics("lstm/ckpt/bs4")["losses"]
    assert ckpt == pytest.approx(plain, rel=1e-5, abs=1e-6)
    # The report section compares the checkpointed cell with the same cell without it.
    (section,) = checkpointing.ampsuite_report_sections([result.doc])
    assert section.title == "Activation checkpointing (extras)"
    assert "lstm/ckpt/bs4" in section.html and "lstm/fp32/bs4" in section.html
    assert "3 of 3 blocks" in section.markdown


def test_no_report_section_without_checkpointed_cells():
    assert list(checkpointing.ampsuite_report_sections([{"cells": []}])) == []


def test_every_nth_block_and_the_attribute_option(ampsuite_run):
    result = ampsuite_run(
        {
            "workloads": {"lstm": LSTM},
            "combinations": {"ckpt": [CKPT]},
            "techniques": {CKPT: {"every": 2}},
        },
        plugins=PLUGINS,
    )
    result.assert_all_passed()
    assert result.notes("lstm/ckpt/bs4")["extras_checkpointing"]["checkpointed"] == ["blocks.0", "blocks.2"]


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("attribute", "blocks..0", r"a string matching .*, got 'blocks\.\.0'"),
        ("attribute", "", r"a string matching .*, got ''"),
        ("every", 0, "an integer >= 1, got 0"),
    ],
)
def test_a_bad_option_is_refused_with_its_key(ampsuite_run, option, value, expected):
    suite = {"workloads": {"lstm": LSTM}, "combinations": {"ckpt": [CKPT]}, "techniques": {CKPT: {option: value}}}
    with pytest.raises(SuiteFileError, match=rf"techniques\.{CKPT}\.{option}: expected {expected}$"):
        ampsuite_run(suite, plugins=PLUGINS)


def test_a_model_without_blocks_is_skipped_with_the_reason(ampsuite_run):
    # The built-in toy MLP is a plain nn.Sequential: nothing at model.blocks.
    result = ampsuite_run(
        {"workloads": {"toy": {"batch_size": 4}}, "combinations": {"fp32": [], "ckpt": [CKPT]}}, plugins=PLUGINS
    )
    result.assert_status("toy/fp32/*", "passed")
    result.assert_status("toy/ckpt/*", "skipped", reason=r"no blocks at model\.blocks")


def _blocky_build(options, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    model = nn.Module()
    model.blocks = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4))
    model.forward = model.blocks.forward  # type: ignore[method-assign]
    batch = Batch((torch.randn(ctx.batch_size, 8),), torch.randint(0, 4, (ctx.batch_size,)))
    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size,
        data=lambda: batch,
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.CrossEntropyLoss(),
    )


class BlockyPlugin:
    """A throw-away workload whose blocks are an nn.Sequential, registered for one test."""

    @hookimpl
    def ampsuite_workloads(self):
        return [Workload(name="blocky", summary="three blocks", build=_blocky_build, traits=frozenset({"model"}))]


class NoModelPlugin:
    """A workload that builds its own step and has no model (like a raw GEMM)."""

    @hookimpl
    def ampsuite_workloads(self):
        def build(options, ctx):
            x = torch.ones(2, 2, requires_grad=True)
            return TrainStep(
                device=ctx.device,
                batch_size=ctx.batch_size,
                samples_per_step=1,
                data=lambda: Batch(()),
                forward_backward=lambda batch: (x @ x).sum(),
                update=lambda: None,
            )

        return [Workload(name="no-model", summary="a kernel", build=build)]


def test_any_sequential_of_blocks_works(ampsuite_plugin, ampsuite_run):
    ampsuite_plugin(BlockyPlugin())
    result = ampsuite_run(
        {"workloads": {"blocky": {"batch_size": 4}}, "combinations": {"ckpt": [CKPT]}}, plugins=PLUGINS
    )
    result.assert_all_passed()
    assert result.notes("blocky/ckpt/bs4")["extras_checkpointing"]["checkpointed"] == [
        "blocks.0",
        "blocks.1",
        "blocks.2",
    ]


def test_a_workload_without_a_model_is_skipped_before_any_worker(ampsuite_plugin, ampsuite_run):
    ampsuite_plugin(NoModelPlugin())
    result = ampsuite_run(
        {"workloads": {"kernel": {"plugin": "no-model", "batch_size": 1}}, "combinations": {"ckpt": [CKPT]}},
        plugins=PLUGINS,
    )
    result.assert_status(
        "kernel/ckpt/bs1",
        "skipped",
        reason="extras-checkpointing needs a workload with trait 'model'; 'no-model' has none",
    )
    assert "phase" not in result.evidence("kernel/ckpt/bs1")  # decided at expansion, not in a worker


def test_the_backward_pass_recomputes_each_checkpointed_block():
    step = _lstm.build(
        lstm.LstmOptions(vocab=16, hidden=8, layers=2, seq_len=4), BuildContext(torch.device("cpu"), 2, 0, "")
    )
    step = _checkpointing.apply(step, checkpointing.CheckpointOptions(every=2))
    calls = {0: 0, 1: 0}
    for index, block in enumerate(step.model.blocks):
        inner = block.block if isinstance(block, _checkpointing.Checkpointed) else block
        # A pre-hook: recomputation stops as soon as backward has what it needs,
        # so a block's forward may not return the second time.
        inner.register_forward_pre_hook(lambda module, args, index=index: calls.__setitem__(index, calls[index] + 1))
    step.compose()(step.data())
    assert calls == {0: 2, 1: 1}  # block 0 ran again in backward; block 1 kept its activations


def test_parameters_stay_the_same_objects_for_the_optimizer():
    step = _lstm.build(
        lstm.LstmOptions(vocab=16, hidden=8, layers=2, seq_len=4), BuildContext(torch.device("cpu"), 2, 0, "")
    )
    before = {id(p) for p in step.model.parameters()}
    _checkpointing.apply(step, checkpointing.CheckpointOptions())
    assert {id(p) for p in step.model.parameters()} == before
    assert {id(p) for group in step.optimizer.param_groups for p in group["params"]} == before


def test_the_cells_run_in_isolated_workers_too(ampsuite_run):
    result = ampsuite_run(
        {"workloads": {"lstm": {**LSTM, "layers": 1}}, "combinations": {"ckpt": [CKPT]}}, plugins=PLUGINS, isolated=True
    )
    result.assert_all_passed()
    assert result.notes("lstm/ckpt/bs4")["extras_checkpointing"]["checkpointed"] == ["blocks.0"]
