"""The suite file: TOML in, a validated :class:`~ampsuite.spec.suitespec.SuiteSpec` out.

Structure is checked here, completely, before any work starts; plugin names
and plugin options are checked against the registry by :func:`ampsuite.spec.matrix.expand`
(which also runs before any cell). Every error is a :class:`SuiteFileError`
naming the file, the key path and what was expected. docs/suite-file.md is the
reference of every key (tests/test_docs_suitefile.py holds it to the keys read here).
"""

from __future__ import annotations

import difflib
import hashlib
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from ampsuite.contract.errors import SuiteFileError
from ampsuite.spec import limits, names
from ampsuite.spec.combinations import parse_combination_options, parse_combinations
from ampsuite.spec.combinations import show_value as _show
from ampsuite.spec.quality import QUALITY_KEYS, read_quality
from ampsuite.spec.suitespec import (
    DEVICES,
    MEASURE_KEYS,
    RULE_KEYS,
    SUITE_KEYS,
    TOP_KEYS,
    ExecutorSpec,
    MeasureSpec,
    Rule,
    SuiteSpec,
    WorkloadEntry,
)
from ampsuite.spec.tablereader import TableReader, too_large

__all__ = ["default_suite_path", "load", "loads"]


_TOO_DEEP = f"arrays or tables nested deeper than {limits.MAX_NESTING} levels; no suite needs so many"


def _too_deep(value: Any, key: str, depth: int) -> str | None:
    """The key holding a value nested deeper than ``limits.MAX_NESTING``, or None: every later step (copies,
    messages, JSON) recurses too, and would fail on a depth that parsed."""
    if depth > limits.MAX_NESTING:
        return key
    if isinstance(value, dict):
        children = [(f"{key}.{k}" if key else k, v) for k, v in value.items()]
    else:  # an item of a list is named by the list's key: [0][0][0]... would say nothing more
        children = [(key, v) for v in value] if isinstance(value, list) else []
    for child_key, v in children:
        found = _too_deep(v, child_key, depth + 1)
        if found is not None:
            return found
    return None


def _counts(path: str, key: str, value: Any, minimum: int, maximum: int, what: str) -> tuple[int, ...]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise SuiteFileError(path, key, f"expected an integer {what} or a non-empty list of them, got an empty list")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise SuiteFileError(path, key, f"expected an integer {what} or a list of them, got {_show(v)}")
        if v > maximum:
            raise SuiteFileError(path, key, too_large(maximum, v))
    return tuple(values)


def _batch_sizes(path: str, key: str, value: Any) -> tuple[int, ...]:
    values = _counts(path, key, value, 1, limits.MAX_BATCH_SIZE, "> 0")
    if len(set(values)) != len(values):
        raise SuiteFileError(path, key, f"batch sizes repeat: {list(values)!r}")
    return values


def _gpus(path: str, key: str, value: Any) -> tuple[int, ...]:
    values = _counts(path, key, value, 1, limits.MAX_GPUS, ">= 1")
    if len(set(values)) != len(values):
        raise SuiteFileError(path, key, f"GPU counts repeat: {list(values)!r}")
    return values


def _nodes(path: str, key: str, value: Any, gpus: tuple[int, ...]) -> tuple[int, ...]:
    values = _counts(path, key, value, 1, limits.MAX_GPUS, ">= 1")
    if len(set(values)) != len(values):
        raise SuiteFileError(path, key, f"node counts repeat: {list(values)!r}")
    world = max(values) * max(gpus)
    if world > limits.MAX_GPUS:
        raise SuiteFileError(
            path, key, f"nodes x gpus makes a world of {world:,} processes, more than {limits.MAX_GPUS:,}"
        )
    return values


def _rules(path: str, key: str, value: Any) -> tuple[Rule, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SuiteFileError(path, key, f"expected an array of tables ([[{key}]]), got {_show(value)}")
    rules = []
    for i, item in enumerate(value):
        r = TableReader(path, f"{key}[{i}]", item, RULE_KEYS)
        rule = Rule(
            workload=r.get("workload", str, None, "a workload id"),
            plugin=r.get("plugin", str, None, "a workload plugin name"),
            combination=r.get("combination", str, None, "a combination id"),
            technique=r.get("technique", str, None, "a technique name"),
            batch_size=r.get("batch_size", int, None, "an integer"),
            options=r.get("options", dict, {}, "a table of option values"),
        )
        r.finish()
        if rule == Rule():
            raise SuiteFileError(path, f"{key}[{i}]", f"empty rule; give at least one of: {', '.join(RULE_KEYS)}")
        rules.append(rule)
    return tuple(rules)


def _executor(path: str, table: dict[str, Any]) -> ExecutorSpec:
    r = TableReader(path, "executor", table)
    name = r.get("name", str, None, "an executor name (see `ampsuite list`)")
    if name is not None and (not name or any(c.isspace() for c in name)):
        raise r.error("name", f"expected an executor name (see `ampsuite list`), got {_show(name)}")
    return ExecutorSpec(name, dict(r.table))


def _dotted(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """A ``[tune.TECHNIQUE]`` table's (option, values): a sub-table lists values for entries of a table option
    (``[tune.torch-compile.inductor]``), each entry ``OPTION.ENTRY`` a variant of its own (``matrix.expand``
    checks that the option takes a table); nested ones are dotted names (``triton.tile_reductions = [true]``)."""
    out: list[tuple[str, Any]] = []
    for key, value in table.items():
        if isinstance(value, dict) and value:
            out += _dotted(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _tune(path: str, table: dict[str, Any]) -> dict[str, dict[str, tuple[Any, ...]]]:
    out: dict[str, dict[str, tuple[Any, ...]]] = {}
    for tname, body in table.items():
        if not isinstance(body, dict):
            raise SuiteFileError(path, f"tune.{tname}", f"expected a table of option = [values], got {_show(body)}")
        out[tname] = {}
        for option, values in _dotted(body):
            if not isinstance(values, list) or not values:
                got = "an empty list" if values == [] else _show(values)
                raise SuiteFileError(
                    path, f"tune.{tname}.{option}", f"expected a non-empty list of values to try, got {got}"
                )
            out[tname][option] = tuple(values)
    return out


def loads(text: str, path: str = "<suite>") -> SuiteSpec:
    """Parse and validate suite-file text; ``path`` is only used in messages."""
    # Editors on Windows save UTF-8 with a byte-order mark, which TOML does not allow: it carries no meaning.
    text = text.removeprefix("\ufeff")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteFileError(path, "", f"not valid TOML: {exc}") from exc
    except RecursionError:  # tomllib parses nested arrays and inline tables by recursion
        raise SuiteFileError(path, "", _TOO_DEEP) from None
    deep = _too_deep(data, "", 0)
    if deep is not None:
        raise SuiteFileError(path, deep, _TOO_DEEP)
    top = TableReader(path, "", data, TOP_KEYS)
    # A misspelled table ([workload.toy]) must be reported as such, not as the missing table it was meant to be.
    top.refuse_unknown()

    s = TableReader(
        path,
        "suite",
        top.get("suite", dict, {}, "a table"),
        SUITE_KEYS,
    )
    name = s.get("name", str, Path(path).stem, "a string")
    if names.unsafe_name(name):  # the name becomes a folder under reports/
        raise s.error("name", str(names.unsafe_name(name)))
    description = s.get("description", str, "", "a string")
    device = s.get("device", str, "auto", "one of " + ", ".join(DEVICES))
    if device not in DEVICES:
        raise s.error("device", f"expected one of {', '.join(DEVICES)}, got {device!r}")
    seed = s.get("seed", int, 0, "an integer")
    if not -limits.MAX_SEED <= seed <= limits.MAX_SEED:
        raise s.error("seed", f"expected a 64-bit integer, got {str(seed)[:40]}")
    timeout = s.number("timeout", 600.0, minimum=0, maximum=limits.MAX_TIMEOUT, strict=True)
    baseline = s.get("baseline", str, None, "a combination id")
    tolerance = s.number("numerics_tolerance", 0.05, minimum=0, maximum=1e6)
    memory_limit = s.number("memory_limit_gb", 0.0, minimum=0, maximum=1e9)
    cpu_threads = s.number("cpu_threads", 1, minimum=0, maximum=limits.MAX_CPU_THREADS, integer=True)
    base = s.get("base_techniques", list, [], "a list of technique names")
    if not all(isinstance(t, str) and t and not t.startswith("-") for t in base) or len(set(base)) != len(base):
        raise s.error("base_techniques", f"expected a list of distinct technique names, got {_show(base)}")
    s.finish()

    m = TableReader(path, "measure", top.get("measure", dict, {}, "a table"), MEASURE_KEYS)
    steps = limits.MAX_SPEC_STEPS
    measure = MeasureSpec(
        warmup_steps=m.number("warmup_steps", MeasureSpec.warmup_steps, minimum=0, maximum=steps, integer=True),
        warmup_seconds=m.number("warmup_seconds", MeasureSpec.warmup_seconds, minimum=0, maximum=limits.MAX_TIMEOUT),
        min_steps=m.number("min_steps", MeasureSpec.min_steps, minimum=3, maximum=steps, integer=True),
        max_steps=m.number("max_steps", MeasureSpec.max_steps, minimum=3, maximum=steps, integer=True),
        max_seconds=m.number(
            "max_seconds", MeasureSpec.max_seconds, minimum=0, maximum=limits.MAX_TIMEOUT, strict=True
        ),
        noise_target=m.number(
            "noise_target", MeasureSpec.noise_target, minimum=0, maximum=1.0, strict=True, bound=limits.FRACTION
        ),
        numerics_steps=m.number("numerics_steps", MeasureSpec.numerics_steps, minimum=1, maximum=steps, integer=True),
        processes=m.number("processes", MeasureSpec.processes, minimum=1, maximum=limits.MAX_PROCESSES, integer=True),
    )
    m.finish()
    if measure.max_steps < measure.min_steps:
        raise SuiteFileError(
            path, "measure.max_steps", f"must be >= measure.min_steps ({measure.min_steps}), got {measure.max_steps}"
        )

    w_table = top.get("workloads", dict, None, "a table of [workloads.ID] tables")
    if not w_table:
        raise SuiteFileError(path, "workloads", "no workloads: add at least one [workloads.ID] table")
    workloads = []
    for wid, body in w_table.items():
        problem = names.unsafe_id(wid, "workload")
        if problem:
            raise SuiteFileError(path, names.shown_id("workloads", wid), problem)
        key = f"workloads.{wid}"
        r = TableReader(path, key, body)
        given = [k for k in ("workload", "plugin") if k in r.table]
        if len(given) > 1:
            raise r.error("plugin", "give the workload once, as `workload` (`plugin` is its older spelling)")
        name_key = given[0] if given else "workload"
        workload = r.get(name_key, str, wid, "a workload name (see `ampsuite list`)")
        if "batch_size" not in r.table:
            typo = difflib.get_close_matches("batch_size", list(r.table), n=1, cutoff=0.8)
            if typo:
                raise SuiteFileError(path, f"{key}.{typo[0]}", "unknown key; did you mean 'batch_size'?")
            raise SuiteFileError(path, f"{key}.batch_size", "missing; expected an integer > 0 or a list of them")
        batch_sizes = _batch_sizes(path, f"{key}.batch_size", r.table.pop("batch_size"))
        gpus = _gpus(path, f"{key}.gpus", r.table.pop("gpus")) if "gpus" in r.table else (1,)
        nodes = _nodes(path, f"{key}.nodes", r.table.pop("nodes"), gpus) if "nodes" in r.table else (1,)
        for opt, value in r.table.items():
            if isinstance(value, list) and not value:
                raise SuiteFileError(path, f"{key}.{opt}", "empty list: an axis needs at least one value")
        workloads.append(WorkloadEntry(wid, workload, batch_sizes, dict(r.table), gpus, nodes, name_key))

    c_table = top.get("combinations", dict, {"fp32": []}, "a table of combination = [technique, ...]")
    if not c_table:
        raise SuiteFileError(path, "combinations", "no combinations: add at least one, e.g. fp32 = []")
    combinations = parse_combinations(path, c_table, tuple(base))
    if baseline is None:
        baseline = "fp32" if "fp32" in combinations else next(iter(combinations))
    elif baseline not in combinations:
        close = difflib.get_close_matches(baseline, list(combinations), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; combinations are: {', '.join(combinations)}"
        raise SuiteFileError(path, "suite.baseline", f"{baseline!r} is not a combination{hint}")

    t_table = top.get("techniques", dict, {}, "a table of [techniques.NAME] option tables")
    technique_options: dict[str, dict[str, Any]] = {}
    for tname, body in t_table.items():
        if not isinstance(body, dict):
            raise SuiteFileError(path, f"techniques.{tname}", f"expected a table of options, got {_show(body)}")
        technique_options[tname] = dict(body)

    combination_options = parse_combination_options(
        path,
        top.get("combination_options", dict, {}, "a table of [combination_options.ID.TECHNIQUE] tables"),
        combinations,
    )
    executor = _executor(path, top.get("executor", dict, {}, "a table"))
    tune_choices = _tune(path, top.get("tune", dict, {}, "a table of [tune.TECHNIQUE] tables"))
    include = _rules(path, "include", top.get("include", list, None, "an array of tables"))
    exclude = _rules(path, "exclude", top.get("exclude", list, None, "an array of tables"))
    q_table = top.get("quality", dict, None, "a table")
    quality = None
    if q_table is not None:
        quality = read_quality(
            TableReader(path, "quality", q_table, QUALITY_KEYS), combinations, [w.id for w in workloads]
        )
    top.finish()

    return SuiteSpec(
        path=path,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        name=name,
        description=description,
        device=device,
        seed=seed,
        timeout=timeout,
        baseline=baseline,
        numerics_tolerance=tolerance,
        memory_limit_gb=memory_limit,
        cpu_threads=cpu_threads,
        measure=measure,
        workloads=tuple(workloads),
        combinations=combinations,
        technique_options=technique_options,
        include=include,
        exclude=exclude,
        base_techniques=tuple(base),
        executor=executor,
        tune_choices=tune_choices,
        combination_options=combination_options,
        quality=quality,
    )


def load(path: str | Path) -> SuiteSpec:
    """Read and validate a suite file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SuiteFileError(str(path), "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteFileError(str(path), "", f"cannot read: {exc}") from exc
    return loads(text, str(path))


def default_suite_path(device: str) -> Path:
    """The suite shipped for ``device`` (``cpu`` or ``cuda``)."""
    return Path(str(resources.files("ampsuite") / "defaults" / f"{device}.toml"))
