"""Broken on purpose: importing it calls sys.exit() (a script turned into a plugin)."""

raise SystemExit
