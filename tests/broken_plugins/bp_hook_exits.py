"""Broken on purpose: the registration hook calls sys.exit()."""

import sys

from ampsuite import Technique, hookimpl


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    sys.exit(3)
