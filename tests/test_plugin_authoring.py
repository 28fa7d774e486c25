"""Third-party plugins end to end: the shipped pytest plugin, ``ampsuite new-plugin``, and the
example package installed into a virtualenv the way a user installs a plugin.

The venv tests share one virtualenv per module (layered on the interpreter running the
tests by tests/venvs.py, so torch and friends are reused; ampsuite and the plugins are
installed into the venv only, with ``--no-deps --no-build-isolation --no-index``). Every
command runs from a temporary directory so that ``python -m ampsuite`` imports the
installed copy, never this checkout.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import shipped_plugin_autoloads, toy_suite
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from venvs import layered_venv

from ampsuite import Batch, TrainStep, Workload, hookimpl, scaffold
from ampsuite.contract.errors import SuiteFileError, UsageError
from ampsuite.testing import TINY_MEASURE

# pytest refuses to register one module twice under two names, so the shipped
# plugin is named here only where its entry point did not load it already.
pytest_plugins = ["pytester"] + ([] if shipped_plugin_autoloads() else ["ampsuite.testing"])

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ampsuite-extras"
COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".pytest_cache")
TINY = {
    "warmup_steps": 1,
    "warmup_seconds": 0.0,
    "min_steps": 3,
    "max_steps": 3,
    "max_seconds": 1.0,
    "noise_target": 1.0,
    "numerics_steps": 2,
    "processes": 1,
}


# ---------------------------------------------------------------------------
# the pytest plugin, in this process
# ---------------------------------------------------------------------------


def _constant_build(options, ctx):
    """A workload with no model: its step returns a constant loss."""
    import torch

    return TrainStep(
        device=ctx.device,
        batch_size=ctx.batch_size,
        samples_per_step=ctx.batch_size,
        data=lambda: Batch(()),
        forward_backward=lambda batch: torch.tensor(1.0),
        update=lambda: None,
    )


class ConstantWorkload:
    @hookimpl
    def ampsuite_workloads(self):
        return [Workload(name="constant", summary="a constant loss", build=_constant_build)]


def test_registered_object_takes_part_in_the_run(ampsuite_plugin, ampsuite_run):
    ampsuite_plugin(ConstantWorkload(), name="constant-plugin")
    result = ampsuite_run({"workloads": {"c": {"plugin": "constant", "batch_size": 2}}})
    result.assert_all_passed()
    assert result.ids == ["c/fp32/bs2"]
    assert result.numerics("c/fp32/bs2")["losses"] == [1.0, 1.0]
    assert result.metrics("c/fp32/bs2")["samples_per_step"] == 2
    assert "constant-plugin" in [p["name"] for p in result.doc["run"]["plugins"]]
    assert json.loads(result.path.read_text())["cells"] == result.doc["cells"]


def test_registered_objects_last_one_test_only(pytester):
    pytester.makepyfile(
        """
        from ampsuite import Technique, hookimpl

        class Plugin:
            @hookimpl
            def ampsuite_techniques(self):
                return [Technique(name="temporary", summary="t", apply=lambda step, options: step)]

        def test_register(ampsuite_plugin, ampsuite_registry):
            ampsuite_plugin(Plugin())
            assert "temporary" in ampsuite_registry().techniques

        def test_gone_in_the_next_test(ampsuite_registry):
            assert "temporary" not in ampsuite_registry().techniques
        """
    )
    args = () if shipped_plugin_autoloads() else ("-p", "ampsuite.testing")
    pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_suite_as_toml_text_or_path_gets_the_tiny_measure_table(ampsuite_run, tmp_path):
    text = '[workloads.toy]\nbatch_size = 4\nhidden = 8\n\n[combinations]\nfp32 = []\nnoop = ["noop"]\n'
    path = tmp_path / "mine.toml"
    path.write_text(text)
    for suite in (text, path, str(path)):
        result = ampsuite_run(suite)
        result.assert_all_passed()
        assert result.doc["run"]["measure"] == TINY
        assert [r["metrics"]["step_time"]["n"] for r in result.doc["cells"]] == [3, 3]
    assert result.doc["run"]["suite"]["name"] == "mine"


def test_a_suites_own_measure_table_is_kept(ampsuite_run):
    result = ampsuite_run(
        {"workloads": {"toy": {"batch_size": 4}}, "measure": {**TINY, "min_steps": 4, "max_steps": 4}}
    )
    assert result.metrics("toy/fp32/bs4")["step_time"]["n"] == 4


def test_statuses_and_assertion_messages(ampsuite_run):
    result = ampsuite_run(
        {
            "workloads": {"toy": {"batch_size": 4, "hidden": 8}},
            "combinations": {"fp32": [], "broken": ["inject-fault"], "graphs": ["cuda-graphs"]},
        },
        plugins=["ampsuite.plugins.faults"],  # opt-in, as on the command line
    )
    assert result.statuses() == {"toy/fp32/bs4": "passed", "toy/broken/bs4": "failed", "toy/graphs/bs4": "skipped"}
    result.assert_status("toy/graphs/*", "skipped", reason="needs a CUDA device")
    result.assert_status("*/broken/*", "failed", reason="injected fault")
    assert result.evidence("toy/broken/bs4")["type"] == "InjectedFault"
    with pytest.raises(
        AssertionError, match=r"2 of 3 cells did not pass:(.|\n)*toy/broken/bs4: failed \(InjectedFault"
    ):
        result.assert_all_passed()
    with pytest.raises(AssertionError, match="1 of 3 cells did not pass"):
        result.assert_all_passed(allow_skipped=True)
    with pytest.raises(AssertionError, match="no cell matches 'nothing/\\*'"):
        result.assert_status("nothing/*", "passed")
    with pytest.raises(KeyError, match="did you mean 'toy/fp32/bs4'"):
        result.record("toy/fp32/bs8")


def test_keyword_and_blocked_plugins(ampsuite_run):
    suite = {"workloads": {"toy": {"batch_size": [2, 4]}}, "combinations": {"fp32": [], "noop": ["noop"]}}
    assert ampsuite_run(suite, keyword="noop and bs4").ids == ["toy/noop/bs4"]
    with pytest.raises(SuiteFileError, match="unknown technique 'noop'"):
        ampsuite_run(suite, blocked=["noop"])


def test_a_run_is_on_the_device_the_suite_names_and_on_the_cpu_for_auto(ampsuite_run, monkeypatch):
    suite = {"workloads": {"toy": {"batch_size": 4}}}
    # as on a GPU machine: auto is still the CPU, so a test's cells are the same on every machine
    monkeypatch.setattr("ampsuite.host.environment.detect_device", lambda: "cuda")
    assert [r["device"] for r in ampsuite_run(suite).doc["cells"]] == ["cpu"]
    monkeypatch.setattr("ampsuite.host.environment.detect_device", lambda: "cpu")
    cuda_suite = {"suite": {"device": "cuda"}, **suite}
    # the fixture's caller changes arguments, not command-line flags: the message names those
    with pytest.raises(UsageError) as refused:
        ampsuite_run(cuda_suite)
    message = str(refused.value)
    assert 'suite.device = "cuda" asks for a CUDA device and torch sees none' in message
    assert "device='cpu'" in message and "skipif" in message and "--device" not in message
    with pytest.raises(UsageError, match=r"device='cuda' asks for a CUDA device .*pass device='cpu'"):
        ampsuite_run(suite, device="cuda")
    assert [r["device"] for r in ampsuite_run(cuda_suite, device="cpu").doc["cells"]] == ["cpu"]


def test_isolated_runs_refuse_objects(ampsuite_plugin, ampsuite_run):
    ampsuite_plugin(ConstantWorkload())
    with pytest.raises(UsageError, match=r"registered objects \(ConstantWorkload-0\)"):
        ampsuite_run({"workloads": {"c": {"plugin": "constant", "batch_size": 2}}}, isolated=True)
    with pytest.raises(ValueError, match="already registered"):
        ampsuite_plugin(ConstantWorkload(), name="ConstantWorkload-0")


PID_PLUGIN = """
import os
from ampsuite import Technique, hookimpl

def apply(step, options):
    step.notes["pid"] = os.getpid()
    return step

@hookimpl
def ampsuite_techniques():
    return [Technique(name="record-pid", summary="notes the process that applies it", apply=apply)]
"""


@pytest.mark.slow
def test_plugin_modules_load_by_name_in_isolated_workers(ampsuite_run, tmp_path, monkeypatch):
    (tmp_path / "pid_plugin.py").write_text(PID_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = {"workloads": {"toy": {"batch_size": 2, "hidden": 8}}, "combinations": {"pid": ["record-pid"]}}
    isolated = ampsuite_run(suite, plugins=["pid_plugin"], isolated=True)
    isolated.assert_all_passed()
    assert isolated.notes("toy/pid/bs2")["pid"] != os.getpid()
    in_process = ampsuite_run(suite, plugins=["pid_plugin"])
    assert in_process.notes("toy/pid/bs2")["pid"] == os.getpid()
    assert {"name": "pid_plugin", "module": "pid_plugin", "version": "unknown", "source": "-p"} in in_process.doc[
        "run"
    ]["plugins"]


def test_dict_suites_write_valid_toml():
    from ampsuite.testing import suite_text

    text, where = suite_text(
        {
            "suite": {"name": "x y", "timeout": 1.5},
            "workloads": {"toy": {"batch_size": [2, 4], "hidden": 8}},
            "combinations": {"fp32": [], "odd key": ["noop"]},
            "include": [{"workload": "toy", "options": {"hidden": 8}}],
        },
        measure=None,
    )
    data = tomllib.loads(text)
    assert where == "<suite>"
    assert data["combinations"]["odd key"] == ["noop"]
    assert data["include"] == [{"workload": "toy", "options": {"hidden": 8}}]
    assert "measure" not in data


# ---------------------------------------------------------------------------
# new-plugin, in this process
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad name", "not a valid package name"),
        ("-dash", "not a valid package name"),
        ("9lives", "not a Python identifier"),
        ("class", "not a Python identifier"),
        ("suite", "would shadow"),
        ("json", "would shadow"),
        ("pluggy", r"is already installed here \(.*pluggy"),
        ("Jinja2", "is already installed here"),
    ],
)
def test_new_plugin_rejects_bad_names(name, message, tmp_path):
    from ampsuite.cli import main

    with pytest.raises(UsageError, match=message):
        scaffold.create(name, tmp_path)
    assert main(["new-plugin", name, "-o", str(tmp_path)]) == 4
    assert list(tmp_path.iterdir()) == []


def test_new_plugin_never_overwrites(tmp_path, capsys):
    from ampsuite.cli import main

    assert main(["new-plugin", "ampsuite-mine", "-o", str(tmp_path)]) == 0
    readme = tmp_path / "ampsuite-mine" / "README.md"
    readme.write_text("mine")
    assert main(["new-plugin", "ampsuite-mine", "-o", str(tmp_path)]) == 4
    assert "already exists" in capsys.readouterr().err
    assert readme.read_text() == "mine"


def test_new_plugin_files_and_names(tmp_path):
    target = scaffold.create("Acme.Bench-Kit", tmp_path)
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "pyproject.toml",
        "src/acme_bench_kit/__init__.py",
        "src/acme_bench_kit/_impl.py",
        "src/acme_bench_kit/plugin.py",
        "tests/test_acme_bench_kit.py",
    ]
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["name"] == "Acme.Bench-Kit"
    assert project["entry-points"]["ampsuite"] == {"Acme.Bench-Kit": "acme_bench_kit.plugin"}
    for path in target.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")
    assert '"Acme.Bench-Kit-mlp"' in (target / "src/acme_bench_kit/plugin.py").read_text()


def test_the_generated_plugin_registers_without_importing_torch(tmp_path):
    """``ampsuite list`` and every suite-file check load every plugin: the skeleton's registration module names its
    torch code with ``lazy``, as the built-ins do, so registering it imports no torch."""
    src = scaffold.create("ampsuite-lazy", tmp_path) / "src"
    code = (
        "import sys\n"
        "from ampsuite.host.manager import PluginSettings, load_registry\n"
        "registry = load_registry(PluginSettings(extra=('ampsuite_lazy.plugin',), autoload=False))\n"
        "print(registry.workloads['ampsuite-lazy-mlp'].build, registry.techniques['ampsuite-lazy-grad-clip'].apply)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
        "import ampsuite_lazy._impl\n"  # and the named code is there
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPSUITE_")} | {"PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["lazy('ampsuite_lazy._impl:build') lazy('ampsuite_lazy._impl:clip')", "[]"]


def _torch_pin(dependencies: list[str]) -> SpecifierSet:
    return next(Requirement(d).specifier for d in dependencies if Requirement(d).name == "torch")


def test_the_skeleton_and_the_guide_pin_the_torch_ampsuite_requires():
    own = [r for r in importlib.metadata.requires("ampsuite") or [] if Requirement(r).marker is None]
    generated = tomllib.loads(scaffold.render("ampsuite-mine")["pyproject.toml"])["project"]["dependencies"]
    guide = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    block = guide.split("**`pyproject.toml`**", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    shown = tomllib.loads(block)["project"]["dependencies"]
    assert _torch_pin(generated) == _torch_pin(shown) == _torch_pin(own)


# ---------------------------------------------------------------------------
# the example package and a generated one, installed into a virtualenv
# ---------------------------------------------------------------------------


@dataclass
class Venv:
    root: Path
    python: Path
    env: dict[str, str]

    def run(self, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.python), *args],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def install(self, source: Path) -> None:
        """Install a copy of ``source`` into the venv only (never the global environment)."""
        copy = self.root / "src" / source.name
        shutil.copytree(source, copy, ignore=COPY_IGNORE)
        self.run(
            "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
            "--disable-pip-version-check", str(copy),
        )  # fmt: skip

    def pytest_args(self) -> list[str]:
        """``-p ampsuite.testing`` until ampsuite's pytest11 entry point is there to load it."""
        # Every distribution, not deduplicated by name: what pytest (pluggy) iterates.
        code = "import importlib.metadata as m; print([e.value for d in m.distributions() for e in d.entry_points])"
        return [] if "'ampsuite.testing'" in self.run("-c", code).stdout else ["-p", "ampsuite.testing"]


def _ampsuite_sources(into: Path) -> Path:
    """The files a wheel of ampsuite is built from, copied so the build never writes into the checkout."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, into / name)
    for package in ("suite", "plugins"):
        shutil.copytree(REPO / package, into / package, ignore=COPY_IGNORE)
    return into


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("plugin-venv")
    # No pip of its own: the outer pip, run by the venv's interpreter, installs into the venv.
    layered_venv(root / "env")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMPSUITE_", "PYTHONPATH", "PYTEST_ADDOPTS"))}
    env.update(COLUMNS="200", PIP_NO_INPUT="1")
    venv = Venv(root, root / "env" / "bin" / "python", env)
    assert venv.run("-c", "import sys; print(sys.prefix)").stdout.strip() == str(root / "env")
    venv.install(_ampsuite_sources(root / "ampsuite-src"))
    venv.install(EXAMPLE)
    return venv


EXAMPLE_SUITE = toy_suite(
    "extras",
    timeout=120,
    toy={"plugin": "toy", "batch_size": 4, "hidden": 8},
    workloads={"lstm": {"plugin": "lstm-lm", "batch_size": 4, "vocab": 32, "hidden": 16, "layers": 2, "seq_len": 8}},
    combinations={"fp32": [], "ckpt": ["extras-checkpointing"]},
    measure=TINY_MEASURE,
)
"""The example's workload and technique beside the toy, whose model has no blocks to checkpoint."""


@pytest.fixture(scope="module")
def example_run(venv: Venv) -> tuple[dict, Path, str]:
    """``python -m ampsuite run`` of a suite using the example's workload and technique, in the venv."""
    work = venv.root / "run"
    work.mkdir()
    (work / "extras.toml").write_text(EXAMPLE_SUITE)
    proc = venv.run(
        "-m", "ampsuite", "run", "extras.toml", "-o", "out/results.json", "--report-dir", "out",
        "--device", "cpu", "--no-peaks", cwd=work,
    )  # fmt: skip
    return json.loads((work / "out" / "results.json").read_text()), work / "out", proc.stdout


@pytest.mark.slow
def test_the_venv_imports_the_installed_copies(venv):
    out = venv.run(
        "-c", "import ampsuite, ampsuite_extras; print(ampsuite.__file__); print(ampsuite_extras.__file__)"
    ).stdout
    site = str(venv.root / "env")
    assert all(line.startswith(site) for line in out.split()), out


@pytest.mark.slow
def test_list_shows_the_example_plugins_with_their_version(venv):
    out = venv.run("-m", "ampsuite", "list").stdout
    assert "workload lstm-lm (plugin extras-lstm) [unit: tokens]" in out
    listed = "technique extras-checkpointing (plugin extras-checkpointing) [order 25; conflicts with activation-"
    assert listed + "checkpointing; workload traits model]" in out
    assert "every (int >= 1, default 1)" in out  # options with their rules and help
    for line in ("extras-lstm", "extras-checkpointing"):
        (row,) = [r for r in out.splitlines() if f" {line} " in r and "ampsuite_extras" in r]
        assert [c.strip() for c in row.split("│")][1:5] == [line, "ampsuite-extras", "0.1.0", "entry point"]


@pytest.mark.slow
def test_blocking_an_example_plugin(venv):
    out = venv.run("-m", "ampsuite", "list", "-p", "no:extras-lstm").stdout
    assert "lstm-lm" not in out and "extras-checkpointing" in out


@pytest.mark.slow
def test_example_suite_results(example_run):
    doc, _, _ = example_run
    statuses = {r["id"]: r["status"] for r in doc["cells"]}
    assert statuses == {
        "lstm/fp32/bs4": "passed",
        "lstm/ckpt/bs4": "passed",
        "toy/fp32/bs4": "passed",
        "toy/ckpt/bs4": "skipped",
    }
    cells = {r["id"]: r for r in doc["cells"]}
    assert cells["lstm/fp32/bs4"]["workload"]["unit"] == "tokens"
    assert cells["lstm/ckpt/bs4"]["notes"]["extras_checkpointing"]["checkpointed"] == ["blocks.0", "blocks.1"]
    assert "no blocks at model.blocks" in cells["toy/ckpt/bs4"]["evidence"]["reason"]
    plugins = {p["name"]: p for p in doc["run"]["plugins"]}
    assert plugins["extras-lstm"]["version"] == "0.1.0"
    assert plugins["extras-checkpointing"]["source"] == "entry point (ampsuite-extras)"


@pytest.mark.slow
def test_example_suite_report(example_run):
    _, out, stdout = example_run
    assert "report:" in stdout
    index = (out / "index.html").read_text()
    pages = index + "".join(p.read_text() for p in out.glob("*.html"))
    for name in ("lstm-lm", "lstm/ckpt/bs4", "extras-checkpointing", "tokens"):
        assert name in pages, name
    assert "Activation checkpointing (extras)" in index  # the example's report section
    assert "2 of 2 blocks" in index


@pytest.mark.slow
def test_example_package_tests_pass_in_the_venv(venv):
    tests = venv.root / "src" / EXAMPLE.name
    proc = venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", *venv.pytest_args(), cwd=tests, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "skipped" not in proc.stdout


@pytest.mark.slow
def test_generated_plugin_installs_lists_and_passes_its_tests(venv):
    parent = venv.root / "generated"
    parent.mkdir()
    venv.run("-m", "ampsuite", "new-plugin", "ampsuite-scaffolded", "-o", str(parent))  # templates from the install
    venv.install(parent / "ampsuite-scaffolded")
    out = venv.run("-m", "ampsuite", "list").stdout
    assert "workload ampsuite-scaffolded-mlp (plugin ampsuite-scaffolded)" in out
    assert "technique ampsuite-scaffolded-grad-clip (plugin ampsuite-scaffolded)" in out
    copy = venv.root / "src" / "ampsuite-scaffolded"
    proc = venv.run("-m", "pytest", "-q", "-p", "no:cacheprovider", *venv.pytest_args(), cwd=copy, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout
