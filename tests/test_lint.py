"""Lint and type checks are part of the tests, so the README's test command runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_check_is_clean() -> None:
    result = _run("ruff", "check", "suite", "plugins", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run("ruff", "format", "--check", "suite", "plugins", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def _stage_import_name(tmp: Path) -> Path:
    """A folder where suite/ and plugins/ sit as the package they install as (``ampsuite``, ``ampsuite.plugins``):
    mypy names modules by their path and cannot follow setuptools' package-dir mapping."""
    package = tmp / "ampsuite"
    package.mkdir()
    for entry in (ROOT / "suite").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "plugins").symlink_to(ROOT / "plugins")
    return tmp


def test_mypy_is_clean_on_suite_and_plugins(tmp_path: Path) -> None:
    # Strictness comes from pyproject.toml; the packages checked are the installed names.
    staged = _stage_import_name(tmp_path)
    kernels = ROOT / "examples" / "ampsuite-resnet-kernels" / "src"
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    packages = ["-p", "ampsuite", "-p", "ampsuite_resnet_kernels"]
    result = subprocess.run(
        [*command, "--cache-dir", str(ROOT / ".mypy_cache"), *packages],
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": os.pathsep.join([str(staged), str(kernels)])},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checked = re.search(r"in (\d+) source files", result.stdout)
    assert checked and int(checked.group(1)) > 150, result.stdout  # suite/, plugins/ and the example
