"""The module that ``asv.conf.json`` names under ``plugins``: ``".ampsuite.asvtools.asv_plugin"``.

asv imports it before any command (a leading dot is asv's spelling for "a
module by name, not one of asv's own plugins"; it is found in the installed
ampsuite), which registers the
``ampsuite-venv`` environment type and the offline-assets publisher: asv finds
both by subclass. Nothing else imports this module; it needs asv.
"""

from __future__ import annotations

from ampsuite.asvtools.environment import AmpsuiteVenv
from ampsuite.asvtools.publisher import OfflineAssets

__all__ = ["AmpsuiteVenv", "OfflineAssets"]
