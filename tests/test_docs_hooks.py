"""docs/plugins.md stays true: every hook, record field, fixture and example in it matches the code.

The hook and record names come from the code (``ampsuite.host.hookspecs``, the
dataclasses in ``ampsuite.__all__``), so adding a hook or a field without
documenting it fails here, and so does documenting one that no longer exists.
The tutorial's plugin and suite file, and the testing example, are run.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import types
from pathlib import Path

import pytest
from conftest import run_ampsuite, shipped_plugin_autoloads, toy_suite

import ampsuite
import ampsuite.contract.errors
from ampsuite import results
from ampsuite.host import hookspecs, manager

# pytest refuses to register one module twice under two names, so the shipped
# plugin is named here only where its entry point did not load it already.
pytest_plugins = ["pytester"] + ([] if shipped_plugin_autoloads() else ["ampsuite.testing"])

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
TEXT = DOC.read_text(encoding="utf-8")


def _section(title: str, level: int, text: str = TEXT) -> str:
    """The body under the heading ``title`` up to the next heading of the same or a higher level."""
    pattern = rf"^{'#' * level} {re.escape(title)}\s*$(.*?)(?=^#{{1,{level}}} |\Z)"
    match = re.search(pattern, text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/plugins.md has no {'#' * level} {title} section"
    return match.group(1)


def _subsections(body: str) -> dict[str, str]:
    """``### name`` subsections of a section, by name (without backticks)."""
    parts = re.split(r"^### (.+?)\s*$", body, flags=re.MULTILINE)
    return {parts[i].strip("`"): parts[i + 1] for i in range(1, len(parts), 2)}


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", TEXT, flags=re.MULTILINE | re.DOTALL)


HOOKS = {
    name: fn for name, fn in vars(hookspecs).items() if name.startswith("ampsuite_") and hasattr(fn, "ampsuite_spec")
}
RECORDS = {
    name: obj
    for name in ampsuite.__all__
    if dataclasses.is_dataclass(obj := getattr(ampsuite, name)) and isinstance(obj, type) and dataclasses.fields(obj)
}


def test_every_hook_is_documented_and_no_other():
    documented = _subsections(_section("Hook reference", 2))
    assert HOOKS, "no hook specs found in ampsuite.host.hookspecs"
    assert sorted(documented) == sorted(HOOKS)


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_hook_docs_carry_the_signature_and_the_contract(name):
    body = _plain(_subsections(_section("Hook reference", 2))[name])
    for parameter in inspect.signature(HOOKS[name]).parameters:
        assert f"{parameter}:" in body, f"{name}: parameter {parameter!r} missing from the signature line"
    docstring = inspect.getdoc(HOOKS[name]) or ""
    paragraphs = [_plain(p) for p in docstring.split("\n\n") if p.strip()]
    assert paragraphs[0].rstrip(".") in body, f"{name}: the summary line of the hook spec is missing"
    # The last paragraph is the contract: where the hook runs and how results combine.
    assert paragraphs[-1] in body, f"{name}: the contract {paragraphs[-1]!r} is not in the docs"


def test_every_public_record_is_documented_and_no_other():
    documented = _subsections(_section("Record reference", 2))
    assert RECORDS.keys() <= documented.keys(), f"undocumented records: {sorted(RECORDS.keys() - documented.keys())}"
    extra = documented.keys() - RECORDS.keys() - {"Errors and other names"}
    assert not extra, f"documented records that are not public dataclasses of suite: {sorted(extra)}"


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_record_fields_match_the_dataclass(name):
    body = _subsections(_section("Record reference", 2))[name]
    documented = re.findall(r"^- `(\w+)`", body, flags=re.MULTILINE)
    fields = [f.name for f in dataclasses.fields(RECORDS[name])]
    assert sorted(documented) == sorted(fields)
    methods = [m for m, _ in inspect.getmembers(RECORDS[name], inspect.isfunction) if not m.startswith("_")]
    for method in methods:
        assert f"`{method}(" in body or f"`{name}.{method}" in body or f"`batch.{method}(" in body, method


def test_every_public_name_of_suite_is_mentioned():
    missing = [name for name in ampsuite.__all__ if f"`{name}`" not in TEXT and f"`{name}(" not in TEXT]
    assert not missing


def test_loading_names_match_the_manager():
    assert f"[project.entry-points.{manager.ENTRY_POINT_GROUP}]" in TEXT
    for variable in (manager.PLUGINS_ENV, manager.AUTOLOAD_ENV):
        assert f"`{variable}" in TEXT
    assert f"AMPSUITE_PLUGIN_API = {ampsuite.PLUGIN_API}" in TEXT
    assert f"(currently {ampsuite.PLUGIN_API})" in TEXT


def test_the_api_mismatch_message_is_the_real_one():
    plugin = types.SimpleNamespace(AMPSUITE_PLUGIN_API=ampsuite.PLUGIN_API + 1)
    with pytest.raises(ampsuite.contract.errors.PluginError) as info:
        manager.load_registry(manager.PluginSettings(autoload=False), objects=[("ampsuite-mine", plugin)])
    assert f"ampsuite: error: {info.value}" in TEXT


def test_python_examples_compile_and_import_only_public_names():
    blocks = _code_blocks("python")
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "suite":
                assert {a.name for a in node.names} <= set(ampsuite.__all__), ast.unparse(node)


def test_fixtures_and_result_members_are_documented():
    from ampsuite import testing

    body = _section("Testing a plugin", 2)
    fixtures = [n for n, obj in vars(testing).items() if n.startswith(("ampsuite_", "tiny_")) and callable(obj)]
    assert sorted(fixtures) == ["ampsuite_plugin", "ampsuite_registry", "ampsuite_run", "tiny_measure"]
    for name in fixtures:
        assert f"`{name}`" in body
    members = [n for n in dir(testing.SuiteResult) if not n.startswith("_") and n != "describe"]
    members += [f.name for f in dataclasses.fields(testing.SuiteResult)]
    for member in set(members):
        assert f"`{member}" in body, f"SuiteResult.{member} is not documented"
    for parameter in inspect.signature(testing.run_suite).parameters:
        if parameter not in ("suite", "workdir", "objects", "device"):
            assert f"{parameter}=" in body, f"ampsuite_run's {parameter}= is not documented"


TUTORIAL_MODULES = ("plugin", "_impl")
"""The tutorial's package ampsuite_mine: the registration module and the code it names with ``lazy``."""


def _tutorial_module(tmp_path: Path) -> Path:
    """Write the tutorial's plugin modules as the package ampsuite_mine in tmp_path."""
    package = tmp_path / "ampsuite_mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in TUTORIAL_MODULES:
        after = TEXT[TEXT.index(f"**`src/ampsuite_mine/{name}.py`**") :]
        code = re.search(r"```python\n(.*?)^```", after, flags=re.MULTILINE | re.DOTALL)
        assert code
        (package / f"{name}.py").write_text(code.group(1))
    return package


def _forget_tutorial_modules() -> None:
    for name in TUTORIAL_MODULES:
        sys.modules.pop(f"ampsuite_mine.{name}", None)
    sys.modules.pop("ampsuite_mine", None)


def test_the_tutorial_plugin_and_suite_run(tmp_path, monkeypatch, ampsuite_run):
    _tutorial_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (toml,) = [b for b in _code_blocks("toml") if "[workloads.mlp]" in b]
    result = ampsuite_run(toml, plugins=["ampsuite_mine.plugin"])
    result.assert_all_passed()
    assert sorted(result.ids) == sorted(
        f"mlp/{c}/bs{b}" for c in ("fp32", "clipped", "bf16-clipped") for b in (32, 256)
    )
    assert result.notes("mlp/clipped/bs32") == {"grad_clip": {"max_norm": 0.5}}
    _forget_tutorial_modules()


def test_the_testing_example_passes(pytester, tmp_path):
    _tutorial_module(pytester.path)
    pytester.syspathinsert()
    example = next(b for b in _code_blocks("python") if "def test_cells_pass" in b)
    pytester.makepyfile(test_example=example)
    args = () if shipped_plugin_autoloads() else ("-p", "ampsuite.testing")
    try:
        pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider").assert_outcomes(passed=3)
    finally:
        _forget_tutorial_modules()


@pytest.mark.slow
def test_the_pool_executor_example_runs_its_cells(tmp_path):
    """The executor example calls each task in a process of a fork-based pool: a fork of the runner, which inherits
    the runner's fork server but may not use it (it is not the pool process's child)."""
    example = next(b for b in _code_blocks("python") if "class PoolOptions" in b)
    (tmp_path / "docpool.py").write_text(example, encoding="utf-8")
    suite = toy_suite("pool", combinations={"fp32": [], "noop": ["noop"]}, tables={"executor": {"name": "pool"}})
    (tmp_path / "suite.toml").write_text(suite, encoding="utf-8")
    args = ["-p", "docpool", "run", "suite.toml", "-o", "r.json", "--no-report", "--no-peaks", "--no-again"]
    run = run_ampsuite(*args, cwd=tmp_path, pythonpath=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    records = results.load(tmp_path / "r.json")["cells"]
    assert sorted((r["combination"], r["status"]) for r in records) == [("fp32", "passed"), ("noop", "passed")]
