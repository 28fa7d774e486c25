"""Names a suite file uses, checked against the plugins' records and the suite itself, before any cell is made.

An unknown workload or technique gets a "did you mean" (``difflib``); a rule value of ``[[include]]`` or
``[[exclude]]`` that names nothing is refused, since the rule would silently match no cell; an entry key that
reads like a misspelled ``workload``, ``batch_size``, ``gpus`` or ``nodes`` is named as such rather than blamed on
the entry's id or listed among the workload's options.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Protocol

from ampsuite.contract.errors import SuiteFileError
from ampsuite.contract.plugin import Technique, Workload
from ampsuite.spec.names import shown_id
from ampsuite.spec.options import OptionError, check_value, describe
from ampsuite.spec.suitespec import WORKLOAD_KEYS, Rule, SuiteSpec, WorkloadEntry

__all__ = ["Catalog", "check_rules", "entry_key_typo", "lookup"]


class Catalog(Protocol):
    """The plugins' records by name: what expansion needs of the registry (``ampsuite.host.manager.Registry``)."""

    @property
    def workloads(self) -> Mapping[str, Workload]: ...
    @property
    def techniques(self) -> Mapping[str, Technique]: ...


def lookup(
    spec: SuiteSpec, key: str, names: Mapping[str, Any], kind: str, name: str, *, declared: bool = False
) -> None:
    """Refuse ``name`` unless it is one of ``names``, with the closest one as a "did you mean". ``declared``:
    names the suite file itself declares (its workload ids, combinations), listed as the file gives them; else
    the plugins' names, sorted, which `ampsuite list` shows."""
    if name in names:
        return
    close = difflib.get_close_matches(name, list(names), n=1)
    if close:
        hint = f"did you mean {close[0]!r}?"
    else:
        hint = f"the suite declares: {', '.join(names)}" if declared else f"choose one of: {', '.join(sorted(names))}"
    raise SuiteFileError(
        spec.path, key, f"unknown {kind} {name!r}; {hint}" + ("" if declared else " (see `ampsuite list`)")
    )


def entry_key_typo(spec: SuiteSpec, entry: WorkloadEntry, registry: Catalog) -> None:
    """Refuse an entry key that is no option of its workload and reads like a misspelled entry key
    (``worklaod``, ``gpu``): the error would otherwise blame the entry's id or list the workload's options."""
    record = registry.workloads.get(entry.workload)
    options = {o.name for o in describe(record.options)} if record is not None else set()
    for name in entry.options:
        close = difflib.get_close_matches(name, WORKLOAD_KEYS, n=1, cutoff=0.8)
        if close and name not in options:
            raise SuiteFileError(spec.path, f"workloads.{entry.id}.{name}", f"unknown key; did you mean {close[0]!r}?")


def check_rules(spec: SuiteSpec, registry: Catalog) -> None:
    """Refuse rule values that name nothing in the suite: such a rule would silently match no cell."""
    workload_ids = {e.id: e for e in spec.workloads}
    plugins_used = {e.workload for e in spec.workloads}
    techniques_used = {t for combo in spec.combinations.values() for t in combo}
    for kind, rules in (("include", spec.include), ("exclude", spec.exclude)):
        for i, rule in enumerate(rules):
            key = f"{kind}[{i}]"
            if rule.workload is not None:
                lookup(spec, f"{key}.workload", workload_ids, "workload id", rule.workload, declared=True)
            if rule.combination is not None:
                lookup(spec, f"{key}.combination", spec.combinations, "combination", rule.combination, declared=True)
            if rule.plugin is not None:
                lookup(spec, f"{key}.plugin", registry.workloads, "workload", rule.plugin)
                if rule.plugin not in plugins_used:
                    raise SuiteFileError(
                        spec.path,
                        f"{key}.plugin",
                        f"no [workloads.ID] table of this suite runs workload {rule.plugin!r}",
                    )
            if rule.technique is not None:
                lookup(spec, f"{key}.technique", registry.techniques, "technique", rule.technique)
                if rule.technique not in techniques_used:
                    raise SuiteFileError(
                        spec.path, f"{key}.technique", f"no combination of this suite uses {rule.technique!r}"
                    )
            if rule.batch_size is not None:
                sizes = {b for e in _matchable(spec, rule) for b in e.batch_sizes}
                if rule.batch_size not in sizes:
                    listed = ", ".join(str(b) for b in sorted(sizes))
                    raise SuiteFileError(
                        spec.path,
                        f"{key}.batch_size",
                        f"no workload this rule can match has batch size {rule.batch_size} (its batch sizes: {listed})",
                    )
            _check_rule_options(spec, registry, key, rule)


def _matchable(spec: SuiteSpec, rule: Rule) -> list[WorkloadEntry]:
    """The workload entries whose cells ``rule`` can match, by its workload id and plugin keys."""
    return [e for e in spec.workloads if rule.workload in (None, e.id) and rule.plugin in (None, e.workload)]


def _check_rule_options(spec: SuiteSpec, registry: Catalog, key: str, rule: Rule) -> None:
    """Each option of a rule must be one that a workload the rule can match takes, with a value of its type."""
    plugins = [e.workload for e in _matchable(spec, rule)]
    records = [registry.workloads[p] for p in dict.fromkeys(plugins)]
    for name, value in rule.options.items():
        having = [r for r in records if any(o.name == name for o in describe(r.options))]
        if records and not having:
            known = list(dict.fromkeys(o.name for r in records for o in describe(r.options)))
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"options are: {', '.join(known) or 'none'}"
            whose = ", ".join(repr(r.name) for r in records)
            raise SuiteFileError(
                spec.path, shown_id(f"{key}.options", name), f"no workload this rule can match ({whose}) has it; {hint}"
            )
        errors = []
        for record in having:
            try:
                check_value(record.options, name, value)
                break
            except OptionError as exc:
                errors.append(exc)
        else:
            if errors:  # a value no cell's option can hold: the rule would match nothing
                raise SuiteFileError(spec.path, f"{key}.options.{errors[0].key}", errors[0].message)
