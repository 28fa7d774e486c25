"""Broken on purpose: importing it fails (a dependency that is not installed)."""

import ampsuite_no_such_dependency  # noqa: F401
