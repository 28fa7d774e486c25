"""The compiled-graphs probe: dynamo's graphs and graph breaks in the record, and compiles in the timed steps.

Compiles here use the ``aot_eager`` backend: dynamo splits graphs and counts breaks the same way for every
backend, and ``aot_eager`` needs no C++ compiler.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch
from torch._dynamo.utils import compilation_time_metrics, counters

from ampsuite import ProbeContext
from ampsuite.analysis import instability_warnings
from ampsuite.plugins.probes import graphs


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()
    counters.clear()
    compilation_time_metrics.clear()


def _ctx() -> ProbeContext:
    step = types.SimpleNamespace(device=torch.device("cpu"))
    return ProbeContext(step=step, run=lambda batch: None, cell={"id": "x/compiled/bs2"})  # type: ignore[arg-type]


def _with_a_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    importlib.import_module("math")  # dynamo does not trace import_module: a break
    return y * 2


def test_reasons_are_one_line_each_merged_and_most_frequent_first() -> None:
    long_reason = "Attempted to call function marked as skipped\n  Explanation: `import_module` should not be traced."
    found = {
        "stats": {"unique_graphs": 4, "calls_captured": 9},
        "graph_break": {long_reason: 2, "Unsupported: call_method\n  Hint: avoid it": 1, "x" * 300: 1},
    }
    compiled, breaks, reasons = graphs.summarize(found)
    assert (compiled, breaks) == (4, 4)
    assert reasons[0] == {
        "reason": "Attempted to call function marked as skipped: `import_module` should not be traced.",
        "count": 2,
    }
    assert {"reason": "Unsupported: call_method", "count": 1} in reasons
    assert all(len(r["reason"]) <= 240 and "\n" not in r["reason"] for r in reasons)
    assert graphs.summarize({}) == (0, 0, [])


def test_a_graph_break_is_counted_with_its_reason_and_warned_without_untrusting_the_cell() -> None:
    f = torch.compile(_with_a_break, backend="aot_eager")
    x = torch.randn(4)
    f(x)
    ctx = _ctx()
    with graphs.around(ctx):
        f(x)
    assert ctx.metrics["compiled_graphs"] == 2 and ctx.metrics["graph_breaks"] == 1
    assert "import_module" in ctx.diagnostics["graph_breaks"][0]["reason"]
    assert ctx.warnings == [
        f"torch.compile: 1 graph break, 2 graphs (most frequent: {ctx.diagnostics['graph_breaks'][0]['reason']})"
    ]
    assert instability_warnings({"warnings": ctx.warnings}) == []
    assert not counters["stats"] and not counters["graph_break"]  # the next in-process cell starts from zero


def test_the_compile_phases_are_recorded_costliest_first_and_cleared_for_the_next_cell() -> None:
    f = torch.compile(lambda x: x.cos() + 1, backend="aot_eager", dynamic=False)
    f(torch.randn(4))
    ctx = _ctx()
    with graphs.around(ctx):
        f(torch.randn(4))
    phases = ctx.diagnostics["compile_seconds"]
    assert phases and all(v >= 0 for v in phases.values())
    assert list(phases.values()) == sorted(phases.values(), reverse=True)
    # dynamo's frame compile holds every other phase of a forward-only compile: summed right, it comes first
    assert next(iter(phases)) == "_compile.compile_inner"
    assert not compilation_time_metrics  # the next in-process cell starts from zero
    assert graphs.compile_seconds({"a": [1.0, 2.0], "b": [4.0], "c": []}) == {"b": 4.0, "a": 3.0}
    many = {f"p{i:02d}": [float(i)] for i in range(graphs.PHASES_KEPT + 3)}
    assert list(graphs.compile_seconds(many)) == [f"p{i:02d}" for i in range(graphs.PHASES_KEPT + 2, 2, -1)]


def test_a_compile_in_the_timed_steps_makes_the_cell_untrusted() -> None:
    f = torch.compile(lambda x: x.sin() * 2, backend="aot_eager", dynamic=False)
    f(torch.randn(4))
    ctx = _ctx()
    with graphs.around(ctx):
        f(torch.randn(5))  # a new shape: dynamo compiles again
    assert ctx.metrics == {"compiled_graphs": 1, "graph_breaks": 0}
    assert ctx.warnings == ["unstable timing: torch.compile compiled 1 graph(s) during the timed steps"]
    assert instability_warnings({"warnings": ctx.warnings}) == ctx.warnings


def test_a_cell_that_compiled_nothing_records_nothing() -> None:
    ctx = _ctx()
    with graphs.around(ctx):
        torch.randn(4).sin()
    assert ctx.metrics == {} and ctx.diagnostics == {} and ctx.warnings == []
    assert graphs.compile_seconds({}) == {}


def test_a_compiled_cell_run_in_its_own_worker_records_its_graphs(ampsuite_run) -> None:
    result = ampsuite_run(
        {
            "workloads": {"toy": {"batch_size": 4, "hidden": 8}},
            "combinations": {"fp32": [], "compiled": ["torch-compile"]},
            "techniques": {"torch-compile": {"backend": "aot_eager"}},
        },
        isolated=True,
    )
    result.assert_all_passed()
    compiled = result.metrics("toy/compiled/bs4")
    assert compiled["compiled_graphs"] >= 1 and compiled["graph_breaks"] == 0
    assert "compiled_graphs" not in result.metrics("toy/fp32/bs4")
    by_id = {r["id"]: r for r in result.doc["cells"]}
    assert by_id["toy/compiled/bs4"]["diagnostics"]["compile_seconds"]  # where its first step's time went
    assert "compile_seconds" not in (by_id["toy/fp32/bs4"].get("diagnostics") or {})
    assert not [w for r in result.doc["cells"] for w in r["warnings"] if "torch.compile" in w]
