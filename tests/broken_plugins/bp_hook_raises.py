"""Broken on purpose: the registration hook raises."""

from ampsuite import Technique, hookimpl


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    raise RuntimeError("cannot find my configuration file")
