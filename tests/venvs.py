"""Virtual environments for tests that install packages, layered on the interpreter running the tests.

``python -m venv --system-site-packages`` inherits the packages of the *base*
interpreter: run from a user's venv (or conda env), that is the bare system
Python, without torch and with an old setuptools, and every install fails. A
``.pth`` file naming this interpreter's own site-packages, as the asv
environment does (suite/asvtools/environment.py), reuses whatever the tests run
with, venv, conda or system Python alike. The venv's own site-packages comes
first on ``sys.path``, so what a test installs shadows the outer copies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PTH_FILE = "_outer_site.pth"


def outer_site_packages() -> list[str]:
    """The site-packages folders of the running interpreter, in ``sys.path`` order."""
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def layered_venv(env_dir: Path) -> Path:
    """Create a venv at ``env_dir`` (no pip of its own: the outer pip installs into it); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    line = "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in outer_site_packages())
    (Path(site) / PTH_FILE).write_text(line + "\n", encoding="utf-8")
    return python
