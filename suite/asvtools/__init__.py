"""Historical tracking with airspeed velocity (asv).

- :mod:`suite.asvtools.environment`: the ``ampsuite-venv`` asv environment type
  (reuses the installed torch; installs only ampsuite per commit; no network).
- :mod:`suite.asvtools.publisher`: makes every ``asv publish`` site work offline
  with the pinned copies in ``vendor/`` (:mod:`suite.asvtools.offline`).
- :mod:`suite.asvtools.asv_plugin`: what ``asv.conf.json`` loads; needs asv.
- :mod:`suite.asvtools.machine`: asv's machine file with the GPU, without prompts.
- :mod:`suite.asvtools.plan`: a suite expanded into the cell ids the benchmarks
  in ``benchmarks/cells.py`` take as parameters.
- :mod:`suite.browser` (shared with the report's tests): loads a page in headless
  Chromium and reports every request and console error (the offline check).

Importing this package does not import asv or torch.
"""

from __future__ import annotations

from suite.asvtools.machine import write_machine_file
from suite.asvtools.offline import make_offline, remote_references

__all__ = ["make_offline", "remote_references", "write_machine_file"]
