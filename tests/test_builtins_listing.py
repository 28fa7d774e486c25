"""What ampsuite itself ships: without installed plugins, ``ampsuite list`` shows only the built-ins.

Techniques written for one model's shapes live in example packages (examples/ampsuite-resnet-kernels), which a
user installs; the built-ins, the default suites and ``ampsuite tune``'s defaults must not need them.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ampsuite.host.manager import AUTOLOAD_ENV

RESNET_KERNELS = ("stem-pad", "maxpool-offsets", "persistent-batch-norm", "cudnn-batch-norm")
"""The techniques of examples/ampsuite-resnet-kernels, once built-ins."""


def test_list_without_entry_points_shows_none_of_the_example_packages_techniques() -> None:
    env = {k: v for k, v in os.environ.items() if k != "AMPSUITE_PLUGINS"}
    env.update({AUTOLOAD_ENV: "1", "COLUMNS": "200"})
    proc = subprocess.run(
        [sys.executable, "-m", "ampsuite", "list"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "technique amp-fp16 (plugin amp)" in proc.stdout  # the built-ins are listed
    for name in RESNET_KERNELS:
        assert f"technique {name} " not in proc.stdout, name
    assert "ampsuite_resnet_kernels" not in proc.stdout and "entry point" not in proc.stdout


def test_the_default_suites_name_none_of_them() -> None:
    from ampsuite.spec import suitefile

    for device in ("cpu", "cuda"):
        spec = suitefile.load(suitefile.default_suite_path(device))
        named = {t for combination in spec.as_dict()["combinations"].values() for t in combination}
        assert not named & set(RESNET_KERNELS), device
