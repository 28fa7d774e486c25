"""The atomic JSON writer: a reader sees the old file or the new one, with the mode the umask allows."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsuite.results.atomic import write_json_atomic


@pytest.fixture
def umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_the_value_replacing_the_old_file_and_leaves_nothing_else(tmp_path: Path, umask: None) -> None:
    path = tmp_path / "sub" / "r.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": [2, 3]}, indent=1)
    assert json.loads(path.read_text()) == {"a": [2, 3]}
    assert os.listdir(path.parent) == ["r.json"]


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_mode_is_0644_through_the_umask_not_private(tmp_path: Path, mask: int, mode: int) -> None:
    previous = os.umask(mask)
    try:
        write_json_atomic(tmp_path / "r.json", {})
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "r.json") == mode


def test_a_value_that_is_not_json_leaves_the_old_file_and_no_temporary(tmp_path: Path, umask: None) -> None:
    path = tmp_path / "r.json"
    write_json_atomic(path, {"ok": True})
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(path, {"x": float("nan")})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"x": {1, 2}})
    assert json.loads(path.read_text()) == {"ok": True}
    assert os.listdir(tmp_path) == ["r.json"]


def test_a_failed_replace_removes_the_temporary(tmp_path: Path, umask: None) -> None:
    target = tmp_path / "r.json"
    target.mkdir()  # os.replace cannot put a file over a folder
    with pytest.raises(OSError):
        write_json_atomic(target, {"a": 1})
    assert os.listdir(tmp_path) == ["r.json"] and target.is_dir()


def test_default_and_nan_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json_atomic(path, {"x": float("nan"), "y": {1}}, default=repr, allow_nan=True)
    assert path.read_text() == '{"x": NaN, "y": "{1}"}'
