"""How a plugin registers: records whose callables are named with ``ampsuite.lazy``, option bounds in field
metadata, and one top-level import name in the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ampsuite
from ampsuite import PluginError, Technique, hookimpl, lazy
from ampsuite.contract.lazy import Lazy
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.spec.options import OptionError, build_options, describe

ROOT = Path(__file__).resolve().parent.parent


def _plugin(apply: Any) -> types.SimpleNamespace:
    @hookimpl
    def ampsuite_techniques() -> list[Technique]:
        return [Technique(name="lazy-one", summary="a technique named by reference", apply=apply)]

    return types.SimpleNamespace(ampsuite_techniques=ampsuite_techniques)


def _load(apply: Any) -> Technique:
    registry = load_registry(PluginSettings(autoload=False), objects=[("mine", _plugin(apply))])
    return registry.techniques["lazy-one"]


@pytest.mark.parametrize("target", ["os.path", "os.path:", ":join", "os path:join", "os.path:join.x"])
def test_a_lazy_target_must_be_module_colon_function(target: str) -> None:
    with pytest.raises(ValueError, match=r"lazy target must be 'package\.module:function'"):
        lazy(target)


def test_a_lazy_callable_imports_on_first_call_and_passes_through() -> None:
    technique = _load(lazy("os.path:join"))
    assert isinstance(technique.apply, Lazy) and technique.apply.plugin == "mine"
    assert technique.apply("a", "b") == "a/b"  # type: ignore[arg-type]


def test_a_lazy_target_whose_module_is_missing_is_a_load_error_naming_the_plugin() -> None:
    with pytest.raises(PluginError) as info:
        _load(lazy("ampsuite_no_such_package._impl:apply"))
    message = str(info.value)
    assert message.startswith("plugin 'mine': technique 'lazy-one': apply = lazy(")
    assert "no module 'ampsuite_no_such_package._impl'" in message and "\n" not in message


def test_a_lazy_target_without_the_function_fails_on_call_naming_the_plugin() -> None:
    technique = _load(lazy("os.path:no_such_function"))
    with pytest.raises(
        PluginError, match=r"^plugin 'mine': 'os.path:no_such_function': module 'os.path' has no callable"
    ):
        technique.apply(None, None)  # type: ignore[arg-type]


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_lazy_target_whose_module_defines_no_such_function_is_a_load_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _module(tmp_path, monkeypatch, "amp_lazy_typo", "import torch\n\ndef apply(step, options):\n    return step\n")
    with pytest.raises(PluginError) as info:
        _load(lazy("amp_lazy_typo:aply"))
    assert str(info.value) == (
        "plugin 'mine': technique 'lazy-one': apply = lazy('amp_lazy_typo:aply'): 'amp_lazy_typo' defines no 'aply'"
    )
    assert "amp_lazy_typo" not in sys.modules  # read, not imported: its torch is the worker's


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    from os.path import join as apply\nexcept ImportError:\n    apply = None\n",
        "import sys\nif sys.platform:\n    def apply(step, options):\n        return step\n",
        "for apply in [print]:\n    pass\n",
        "def __getattr__(name):\n    return print\n",
        "from os.path import *\n",
        "globals()['apply'] = print\n",
    ],
    ids=["try", "if", "loop", "module-getattr", "star-import", "globals"],
)
def test_a_lazy_target_the_source_may_bind_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    name = f"amp_lazy_bound_{abs(hash(source))}"
    _module(tmp_path, monkeypatch, name, source)
    assert isinstance(_load(lazy(f"{name}:apply")).apply, Lazy)


def test_the_builtins_name_their_implementations_lazily_and_the_fork_server_preloads_them() -> None:
    registry = load_registry(PluginSettings(autoload=False))
    assert isinstance(registry.techniques["amp-fp16"].apply, Lazy)
    assert isinstance(registry.workloads["resnet"].build, Lazy)
    own = registry.own_modules()
    assert "ampsuite.plugins.techniques.amp" in own and "ampsuite.plugins.techniques._amp" in own
    assert all(m.startswith("ampsuite.") for m in own)
    assert {p.source for p in registry.plugins} == {"builtin"}


@dataclass(frozen=True)
class Bounded:
    count: int = field(default=2, metadata={"help": "at least one", "ge": 1})
    fraction: float = field(default=0.5, metadata={"help": "strictly between", "gt": 0, "lt": 1})
    cap: float = field(default=1.0, metadata={"le": 8})
    flag: bool = field(default=True, metadata={"ge": 1})  # bounds are for numbers, never for booleans


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"count": 0}, "count: expected an integer >= 1, got 0"),
        ({"fraction": 0}, "fraction: expected a number > 0 and < 1, got 0.0"),
        ({"fraction": 1.0}, "fraction: expected a number > 0 and < 1, got 1.0"),
        ({"cap": 8.5}, "cap: expected a number <= 8, got 8.5"),
    ],
)
def test_declared_bounds_are_checked_with_the_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionError) as info:
        build_options(Bounded, values)
    assert str(info.value) == message


def test_values_on_the_bounds_and_booleans_pass() -> None:
    built = build_options(Bounded, {"count": 1, "fraction": 0.999, "cap": 8, "flag": False})
    assert (built.count, built.fraction, built.cap, built.flag) == (1, 0.999, 8.0, False)


def test_ampsuite_list_shows_the_bounds_with_the_type() -> None:
    types_by_name = {spec.name: spec.type for spec in describe(Bounded)}
    assert types_by_name == {"count": "int >= 1", "fraction": "float > 0 and < 1", "cap": "float <= 8", "flag": "bool"}


def test_the_public_api_has_lazy() -> None:
    assert "lazy" in ampsuite.__all__ and ampsuite.lazy is lazy


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    """``pip install ampsuite`` puts exactly ``ampsuite`` into site-packages: no ``suite``, no ``plugins``."""
    # Built from a copy: setuptools writes ampsuite.egg-info and build/ beside pyproject.toml, and an
    # egg-info left in the checkout would shadow the installed metadata (the built-ins' entry points).
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    for folder in ("suite", "plugins"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("ampsuite-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"ampsuite"}
    assert "ampsuite/plugins/techniques/_amp.py" in names and "ampsuite/defaults/cuda.toml" in names
    assert "[ampsuite]\n" in entry_points and "amp = ampsuite.plugins.techniques.amp" in entry_points


def test_a_broken_installed_plugin_is_named_with_the_way_to_leave_it_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every command loads every plugin: the one line says how to run without the broken package.
    from importlib.metadata import EntryPoint

    from ampsuite.host import manager

    broken = EntryPoint("ampsuite-broken", "ampsuite_no_such_package.plugin", "ampsuite")
    real = manager._entry_points()
    monkeypatch.setattr(manager, "_entry_points", lambda: [*real, broken])
    with pytest.raises(PluginError) as info:
        load_registry(PluginSettings())
    message = str(info.value)
    assert message.startswith("plugin 'ampsuite-broken': cannot load entry point")
    assert message.endswith("(leave it out with -p no:ampsuite-broken)") and "\n" not in message
    left_out = load_registry(PluginSettings(blocked=("ampsuite-broken",)))
    assert "ampsuite-broken" not in [p.name for p in left_out.plugins] and "toy" in left_out.workloads
