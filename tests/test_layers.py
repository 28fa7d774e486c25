"""The core's layering, read from the source: one-way imports, plugins on the public API only, statuses in one place.

Every import counts, inside functions too; only imports under ``if TYPE_CHECKING:``
(annotations) are left out. docs/architecture.md explains the layers.
"""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ampsuite
from ampsuite.contract import cell, wire

ROOT = Path(__file__).resolve().parent.parent

LAYERS: dict[str, int] = {
    "ampsuite.contract": 0,
    "ampsuite.spec": 1,
    "ampsuite.host": 2,
    "ampsuite.results": 3,
    "ampsuite.run": 4,
    "ampsuite.analysis": 5,
    "ampsuite.tune": 5,
    "ampsuite.report": 6,
    "ampsuite.asvtools": 6,
}
"""Rank of each layer: a module may import its own layer and lower ones. Modules directly under
suite/ are the application (cli, display, testing, ...), rank 7, except the public API in
suite/__init__.py, which re-exports the contract and so sits with it."""
APP = 7


PACKAGES = {"suite": "ampsuite", "plugins": "ampsuite.plugins"}
"""Repository folder -> the import name it is installed as (pyproject's package-dir)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGES[parts[0]], *parts[1:]])


def _is_plugin(module: str) -> bool:
    return module == "ampsuite.plugins" or module.startswith("ampsuite.plugins.")


def _is_core(module: str) -> bool:
    return (module == "ampsuite" or module.startswith("ampsuite.")) and not _is_plugin(module)


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("suite", "plugins"):
        for path in (ROOT / top).rglob("*.py"):
            if "templates" not in path.parts:
                found[_module_name(path)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (the longest known prefix), or None for other packages."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name` imports the submodule pkg.name when there is one.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _rank(module: str) -> int | None:
    if _is_plugin(module):
        return None
    if module == "ampsuite":
        return 0
    for prefix, rank in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return APP


def test_the_graph_was_read() -> None:
    # A walker that finds nothing would pass every test below.
    assert "ampsuite.run.runner" in GRAPH and "ampsuite.contract.wire" in GRAPH["ampsuite.run.runner"]
    assert len(GRAPH) > 60


def test_no_import_cycle() -> None:
    # Edges into packages whose __init__ only re-exports its own modules are real edges too:
    # the cycle check sees the graph exactly as Python would import it.
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


MAX_LINES = 400
"""A module of suite/ or plugins/ longer than this holds more than one thing: split it by what it holds."""


def test_no_module_is_longer_than_the_bound() -> None:
    long = {m: n for m, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_layers_import_one_way() -> None:
    upward = []
    for module, targets in GRAPH.items():
        mine = _rank(module)
        if mine is None:
            continue
        for target in targets:
            theirs = _rank(target)
            if theirs is not None and theirs > mine:
                upward.append(f"{module} (layer {mine}) imports {target} (layer {theirs})")
    assert not upward, "\n".join(sorted(upward))


def test_plugins_use_the_public_api_only() -> None:
    offenders = []
    for module, path in MODULES.items():
        if not _is_plugin(module):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and _is_core(node.module):
                names = [a.name for a in node.names]
                if node.module != "ampsuite" or not set(names) <= set(ampsuite.__all__):
                    offenders.append(f"{module}: from {node.module} import {', '.join(names)}")
            elif isinstance(node, ast.Import) and any(_is_core(a.name) and a.name != "ampsuite" for a in node.names):
                offenders.append(f"{module}: import {', '.join(a.name for a in node.names)}")
    assert not offenders, "\n".join(offenders)


def test_public_api_is_importable_and_complete() -> None:
    for name in ampsuite.__all__:
        assert hasattr(ampsuite, name), name
    assert ampsuite.Cell is cell.Cell and ampsuite.Status is wire.Status


@pytest.mark.parametrize("enabled", [False, True], ids=["default", "with -p ampsuite.plugins.faults"])
def test_fault_techniques_are_listed_only_when_enabled(enabled: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AMPSUITE_PLUGINS"}
    args = [sys.executable, "-m", "ampsuite", "list", *(["-p", "ampsuite.plugins.faults"] if enabled else [])]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert ("fault-abort" in out.stdout) is enabled
    assert "noop" in out.stdout


def test_each_status_is_spelled_in_one_module_of_suite() -> None:
    statuses = {s.value for s in wire.Status}
    spelled: dict[str, set[str]] = {s: set() for s in statuses}
    for module, path in MODULES.items():
        if _is_plugin(module):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in statuses:
                spelled[node.value].add(module)
    # `[suite] timeout` is a suite-file key that happens to share the status's spelling.
    spelled["timeout"] -= {"ampsuite.spec.suitefile", "ampsuite.spec.suitespec"}
    assert spelled["passed"] == {"ampsuite.contract.status"}, "use ampsuite.Status: the spelling lives in status.py"
    assert {s: sorted(m) for s, m in spelled.items() if m != {"ampsuite.contract.status"}} == {}
