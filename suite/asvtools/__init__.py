"""Historical tracking with airspeed velocity (asv).

- :mod:`ampsuite.asvtools.environment`: the ``ampsuite-venv`` asv environment type
  (reuses the installed torch; installs only ampsuite per commit; no network).
- :mod:`ampsuite.asvtools.publisher`: makes every ``asv publish`` site work offline
  with the pinned copies in ``vendor/``, and from file:// (:mod:`ampsuite.asvtools.offline`).
- :mod:`ampsuite.asvtools.asv_plugin`: what ``asv.conf.json`` loads; needs asv.
- :mod:`ampsuite.asvtools.machine`: asv's machine file with the GPU, without prompts.
- :mod:`ampsuite.asvtools.plan`: a suite expanded into the cell ids the benchmarks
  in ``benchmarks/cells.py`` take as their parameter.
- :mod:`ampsuite.browser` (shared with the report's tests): loads a page in headless
  Chromium and reports every request and console error (the offline check).

Importing this package does not import asv or torch.
"""

from __future__ import annotations

from ampsuite.asvtools.machine import write_machine_file
from ampsuite.asvtools.offline import make_offline, remote_references

__all__ = ["make_offline", "remote_references", "write_machine_file"]
