"""What every ``ampsuite`` subcommand reads the same way from its arguments."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ampsuite.host.manager import PluginSettings

__all__ = ["plugin_settings"]


def plugin_settings(args: argparse.Namespace) -> PluginSettings:
    """The plugins to load: ``-p`` given before or after the subcommand, and the environment."""
    from ampsuite.host.manager import PluginSettings  # imported when needed: `ampsuite --help` stays fast

    # -p before the subcommand (main parser) and after it (subparser) land in different attributes:
    # argparse lets a subparser's default overwrite the main parser's value for one dest.
    return PluginSettings.from_args([*(getattr(args, "global_plugin", None) or []), *(args.plugin or [])])
