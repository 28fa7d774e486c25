"""Plugin loading: a real entry point, -p, -p no:, the autoload switch, and every broken plugin.

The entry-point test installs tests/plugin_dist into a throw-away virtual
environment that sees the system site-packages (torch and ampsuite itself are
reused, nothing is installed globally). The broken plugins live in
tests/broken_plugins/, one fault per module.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from venvs import layered_venv

from ampsuite.contract.errors import PluginError, SuiteFileError
from ampsuite.host.manager import AUTOLOAD_ENV, PluginSettings, load_registry
from ampsuite.spec import matrix, suitefile

TESTS = Path(__file__).parent
BROKEN = TESTS / "broken_plugins"
DIST = TESTS / "plugin_dist"
BUILTINS = PluginSettings(autoload=False)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (AUTOLOAD_ENV, "AMPSUITE_PLUGINS")}
    env["COLUMNS"] = "200"  # rich tables stay on one line per row
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding only the example plugin distribution, on top of the system packages."""
    root = tmp_path_factory.mktemp("venv")
    env_dir = root / "env"
    layered_venv(env_dir)  # the packages of the interpreter running the tests, in a venv or not
    src = root / "plugin_dist"  # build from a copy: the build writes into the source tree
    shutil.copytree(DIST, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(src)],
        check=True,
        timeout=300,
        env=_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    return python


def _list(python: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "ampsuite", "list", *args], capture_output=True, text=True, timeout=120, env=_env(**env)
    )


@pytest.mark.slow
def test_entry_point_plugin_is_listed_with_its_version(venv: Path) -> None:
    proc = _list(venv, **{AUTOLOAD_ENV: "0"})
    assert proc.returncode == 0, proc.stderr
    row = next((line for line in proc.stdout.splitlines() if re.search(r"\bexample\b.*\b1\.2\.3\b", line)), None)
    assert row is not None, proc.stdout
    assert [c.strip() for c in row.split("│")][1:5] == ["example", "ampsuite-example-plugin", "1.2.3", "entry point"]
    assert "workload example-regression (plugin example) [unit: rows]: linear regression from the example plugin" in (
        proc.stdout
    )
    assert "    features (int, default 7): input features of the regression" in proc.stdout


@pytest.fixture
def venv_on_path(venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The venv's site-packages on this process's path, so its entry point is visible in-process."""
    (site,) = (venv.parent.parent / "lib").glob("python3*/site-packages")
    monkeypatch.syspath_prepend(str(site))


def test_autoload_switch_hides_the_entry_point(venv_on_path: None) -> None:
    assert "example-regression" in load_registry(PluginSettings.from_args([], env={AUTOLOAD_ENV: "0"})).workloads
    hidden = load_registry(PluginSettings.from_args([], env={AUTOLOAD_ENV: "1"}))
    assert "example-regression" not in hidden.workloads
    assert "toy" in hidden.workloads  # built-ins still load


def test_entry_point_plugin_can_be_blocked(venv_on_path: None) -> None:
    registry = load_registry(PluginSettings.from_args(["no:example"], env={AUTOLOAD_ENV: "0"}))
    assert "example-regression" not in registry.workloads
    assert "example" not in [p.name for p in registry.plugins]


@pytest.mark.parametrize(
    ("value", "autoload"), [("", True), ("0", True), ("false", True), ("1", False), ("yes", False), ("TRUE", False)]
)
def test_autoload_environment_values(value: str, autoload: bool) -> None:
    assert PluginSettings.from_args([], env={AUTOLOAD_ENV: value}).autoload is autoload


def test_plugin_arguments_split_into_extra_and_blocked() -> None:
    settings = PluginSettings.from_args(["mod_a", "no:noop", "pkg.mod_b"], env={"AMPSUITE_PLUGINS": "env_mod, other"})
    assert settings.extra == ("env_mod", "other", "mod_a", "pkg.mod_b")
    assert settings.blocked == ("noop",)
    assert PluginSettings.from_dict(settings.as_dict()) == settings


def test_the_environment_blocks_a_plugin_as_p_no_does() -> None:
    settings = PluginSettings.from_args([], env={"AMPSUITE_PLUGINS": "no:extras-checkpointing, env_mod"})
    assert settings.blocked == ("extras-checkpointing",) and settings.extra == ("env_mod",)
    registry = load_registry(PluginSettings.from_args([], env={"AMPSUITE_PLUGINS": "no:noop"}))
    assert "noop" not in {p.name for p in registry.plugins}


def test_p_loads_a_module_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(DIST / "src"))
    registry = load_registry(PluginSettings(extra=("ampsuite_example_plugin",), autoload=False))
    assert "example-regression" in registry.workloads
    assert registry.owner[("technique", "example-mark")] == "ampsuite_example_plugin"
    info = registry.plugin_of("workload", "example-regression")
    assert (info.name, info.version, info.source) == ("ampsuite_example_plugin", "1.2.3", "-p")


def test_builtins_load_without_any_option() -> None:
    registry = load_registry(PluginSettings(autoload=False))
    assert {"toy", "gemm"} <= set(registry.workloads)
    assert {"noop", "fp8"} <= set(registry.techniques)
    assert not any(name.startswith(("inject-fault", "fault-")) for name in registry.techniques)  # opt-in
    assert {p.source for p in registry.plugins} == {"builtin"}


def test_p_no_blocks_a_builtin(write_suite) -> None:
    registry = load_registry(PluginSettings(blocked=("noop",), autoload=False))
    assert "noop" not in registry.techniques
    assert "noop" not in [p.name for p in registry.plugins]
    path = write_suite("[workloads.toy]\nbatch_size = 8\n[combinations]\nfp32 = []\nquiet = ['noop']\n")
    with pytest.raises(SuiteFileError, match=r"combinations\.quiet\[0\]: unknown technique 'noop'"):
        matrix.expand(suitefile.load(path), registry, "cpu")


# (module(s) given with -p, the plugin the message must name, regex for the fault after "plugin 'NAME': ")
BROKEN_CASES = [
    pytest.param(
        ("bp_import_error",),
        "bp_import_error",
        r"cannot import 'bp_import_error': ModuleNotFoundError: No module named 'ampsuite_no_such_dependency'",
        id="import-error",
    ),
    pytest.param(
        ("bp_misspelled_hook",),
        "bp_misspelled_hook",
        r"unknown hook 'ampsuite_workload' in plugin .*; did you mean 'ampsuite_workloads'\?; hooks are: .*",
        id="misspelled-hook",
    ),
    pytest.param(
        ("bp_wrong_signature",),
        "bp_wrong_signature",
        r".*hook 'ampsuite_workloads'.*Argument\(s\) \{'device'\} are declared in the hookimpl but can not be found "
        r"in the hookspec",
        id="wrong-signature",
    ),
    pytest.param(
        ("bp_duplicate_a", "bp_duplicate_b"),
        "bp_duplicate_b",  # the later plugin is blamed: -p order is registration order
        r"workload 'twin' is already registered by plugin 'bp_duplicate_a'; rename one, or block one with "
        r"-p no:bp_duplicate_b",
        id="duplicate-workload",
    ),
    pytest.param(
        ("bp_wrong_type",),
        "bp_wrong_type",
        r"hook ampsuite_workloads returned dict, expected ampsuite\.Workload",
        id="wrong-return-type",
    ),
    pytest.param(
        ("bp_api_mismatch",),
        "bp_api_mismatch",
        r"written for ampsuite plugin API 99, but this ampsuite \(\S+\) provides API 1; upgrade the plugin or ampsuite",
        id="api-mismatch",
    ),
    pytest.param(
        ("bp_hook_raises",),
        "bp_hook_raises",
        r"hook ampsuite_techniques raised RuntimeError: cannot find my configuration file",
        id="hook-raises",
    ),
    # sys.exit() in a plugin is that plugin's error: it must not end the command (exit 0, nothing written)
    pytest.param(
        ("bp_sys_exit",),
        "bp_sys_exit",
        r"cannot import 'bp_sys_exit': SystemExit: sys\.exit\(None\) was called",
        id="sys-exit-at-import",
    ),
    pytest.param(
        ("bp_sys_exit_message",),
        "bp_sys_exit_message",
        r"cannot import 'bp_sys_exit_message': SystemExit: sys\.exit\('this plugin needs a GPU'\) was called",
        id="sys-exit-message-at-import",
    ),
    pytest.param(
        ("bp_hook_exits",),
        "bp_hook_exits",
        r"hook ampsuite_techniques raised SystemExit: sys\.exit\(3\) was called",
        id="hook-exits",
    ),
]


@pytest.mark.parametrize(("modules", "plugin", "fault"), BROKEN_CASES)
def test_broken_plugin_is_one_line_naming_plugin_and_fault(
    monkeypatch: pytest.MonkeyPatch, modules: tuple[str, ...], plugin: str, fault: str
) -> None:
    monkeypatch.syspath_prepend(str(BROKEN))
    with pytest.raises(PluginError) as info:
        load_registry(PluginSettings(extra=modules, autoload=False))
    message = str(info.value)
    assert "\n" not in message
    assert info.value.plugin == plugin
    assert re.fullmatch(re.escape(f"plugin {plugin!r}: ") + fault, message), message


def test_duplicate_of_a_builtin_name_names_both_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A third-party plugin that registers "toy" again collides with the built-in, and the message says so."""
    monkeypatch.syspath_prepend(str(BROKEN))
    from ampsuite import Workload, hookimpl

    class Impostor:
        @hookimpl
        def ampsuite_workloads(self) -> list[Workload]:
            from _bp_common import build

            return [Workload(name="toy", summary="a second toy", build=build)]

    with pytest.raises(PluginError) as info:
        load_registry(BUILTINS, objects=[("impostor", Impostor())])
    assert info.value.plugin == "impostor"  # the later plugin, never the built-in it collides with
    assert str(info.value) == (
        "plugin 'impostor': workload 'toy' is already registered by plugin 'toy'; "
        "rename one, or block one with -p no:impostor"
    )


def test_an_option_without_a_default_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every option needs a default (a suite may leave any out): refused when the plugin loads, not when a suite
    first uses the record, and never listed as ``default None``."""
    monkeypatch.syspath_prepend(str(BROKEN))
    from dataclasses import dataclass

    from ampsuite import Technique, hookimpl

    @dataclass(frozen=True)
    class StepsOptions:
        steps: int

    class NoDefault:
        @hookimpl
        def ampsuite_techniques(self) -> list[Technique]:
            return [Technique(name="accumulate", summary="x", apply=lambda step, options: step, options=StepsOptions)]

    with pytest.raises(PluginError) as info:
        load_registry(BUILTINS, objects=[("no-default", NoDefault())])
    assert str(info.value) == "plugin 'no-default': technique 'accumulate': option 'steps' has no default"


def test_a_declared_set_of_names_given_as_a_string_is_refused_at_load() -> None:
    from ampsuite import Technique, hookimpl

    class OneString:
        @hookimpl
        def ampsuite_techniques(self) -> list[Technique]:
            return [Technique(name="t", summary="x", apply=lambda step, options: step, requires_traits="model")]  # type: ignore[arg-type]

    with pytest.raises(PluginError) as info:
        load_registry(BUILTINS, objects=[("one-string", OneString())])
    assert str(info.value) == "plugin 'one-string': technique 't': requires_traits must be a set of names, got 'model'"


def test_duplicate_from_a_p_module_blames_it_not_the_builtin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A -p module registers after the built-ins, so it is the one told to rename or be blocked."""
    (tmp_path / "bp_toy_again.py").write_text(
        "from _bp_common import build\n"
        "from ampsuite import Workload, hookimpl\n\n"
        "@hookimpl\n"
        "def ampsuite_workloads():\n"
        "    return [Workload(name='toy', summary='again', build=build)]\n"
    )
    monkeypatch.syspath_prepend(str(BROKEN))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as info:
        load_registry(PluginSettings(extra=("bp_toy_again",), autoload=False))
    assert info.value.plugin == "bp_toy_again"
    assert "already registered by plugin 'toy'; rename one, or block one with -p no:bp_toy_again" in str(info.value)


def test_misspelled_hook_message_lists_only_real_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BROKEN))
    with pytest.raises(PluginError) as info:
        load_registry(PluginSettings(extra=("bp_misspelled_hook",), autoload=False))
    listed = str(info.value).split("hooks are: ", 1)[1].split(", ")
    assert "ampsuite_workload" not in listed
    assert {"ampsuite_workloads", "ampsuite_techniques", "ampsuite_probes"} <= set(listed)
    assert all(name.startswith("ampsuite_") for name in listed)


@pytest.mark.parametrize(
    ("module", "returned", "got"),
    [
        ("bp_single_workload", "Workload(name='single', summary='one', build=build)", "a single Workload"),
        (
            "bp_single_technique",
            "Technique(name='single', summary='one', apply=lambda step, options: step)",
            "a single Technique",
        ),
        ("bp_string", "'toy'", "str"),
        ("bp_int", "42", "int"),
    ],
)
def test_hook_returning_a_non_list_gets_a_clear_message(
    module: str, returned: str, got: str, monkeypatch, tmp_path: Path
) -> None:
    (tmp_path / f"{module}.py").write_text(
        "from _bp_common import build\n"
        "from ampsuite import Technique, Workload, hookimpl\n\n"
        "@hookimpl\n"
        "def ampsuite_workloads():\n"
        f"    return {returned}\n"
    )
    monkeypatch.syspath_prepend(str(BROKEN))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as info:
        load_registry(PluginSettings(extra=(module,), autoload=False))
    expected = f"plugin {module!r}: hook ampsuite_workloads must return a list of ampsuite.Workload, got {got}"
    assert str(info.value) == expected


def test_hook_returning_a_generator_or_tuple_is_accepted(monkeypatch, tmp_path: Path) -> None:
    """The spec says Iterable: any iterable of records is fine, only single records and non-iterables are not."""
    (tmp_path / "bp_generator.py").write_text(
        "from _bp_common import build\n"
        "from ampsuite import Workload, hookimpl\n\n"
        "@hookimpl\n"
        "def ampsuite_workloads():\n"
        "    yield Workload(name='gen-a', summary='a', build=build)\n"
        "    yield Workload(name='gen-b', summary='b', build=build)\n"
    )
    monkeypatch.syspath_prepend(str(BROKEN))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry(PluginSettings(extra=("bp_generator",), autoload=False))
    assert {"gen-a", "gen-b"} <= set(registry.workloads)


def test_cli_broken_plugin_is_one_line_and_exit_4() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ampsuite", "list", "-p", "bp_hook_raises"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(PYTHONPATH=str(BROKEN), **{AUTOLOAD_ENV: "1"}),
    )
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines == [
        "ampsuite: error: plugin 'bp_hook_raises': hook ampsuite_techniques raised RuntimeError: "
        "cannot find my configuration file"
    ]
    assert proc.stdout == ""


def test_registering_the_builtins_imports_no_torch() -> None:
    """``ampsuite list``, ``--help`` and suite-file errors answer in well under a second only while
    registration stays torch-free: torch alone takes 1.5 s of CPU to import, torchvision.models 3 s."""
    code = (
        "import sys\n"
        "from ampsuite.host.manager import PluginSettings, load_registry\n"
        "registry = load_registry(PluginSettings(autoload=False))\n"
        "assert registry.workloads and registry.techniques and registry.probes\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'numpy')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.slow
def test_every_builtin_implementation_module_is_preloaded() -> None:
    """The fork server imports what ``Registry.own_modules`` names: a built-in implementation left out would be
    imported in every worker, after its memory limit is set. Executors' halves run in the parent only (and import
    optional packages such as submitit), so no worker imports them."""
    import pkgutil

    import ampsuite.plugins

    modules = {name for _, name, _ in pkgutil.walk_packages(ampsuite.plugins.__path__, "ampsuite.plugins.")}
    halves = {
        m
        for m in modules
        if m.rsplit(".", 1)[1].startswith("_")
        and m.rsplit(".", 1)[1] != "__init__"
        and not m.startswith("ampsuite.plugins.executors.")
    }
    assert len(halves) > 15, halves  # the walk found the implementations
    code = (
        "import importlib, sys\n"
        "from ampsuite.host.manager import PluginSettings, load_registry\n"
        "registry = load_registry(PluginSettings(extra=('ampsuite.plugins.faults',), autoload=False))\n"
        "for module in registry.own_modules():\n"
        "    importlib.import_module(module)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('ampsuite.plugins.'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert halves - set(proc.stdout.split()) == set()
