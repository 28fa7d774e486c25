"""The lstm-lm workload, through ampsuite's pytest plugin (fixtures ampsuite_run, ampsuite_registry)."""

from __future__ import annotations

import math

import pytest
import torch
from ampsuite import BuildContext
from ampsuite.testing import SuiteFileError

from ampsuite_extras import _lstm, lstm

SMALL = {"vocab": 32, "hidden": 16, "layers": 2, "seq_len": 12}


def test_registered_with_its_unit_and_options(ampsuite_registry):
    registry = ampsuite_registry(plugins=[lstm])
    record = registry.workloads["lstm-lm"]
    assert record.unit == "tokens"
    assert record.options is lstm.LstmOptions
    assert registry.plugin_of("workload", "lstm-lm").module == "ampsuite_extras.lstm"


def test_fp32_and_bf16_cells_pass_and_count_tokens(ampsuite_run):
    result = ampsuite_run(
        {
            "workloads": {"lstm": {"plugin": "lstm-lm", "batch_size": 4, **SMALL}},
            "combinations": {"fp32": [], "bf16": ["amp-bf16"]},
        },
        plugins=[lstm],
    )
    result.assert_all_passed()
    for cell in ("lstm/fp32/bs4", "lstm/bf16/bs4"):
        record = result.record(cell)
        assert record["workload"]["unit"] == "tokens"
        assert result.metrics(cell)["samples_per_step"] == 4 * SMALL["seq_len"]
        assert result.metrics(cell)["throughput"] > 0
        assert all(loss is not None and math.isfinite(loss) for loss in result.numerics(cell)["losses"])


def test_the_synthetic_stream_is_learnable():
    options = lstm.LstmOptions(vocab=16, hidden=32, layers=1, seq_len=16, lr=1e-2)
    step = _lstm.build(options, BuildContext(torch.device("cpu"), batch_size=8, seed=0, data_dir=""))
    run = step.compose()
    first = float(run(step.data()))
    for _ in range(60):
        last = float(run(step.data()))
    assert first == pytest.approx(math.log(16), rel=0.2)  # an untrained model guesses uniformly
    assert last < 0.6 * first


def test_the_host_dataset_matches_the_device_batches():
    options = lstm.LstmOptions(**SMALL)
    step = _lstm.build(options, BuildContext(torch.device("cpu"), batch_size=4, seed=3, data_dir=""))
    assert step.dataset is not None and step.collate is not None
    inputs, target = step.dataset[0]
    assert torch.equal(inputs[1:], target[:-1])  # targets are the inputs shifted by one token
    first = step.data()
    assert torch.equal(first.inputs[0][0], inputs)


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("vocab", 1, "an integer >= 2"),
        ("hidden", 0, "an integer >= 1"),
        ("layers", 0, "an integer >= 1"),
        ("seq_len", 0, "an integer >= 1"),
        ("dropout", 1.0, "a number >= 0 and < 1"),
        ("lr", 0.0, "a number > 0"),
    ],
)
def test_a_bad_option_in_a_suite_is_reported_with_its_key(ampsuite_run, option, value, expected):
    suite = {"workloads": {"lstm": {"plugin": "lstm-lm", "batch_size": 2, option: value}}}
    with pytest.raises(SuiteFileError, match=rf"workloads\.lstm\.{option}: expected {expected}, got {value!r}$"):
        ampsuite_run(suite, plugins=[lstm])
