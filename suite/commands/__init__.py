"""The subcommands of ``ampsuite``, one module each; ``ampsuite.cli`` only assembles them."""

from __future__ import annotations

from ampsuite.commands import (
    asv_machine,
    listing,
    make_data,
    max_batch,
    new_plugin,
    report,
    run,
    selfcheck,
    show,
    tune,
)
from ampsuite.commands.common import Command

__all__ = ["COMMANDS", "Command"]

COMMANDS: tuple[Command, ...] = (
    run.COMMAND,
    listing.COMMAND,
    show.COMMAND,
    report.COMMAND,
    make_data.COMMAND,
    new_plugin.COMMAND,
    max_batch.COMMAND,
    asv_machine.COMMAND,
    selfcheck.COMMAND,
    tune.COMMAND,
)
"""In the order ``ampsuite --help`` lists them."""
