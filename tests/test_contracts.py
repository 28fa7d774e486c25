"""A plugin that breaks its contract ends as a failed record naming it, in a worker and in-process alike.

The plugin (tests/contract_breakers.py) runs in real worker processes: what it
returns is checked at the boundary where it crosses into ampsuite (build,
apply, the first call of each step phase, the result the worker sends), and
each fault becomes one line naming the plugin, the hook, what was expected and
what came, instead of an AttributeError deep inside the worker or a worker
that dies with its result.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import TOY, toy_suite

from ampsuite import cli, results

SUITE = toy_suite(
    "contracts",
    timeout=120,
    workloads={"tuple": {"plugin": "tuple-build", **TOY}},
    combinations={
        "fp32": [],
        "apply-nothing": ["apply-nothing"],
        "no-loss": ["no-loss"],
        "tensor-note": ["tensor-note"],
    },
)

EXPECTED = {
    "tuple/fp32/bs8": (
        "PluginContractError",
        "plugin 'tuple-build': build returned a tuple, expected a TrainStep",
        "build",
    ),
    "toy/apply-nothing/bs8": (
        "PluginContractError",
        "plugin 'apply-nothing': apply returned None, expected a TrainStep",
        "apply apply-nothing",
    ),
    "toy/no-loss/bs8": (
        "PluginContractError",
        "plugin 'toy with no-loss': step phase forward_backward returned None, expected a loss tensor (torch.Tensor)",
        "numerics",
    ),
}
TENSOR = "malformed result from worker: notes.scale: a Tensor is not JSON data"


@pytest.fixture(scope="module", params=["worker", "in-process"])
def records(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("contracts")
    path = root / "suite.toml"
    path.write_text(SUITE)
    out = root / "results.json"
    args = ["run", str(path), "-o", str(out), "--no-report", "--no-peaks", "-p", "contract_breakers"]
    code = cli.main(args + (["--in-process"] if request.param == "in-process" else []))
    assert code == 1
    return {r["id"]: r for r in results.load(out)["cells"]}


@pytest.mark.slow
def test_the_healthy_cell_passes(records) -> None:
    assert records["toy/fp32/bs8"]["status"] == "passed"


@pytest.mark.parametrize("cell", sorted(EXPECTED))
def test_a_broken_contract_is_a_failed_record_naming_plugin_hook_and_what_came(records, cell: str) -> None:
    record = records[cell]
    assert record["status"] == "failed", record["evidence"]
    ev = record["evidence"]
    assert (ev["type"], ev["message"], ev["phase"]) == EXPECTED[cell]


def test_a_tensor_in_the_notes_is_a_malformed_result(records) -> None:
    """Isolated, the tensor used to travel through torch's shared memory and the worker 'crashed' with exit code 0."""
    record = records["toy/tensor-note/bs8"]
    assert record["status"] == "failed", record["evidence"]
    assert (record["evidence"]["type"], record["evidence"]["message"]) == ("MalformedResult", TENSOR)
