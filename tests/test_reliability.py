"""Reliability at the edges: names that become paths, terminal text, OS errors, one run per results file,
bounds on work, and reports of runs that are not comparable."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_MEASURE, run_ampsuite, toy_suite

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode, OutputError, ResultsLockedError, SuiteFileError
from ampsuite.spec import limits, names
from ampsuite.spec.suitefile import loads

REPO = Path(__file__).resolve().parents[1]


def _suite(name: str) -> str:
    """One toy cell whose id is no file name as it stands and reads as rich markup: ``toy[hidden=8]/fp32/bs4``."""
    return toy_suite(
        name,
        toy=None,
        workloads={"toy": {"plugin": "toy", "batch_size": 4, "hidden": [8]}},
        measure={**FAST_MEASURE, "max_steps": 3, "max_seconds": 0.2},
    )


def _ampsuite(*argv: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_ampsuite(*argv, cwd=cwd, timeout=timeout)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    return err


# --- names -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "a/../../b", "..", "C:evil", "bad\x07bell", " "])
def test_suite_names_that_read_as_paths_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(SuiteFileError, match=r"^s\.toml: suite\.name: expected a (non-empty )?name"):
        loads(toy_suite(name), "s.toml")


@pytest.mark.parametrize("name", ["cpu-default", "toy[/]", "a/b", "x" * 300, "ü" * 200, ".hidden", "a b"])
def test_path_components_are_one_short_safe_folder(name: str) -> None:
    slug = names.path_component(name)
    assert 0 < len(slug) <= names.MAX_COMPONENT
    assert "/" not in slug and "\\" not in slug and not slug.startswith(".") and slug not in (".", "..")
    assert slug == names.path_component(name)  # stable
    assert (slug == name) == (name == "cpu-default")


def test_names_that_slug_alike_get_different_folders() -> None:
    assert names.path_component("a b") != names.path_component("a-b") != names.path_component("a/b")


@pytest.mark.slow
def test_run_with_markup_and_a_long_name_stays_under_reports_and_shows(tmp_path: Path) -> None:
    name = "toy[/]" + "n" * 300
    (tmp_path / "s.toml").write_text(_suite(name))
    proc = _ampsuite("run", "s.toml", "--no-peaks", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "reports").iterdir()
    assert folder.name == names.path_component(name) and (folder / "index.html").exists()
    shown = _ampsuite("show", str(folder / "results.json"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "toy[hidden=8]/fp32/bs4" in shown.stdout and "toy[/]nnn" in shown.stdout


# --- numbers and sizes -----------------------------------------------------


@pytest.mark.parametrize("line", ["lr = nan", "lr = inf", "lr = -inf"])
def test_non_finite_plugin_options_are_refused(registry: Any, line: str) -> None:
    from ampsuite.spec.matrix import expand

    spec = loads(f"[workloads.toy]\nbatch_size = 8\n{line}\n", "s.toml")
    with pytest.raises(
        SuiteFileError, match=r"^s\.toml: workloads\.toy\.lr: expected a finite number, got -?(nan|inf)$"
    ):
        expand(spec, registry, "cpu")


@pytest.mark.parametrize(
    ("table", "line", "key"),
    [
        ("measure", "processes = 1000000", "measure.processes"),
        ("measure", "max_steps = 10000000", "measure.max_steps"),
        ("suite", "cpu_threads = 100000", "suite.cpu_threads"),
        ("workloads.toy", "gpus = 100000", "workloads.toy.gpus"),
    ],
)
def test_counts_that_multiply_work_are_bounded(table: str, line: str, key: str) -> None:
    text = f"[workloads.toy]\nbatch_size = 8\n[{table}]\n{line}\n" if table != "workloads.toy" else ""
    text = text or f"[workloads.toy]\nbatch_size = 8\n{line}\n"
    with pytest.raises(SuiteFileError, match=rf"^s\.toml: {key}: expected at most [\d,]+ \(ampsuite's bound"):
        loads(text, "s.toml")


@pytest.mark.parametrize(
    ("line", "expected"),
    [("warmup_seconds = -1", "expected a number >= 0, got -1"), ("warmup_seconds = nan", "expected a finite number")],
)
def test_a_warm_up_of_negative_or_no_finite_seconds_is_refused(line: str, expected: str) -> None:
    with pytest.raises(SuiteFileError, match=rf"^s\.toml: measure\.warmup_seconds: {expected}"):
        loads(f"[workloads.toy]\nbatch_size = 8\n[measure]\n{line}\n", "s.toml")
    assert (
        loads("[workloads.toy]\nbatch_size = 8\n[measure]\nwarmup_seconds = 1.5\n", "s.toml").measure.warmup_seconds
        == 1.5
    )


@pytest.mark.parametrize(("table", "line"), [("measure", "noise_target = 1.5"), ("quality", "steps = 10\np_value = 2")])
def test_a_fraction_above_one_is_refused_as_a_fraction(table: str, line: str) -> None:
    text = f"[workloads.toy]\nbatch_size = 8\n[{table}]\n{line}\n"
    with pytest.raises(SuiteFileError, match=r"expected at most 1 \(a fraction: 1 is 100%\), got"):
        loads(text, "s.toml")


def test_a_million_cell_matrix_is_refused_before_it_is_built(registry: Any) -> None:
    from ampsuite.spec.matrix import expand, matrix_size

    sizes = ", ".join(str(n) for n in range(1, 1001))
    spec = loads(f"[workloads.toy]\nbatch_size = [{sizes}]\nhidden = [{sizes}]\n", "s.toml")
    assert matrix_size(spec, registry) == 1_000_000
    start = time.monotonic()
    with pytest.raises(SuiteFileError, match=r"^s\.toml: the matrix has 1,000,000 cells, .* pass --allow-large$"):
        expand(spec, registry, "cpu")
    assert time.monotonic() - start < 5
    small = loads("[workloads.toy]\nbatch_size = [1, 2, 3]\n", "s.toml")
    assert len(expand(small, registry, "cpu", max_cells=None)) == 3 <= limits.MAX_CELLS


# --- OS errors -------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    if (
        shutil.which("mount") is None
        or subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)]).returncode
    ):
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_write_errors_keep_the_last_good_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, healthy_run: Any
) -> None:
    path = tmp_path / "results.json"
    shutil.copy(healthy_run[0], path)
    before = path.read_bytes()
    doc = results.load(path)

    def refuse(*_: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputError) as info:
        results.ResultsWriter(path, doc)
    assert str(info.value) == f"{path}: cannot write: Read-only file system (errno EROFS)"
    assert info.value.exit_code == ExitCode.OUTPUT_ERROR == 6
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.slow
def test_a_full_disk_ends_the_run_in_one_line_exit_6(tmp_path: Path, healthy_run: Any) -> None:
    with _tmpfs(tmp_path / "small", "size=64k") as disk:
        (tmp_path / "s.toml").write_text(_suite("full"))
        shutil.copy(healthy_run[0], disk / "results.json")
        good = (disk / "results.json").read_bytes()
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        proc = _ampsuite("run", "s.toml", "-o", str(disk / "results.json"), "--no-peaks", "--no-report", cwd=tmp_path)
        assert proc.returncode == ExitCode.OUTPUT_ERROR, proc.stderr
        assert "No space left on device (errno ENOSPC)" in _one_line(proc)
        backups = [p for p in disk.iterdir() if p.name.startswith("results.") and p.name != "results.json.lock"]
        assert [p.read_bytes() for p in backups if p.name != "results.json"] == [good]  # kept beside, intact
        assert not [p for p in disk.iterdir() if p.name.startswith(".results.json.")]  # no temporary left


def test_a_report_into_a_read_only_folder_is_one_line_exit_6(tmp_path: Path, healthy_run: Any) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        proc = _ampsuite("report", str(healthy_run[0]), "-o", str(ro / "site"), cwd=tmp_path)
        assert proc.returncode == ExitCode.OUTPUT_ERROR, proc.stderr
        assert "Read-only file system (errno EROFS)" in _one_line(proc)


# --- one run per results file ----------------------------------------------


@pytest.mark.slow
def test_a_second_run_on_a_held_results_file_refuses_naming_the_holder(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(_suite("locked"))
    out = tmp_path / "results.json"
    with results.locked(out, argv=["ampsuite", "run", "first"]):
        proc = _ampsuite("run", "s.toml", "-o", str(out), "--no-peaks", "--no-report", cwd=tmp_path)
        resumed = _ampsuite("run", "s.toml", "-o", str(out), "--resume", "--no-peaks", "--no-report", cwd=tmp_path)
    for p in (proc, resumed):
        assert p.returncode == ExitCode.USAGE_ERROR, p.stderr
        assert f"{out}: in use by another run (pid {os.getpid()} on " in _one_line(p)
        assert "ampsuite run first" in p.stderr
    assert not out.exists() and not results.lock_path(out).exists()


@pytest.mark.slow
def test_a_killed_holder_never_blocks_and_wait_lock_waits(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    hold = "import os, sys, time; from ampsuite import results; from pathlib import Path\n"
    hold += "with results.locked(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(float(sys.argv[2]))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.Popen([sys.executable, "-c", hold, str(out), "600"], stdout=subprocess.PIPE, text=True, env=env)
    assert killed.stdout is not None and killed.stdout.readline() == "held\n"
    with pytest.raises(ResultsLockedError), results.locked(out):
        pass
    killed.kill()
    killed.wait()
    assert results.lock_path(out).exists()  # left behind by the killed run ...
    with results.locked(out):  # ... and no obstacle
        pass
    (tmp_path / "s.toml").write_text(_suite("wait"))
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out), "2"], stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    proc = _ampsuite("run", "s.toml", "-o", str(out), "--no-peaks", "--no-report", "--wait-lock", cwd=tmp_path)
    assert holder.wait() == 0
    assert proc.returncode == 0, proc.stderr
    assert results.load(out)["cells"][0]["status"] == "passed"


# --- compare ---------------------------------------------------------------


def test_report_compare_refuses_runs_of_another_torch(tmp_path: Path, healthy_run: Any, capsys: Any) -> None:
    doc = json.loads(Path(healthy_run[0]).read_text())
    doc["environment"]["torch"] = "1.0.0"
    doc.pop("integrity")
    other = tmp_path / "other.json"
    results.ResultsWriter(other, doc)
    code = cli.main(["report", str(healthy_run[0]), "--compare", str(other), "-o", str(tmp_path / "site")])
    assert code == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"ampsuite: error: {healthy_run[0]}: measured in another environment than {other}, refusing to compare: torch"
    )
    assert f"to set them side by side: ampsuite report {healthy_run[0]} {other} -o DIR" in err
    assert not (tmp_path / "site").exists()


@pytest.mark.slow
def test_a_builtin_module_the_fork_server_cannot_import_is_named_in_one_line(tmp_path: Path) -> None:
    """A fresh venv held torch 2.13.0+cpu beside a torchvision built for the CUDA torch: ``import torchvision``
    raised RuntimeError in the fork server, which then died, and every run ended in "internal error". Here a
    torchvision that raises the same way stands first on the path of a run of its own."""
    fake = tmp_path / "fake" / "torchvision"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    suite = tmp_path / "s.toml"
    suite.write_text(_suite("broken-vision"), encoding="utf-8")
    out = tmp_path / "out" / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-m", "ampsuite", "run", str(suite), "-o", str(out), "--no-report", "--no-peaks"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == ExitCode.USAGE_ERROR, done.stderr
    assert last.startswith(
        "ampsuite: error: plugin 'ampsuite.plugins.workloads._cnn': cannot be imported: RuntimeError: "
    )
    assert "operator torchvision::nms does not exist (torch " in last and "built for each other" in last
    assert "internal error" not in done.stderr


# --- command-line values and plugins that exit --------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "tune", "max-batch"])
@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e400", "abc", "700000"])
def test_timeout_refuses_what_the_suite_file_key_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, value: str
) -> None:
    (tmp_path / "s.toml").write_text(_suite("t"))
    code = cli.main([command, str(tmp_path / "s.toml"), f"--timeout={value}"])
    assert code == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument --timeout: expected " in err and repr(value) in err
    with pytest.raises(SuiteFileError, match=r"^s\.toml: suite\.timeout: expected "):
        loads(f"[suite]\ntimeout = {value if value not in ('abc', 'nan', 'inf') else repr(value)}\n", "s.toml")


@pytest.mark.parametrize("plugin", ["bp_sys_exit", "bp_sys_exit_message", "bp_hook_exits"])
@pytest.mark.parametrize("command", ["list", "run"])
def test_a_plugin_that_calls_sys_exit_is_a_one_line_plugin_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], plugin: str, command: str
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tests" / "broken_plugins"))
    (tmp_path / "s.toml").write_text(_suite("exits"))
    argv = [command, "-p", plugin]
    if command == "run":
        argv += [str(tmp_path / "s.toml"), "-o", str(tmp_path / "r.json"), "--no-peaks", "--no-report"]
    assert cli.main(argv) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"ampsuite: error: plugin {plugin!r}: "), err
    assert "sys.exit(" in err and not (tmp_path / "r.json").exists()


def test_sys_exit_inside_a_command_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plugin's code that calls sys.exit("...") while a command runs (a report section hook, say)."""
    from ampsuite.commands import listing

    def exits(args: Any) -> None:
        sys.exit("a message, not an exit code")

    monkeypatch.setattr(listing, "registry", exits)
    assert cli.main(["list"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("ampsuite: error: sys.exit('a message, not an exit code') was called while the command ran")
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_run_beside_a_folder_named_ampsuite_measures(tmp_path: Path) -> None:
    # Run from the folder that holds a checkout named `ampsuite`: the fork server's `python -c` must not import
    # that folder as an empty namespace package in place of the installed ampsuite (every cell crashed).
    (tmp_path / "ampsuite").mkdir()
    (tmp_path / "s.toml").write_text(_suite("beside"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    # As the `ampsuite` script starts: the working directory is not on its own sys.path (nor is -P set).
    script = "import sys; sys.path.remove(''); from ampsuite.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", script, "run", "s.toml", "-o", "r.json", "--no-report", "--no-peaks"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["status"] for r in results.load(tmp_path / "r.json")["cells"]] == ["passed"]
