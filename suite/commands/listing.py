"""``ampsuite list``: every plugin, and the workloads, techniques, probes and executors it registers."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ampsuite.commands.common import Command, registry
from ampsuite.contract.errors import ExitCode
from ampsuite.contract.plugin import Technique, Workload


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``list`` takes only the plugin arguments every command has."""


def _facts(rec: Any) -> str:
    """What a record adds to its line: a workload's unit; a technique's order, requirements, conflicts and the
    workload traits it needs."""
    if isinstance(rec, Workload):
        return f" [unit: {rec.unit}]"
    if not isinstance(rec, Technique):
        return ""
    bits = [f"order {rec.order}"]
    if rec.requires:
        bits.append("requires " + ", ".join(sorted(rec.requires)))
    if rec.conflicts:
        bits.append("conflicts with " + ", ".join(sorted(rec.conflicts)))
    if rec.requires_traits:
        bits.append("workload traits " + ", ".join(sorted(rec.requires_traits)))
    return f" [{'; '.join(bits)}]"


def _origin(source: str) -> tuple[str, str]:
    """(distribution, how it was loaded) from a plugin's ``source`` (ampsuite.host.manager.PluginInfo)."""
    if source == "builtin":
        return "ampsuite", "built-in"
    if source.startswith("entry point (") and source.endswith(")"):
        return source[len("entry point (") : -1], "entry point"
    return "-", source


def execute(args: argparse.Namespace) -> ExitCode:
    from rich.table import Table
    from rich.text import Text

    from ampsuite.display import make_console
    from ampsuite.spec.options import describe
    from ampsuite.terminal import plain

    reg = registry(args)
    console = make_console()  # piped output must not wrap at rich's assumed 80 columns
    # The first column is the name a plugin is registered under (its entry point's name, or -p's module): the
    # name -p no:NAME blocks and records say "(plugin NAME)" of; the distribution that installs it is beside it.
    plugins = Table(title="plugins")
    for col in ("name (-p no:NAME)", "distribution", "version", "loaded as", "module"):
        plugins.add_column(col)
    for p in reg.plugins:
        distribution, loaded = _origin(p.source)
        plugins.add_row(*(Text(plain(v)) for v in (p.name, distribution, p.version, loaded, p.module)))
    console.print(plugins)
    kinds: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("workload", reg.workloads),
        ("technique", reg.techniques),
        ("probe", reg.probes),
        ("executor", reg.executors),
    )
    for kind, records in kinds:
        for name in sorted(records):
            rec = records[name]
            line = f"{kind} {name} (plugin {reg.owner[(kind, name)]}){_facts(rec)}: {rec.summary}"
            console.print(plain(line), markup=False, soft_wrap=True)
            options = getattr(rec, "options", None)
            for o in describe(options) if options is not None else []:
                console.print(
                    plain(f"    {o.name} ({o.type}, default {o.default!r}): {o.help}"), markup=False, soft_wrap=True
                )
    return ExitCode.OK


COMMAND = Command(
    "list", "show plugins, workloads, techniques, probes and executors with their options", add_arguments, execute
)
