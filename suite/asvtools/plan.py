"""What the asv benchmarks are made of: a suite file expanded into cell ids, as JSON.

``python -m ampsuite.asvtools.plan [--suite FILE] [--device cpu|cuda]`` prints one
JSON object:

    {"suite": absolute path, "sha256": of the file's bytes, "device": "cpu"|"cuda",
     "cells": [cell id, ...] (matrix order), "skip_reasons": {cell id: reason},
     "plugins": [{"name", "version", "source"}, ...]}

The benchmarks take the cells without a skip reason as their one parameter.

``benchmarks/cells.py`` runs it with the *working tree's* ampsuite on the
path (PYTHONPATH), never with the ampsuite of the commit being measured, so
that the list of parameters asv discovers and the list every commit's
benchmark process imports are the same list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["describe", "main"]


def describe(suite: str | Path | None, device: str | None) -> dict[str, Any]:
    """Expand ``suite`` (the default suite for the device when None) for ``device`` (detected when None)."""
    from ampsuite.host import environment, session
    from ampsuite.spec import suitefile

    if suite is None:
        device = device or environment.detect_device()
        path = suitefile.default_suite_path(device)
    else:
        path = Path(suite)
    # A suite's own device stands unless --device overrides it: a CUDA suite on a CPU machine is refused, not
    # tracked under its name with CPU figures.
    p = session.plan(path, device=device)
    return {
        "suite": str(path.resolve()),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "device": p.device,
        "cells": [c.id for c in p.cells],
        "skip_reasons": {c.id: c.skip_reason for c in p.cells if c.skip_reason},
        "plugins": [{"name": i.name, "version": i.version, "source": i.source} for i in p.registry.plugins],
    }


def main(argv: Sequence[str] | None = None) -> int:
    from ampsuite.contract.errors import AmpsuiteError

    parser = argparse.ArgumentParser(prog="python -m ampsuite.asvtools.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", help="suite file (default: the default suite for the device)")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="device (default: cuda when torch sees one)")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(describe(args.suite, args.device)))
    except AmpsuiteError as exc:
        print(f"ampsuite: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
