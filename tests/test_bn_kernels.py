"""reports/h200/bn_kernels.py: the hand-written batch norm kernels the next GPU session times agree with PyTorch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "reports" / "h200" / "bn_kernels.py"


def test_the_hand_written_batch_norm_matches_pytorch_forward_and_backward() -> None:
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # every case compared its output, running statistics and gradients, the identity's where it has one
    lines = [line for line in proc.stdout.splitlines() if "relative max error" in line]
    assert len(lines) == 5 * 6 + 3 and sum("didentity" in line for line in lines) == 3
    assert proc.stdout.splitlines()[-1].startswith("worst ")
