"""Broken on purpose: written for a plugin API that this ampsuite does not provide."""

from ampsuite import Technique, hookimpl

AMPSUITE_PLUGIN_API = 99


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return []
