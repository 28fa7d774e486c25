"""Installed, the package's techniques are found through its entry points, with the package as their source."""

from __future__ import annotations

import os
import subprocess
import sys

PLUGINS = {
    "stem-pad": "resnet-kernels-stem-pad",
    "maxpool-offsets": "resnet-kernels-maxpool-offsets",
    "persistent-batch-norm": "resnet-kernels-persistent-batch-norm",
    "cudnn-batch-norm": "resnet-kernels-cudnn-batch-norm",
}
"""Each technique and the entry point (plugin) that registers it."""


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    # no AMPSUITE_* variables: entry points load as they do for a user (ampsuite's own tests turn them off)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPSUITE_")}
    env["COLUMNS"] = "200"  # rich tables stay on one line per row
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_ampsuite_list_shows_each_technique_with_the_package_as_its_source() -> None:
    out = _python("-m", "ampsuite", "list").stdout
    for technique, plugin in PLUGINS.items():
        assert f"technique {technique} (plugin {plugin}) [order " in out, technique
        (row,) = [line for line in out.splitlines() if f" {plugin} " in line]
        assert [c.strip() for c in row.split("│")][1:5] == [
            plugin,
            "ampsuite-resnet-kernels",
            "0.1.0",
            "entry point",
        ], row
        assert f"ampsuite_resnet_kernels.{technique.replace('-', '_')}" in row, row


def test_registering_the_package_imports_no_torch() -> None:
    """``ampsuite list``, ``--help`` and suite-file errors load every installed plugin: one that imports torch at
    its top costs each of them seconds."""
    code = (
        "import sys\n"
        "from ampsuite.testing import load_plugins\n"
        "registry = load_plugins(autoload=True)\n"
        f"assert {sorted(PLUGINS)!r} == sorted(t for t in registry.techniques if t in {sorted(PLUGINS)!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'triton', 'numpy')))\n"
    )
    assert _python("-c", code).stdout.strip() == "[]"
