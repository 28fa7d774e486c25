"""An asv output publisher that makes every ``asv publish`` site work offline, and from file://.

asv runs each subclass of ``asv.publishing.OutputPublisher`` after it has
copied its page template into ``html_dir`` (sorted by ``order``); this one runs
last and hands the site to :func:`ampsuite.asvtools.offline.make_offline`. It is
loaded through the ``plugins`` key of ``asv.conf.json`` (module
:mod:`ampsuite.asvtools.asv_plugin`), so plain ``asv publish`` is enough.
"""

from __future__ import annotations

import atexit
import math
from typing import Any

from asv.console import log
from asv.publishing import OutputPublisher

from ampsuite.asvtools.offline import make_offline, write_json_scripts

__all__ = ["OfflineAssets"]


class OfflineAssets(OutputPublisher):
    """Replace asv's CDN scripts and stylesheets with ampsuite's vendored copies."""

    name = "ampsuite-offline"
    button_label = None
    description = "vendored JavaScript and CSS, so that the site needs no network"
    order = math.inf

    @classmethod
    def publish(cls, conf: Any, repo: Any, benchmarks: Any, graphs: Any, revisions: Any) -> None:
        changed = make_offline(conf.html_dir)
        log.info(f"ampsuite: vendored assets referenced from {', '.join(p.name for p in changed) or 'no page'}")
        # asv writes index.json and info.json after every publisher has run (asv/commands/publish.py): their
        # scripts for file:// are written when the publish command is done.
        atexit.register(write_json_scripts, conf.html_dir)
