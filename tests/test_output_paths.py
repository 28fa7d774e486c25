"""A path of the wrong kind where a command writes is refused in one line before anything runs or is written: a
directory for a results file, a file for a folder, an empty path, a file that is not asv's machine file; and a write
the operating system refuses names the path that could not be written, never the input it was copied from."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import toy_suite

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode, UsageError
from ampsuite.results.atomic import write_json_atomic

EXAMPLE = Path(__file__).resolve().parent.parent / "reports" / "example" / "results.json"
"""A real run's results file (the README's figures): one that loads and renders."""


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with a file's bytes (None for a folder): what a refused command must leave as is."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path as the current directory, with a suite, a folder holding a file the user keeps, and a plain file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.toml").write_text(toy_suite("paths", toy={"batch_size": 4}), encoding="utf-8")
    (tmp_path / "mydir").mkdir()
    (tmp_path / "mydir" / "notes.txt").write_text("precious\n", encoding="utf-8")
    (tmp_path / "afile").write_text("a file\n", encoding="utf-8")
    return tmp_path


# --- run -o, max-batch -o, --report-dir --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("mydir", "mydir: is a directory; -o names the results file"),
        ("mydir/", "mydir/: is a directory; -o names the results file"),
        (".", ".: is a directory; -o names the results file"),
        ("", "-o '': an empty path; -o names the results file"),
        ("afile/x.json", "afile/x.json: afile is a file, not a directory; -o names the results file"),
        ("newdir/", "newdir/: ends with '/', as a directory does; -o names the results file"),
    ],
)
@pytest.mark.parametrize("command", ["run", "max-batch"])
def test_an_output_that_is_no_file_path_is_refused_before_anything_runs(
    workdir: Path, capsys: pytest.CaptureFixture[str], command: str, value: str, says: str
) -> None:
    before = _tree(workdir)
    argv = [command, "suite.toml", "-o", value]
    assert cli.main(argv + (["--no-peaks", "--no-report"] if command == "run" else [])) == ExitCode.USAGE_ERROR
    assert _one_error(capsys).endswith(says)
    assert _tree(workdir) == before  # the folder is not renamed aside, no results file, no lock, no report


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("suite.toml", "suite.toml: is a file, not a directory; --report-dir names the report's folder"),
        ("afile/site", "afile/site: afile is a file, not a directory; --report-dir names the report's folder"),
        ("", "--report-dir '': an empty path; --report-dir names the report's folder"),
    ],
)
def test_a_report_dir_that_cannot_be_a_folder_is_refused_before_the_run(
    workdir: Path, capsys: pytest.CaptureFixture[str], value: str, says: str
) -> None:
    before = _tree(workdir)
    argv = ["run", "suite.toml", "-o", "r.json", "--no-peaks", "--report-dir", value]
    assert cli.main(argv) == ExitCode.USAGE_ERROR
    assert _one_error(capsys).endswith(says)
    assert _tree(workdir) == before


def test_a_results_file_and_report_folder_of_one_path_are_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "suite.toml", "-o", "out", "--report-dir", "out", "--no-peaks"]) == ExitCode.USAGE_ERROR
    assert _one_error(capsys).endswith("out: -o and --report-dir name the same path; -o names the results file")
    assert not (workdir / "out").exists()


def test_a_folder_is_never_set_aside_as_an_earlier_run(workdir: Path) -> None:
    before = _tree(workdir)
    with pytest.raises(UsageError, match="mydir: is a directory"):
        results.set_aside(workdir / "mydir")
    with pytest.raises(UsageError, match="mydir: is a directory; --markdown must be a file"):
        results.claim(workdir / "mydir", [], "--markdown")
    assert _tree(workdir) == before


def test_a_results_file_under_a_file_names_that_file(workdir: Path) -> None:
    with pytest.raises(NotADirectoryError, match="afile is a file, not a directory"):
        write_json_atomic(workdir / "afile" / "sub" / "r.json", {})
    assert (workdir / "afile").read_text(encoding="utf-8") == "a file\n"


# --- new-plugin -o ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("afile", "afile: is a file, not a directory; -o names the directory in which ampsuite-paths/ is created"),
        ("afile/x", "afile/x: afile is a file, not a directory; -o names the directory in which ampsuite-paths/"),
    ],
)
def test_new_plugin_into_a_file_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], value: str, says: str
) -> None:
    before = _tree(workdir)
    assert cli.main(["new-plugin", "ampsuite-paths", "-o", value]) == ExitCode.USAGE_ERROR
    assert says in _one_error(capsys)
    assert _tree(workdir) == before


def test_new_plugin_on_a_full_disk_names_the_file_and_leaves_no_half_package(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: Path, *args: Any, **kwargs: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", full)
    assert cli.main(["new-plugin", "ampsuite-paths", "-o", "plugins"]) == ExitCode.OUTPUT_ERROR
    err = _one_error(capsys)
    assert err.startswith("ampsuite: error: plugins/ampsuite-paths/") and "(errno ENOSPC)" in err
    assert not (workdir / "plugins" / "ampsuite-paths").exists()  # a next try does not find the name taken


# --- asv-machine --file ---------------------------------------------------------------------------------------------


def test_asv_machine_never_rewrites_a_file_that_is_not_asvs(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = Path(shutil.copy(EXAMPLE, workdir / "r.json"))
    other = workdir / "other.json"
    other.write_text(json.dumps({"name": "not a machine file"}), encoding="utf-8")
    before = _tree(workdir)
    assert cli.main(["asv-machine", "--file", str(run)]) == ExitCode.USAGE_ERROR
    assert _one_error(capsys).endswith(
        f"{run}: holds an ampsuite run, not asv machines; --file names asv's machine file (~/.asv-machine.json)"
    )
    assert cli.main(["asv-machine", "--file", "other.json"]) == ExitCode.USAGE_ERROR
    assert "other.json: is not an asv machine file" in _one_error(capsys)
    assert cli.main(["asv-machine", "--file", "mydir"]) == ExitCode.USAGE_ERROR
    assert _one_error(capsys).endswith("mydir: is a directory; --file names asv's machine file")
    assert _tree(workdir) == before
    results.load(run)  # still whole, its checksum intact


def test_asv_machine_updates_a_machine_file_in_place(workdir: Path) -> None:
    path = workdir / "machines.json"
    path.write_text(json.dumps({"version": 1, "other": {"machine": "other", "os": "x"}}), encoding="utf-8")
    assert cli.main(["asv-machine", "--file", "machines.json", "--machine", "bench-1"]) == ExitCode.OK
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["other"] == {"machine": "other", "os": "x"} and written["bench-1"]["machine"] == "bench-1"
    assert sorted(p.name for p in workdir.glob("machines*")) == ["machines.json"]  # asv's file: updated, no backup


def test_asv_machine_into_an_unwritable_place_is_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from asv import util

    def refused(path: str, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.path.abspath(path))

    monkeypatch.setattr(util, "write_json", refused)
    assert cli.main(["asv-machine", "--file", "m.json"]) == ExitCode.OUTPUT_ERROR
    assert _one_error(capsys).endswith("m.json: cannot write: Permission denied (errno EACCES)")


# --- report: the site's copy of a results file ---------------------------------------------------------------------


def test_a_report_that_cannot_copy_the_results_names_the_copy_not_the_input(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    r0 = Path(shutil.copy(EXAMPLE, workdir / "r0.json"))
    real = shutil.copyfile

    def full(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(dst).name != "results.json":
            return real(src, dst, *args, **kwargs)
        Path(dst).write_bytes(Path(src).read_bytes()[:10])  # sendfile got this far
        # As shutil's sendfile copy raises it: the source as filename, the destination as filename2.
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    assert cli.main(["report", "r0.json", "-o", "site"]) == ExitCode.OUTPUT_ERROR
    err = _one_error(capsys)
    assert err.endswith(f"{Path('site') / 'results.json'}: cannot write: No space left on device (errno ENOSPC)")
    assert "r0.json" not in err
    assert not (workdir / "site" / "results.json").exists()  # no cut-off copy that fails its checksum
    results.load(r0)


def test_a_report_whose_stylesheet_cannot_be_copied_names_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = shutil.copyfile

    def full(source: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(target).parent.name != "static":
            return real(source, target, *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device", str(source), None, str(target))

    monkeypatch.setattr(shutil, "copyfile", full)
    example = Path(__file__).resolve().parent.parent / "reports" / "example" / "results.json"
    assert cli.main(["report", str(example), "-o", str(tmp_path / "site")]) == ExitCode.OUTPUT_ERROR
    err = capsys.readouterr().err
    assert f"{tmp_path / 'site' / 'static'}" in err and "No space left on device (errno ENOSPC)" in err
    import importlib.resources

    assert str(importlib.resources.files("ampsuite.report") / "static") not in err  # the source did not fail
