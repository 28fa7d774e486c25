"""The module that ``asv.conf.json`` names under ``plugins``: ``".suite.asvtools.asv_plugin"``.

asv imports it (the leading dot means "from the folder asv runs in", so asv
must run from the repository root) before any command, which registers the
``ampsuite-venv`` environment type and the offline-assets publisher: asv finds
both by subclass. Nothing else imports this module; it needs asv.
"""

from __future__ import annotations

from suite.asvtools.environment import AmpsuiteVenv
from suite.asvtools.publisher import OfflineAssets

__all__ = ["AmpsuiteVenv", "OfflineAssets"]
