"""docs/suite-file.md stays true: it documents every key the suite loader accepts, and no other.

The keys come from the loader (``ampsuite.spec.suitespec.TABLE_KEYS``, the tuples its own
unknown-key checks use, and ``MeasureSpec``'s fields), so a key added to the loader
without a line in the page fails here, naming it, and so does a line for a key the
loader no longer reads. The page's example is loaded: every documented key of
``[suite]`` and ``[measure]`` appears in it with a value of its documented type, a
value of another type is refused under that key, and each documented default is the
loader's.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ampsuite.contract.errors import SuiteFileError
from ampsuite.spec import suitefile, suitespec
from ampsuite.spec.tomltext import toml_lines

DOC = Path(__file__).resolve().parents[1] / "docs" / "suite-file.md"
TOP_HEADING = "Tables"
"""The section of the page whose table lists the top-level tables ("" in TABLE_KEYS)."""
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")
"""A Markdown table row whose first cell is one name in backticks: the key it documents."""


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _sections() -> dict[str, str]:
    """Each ``## `` heading of the page -> the text under it."""
    parts = re.split(r"^## (.+)$", _text(), flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _heading_of(table: str) -> str:
    """The heading of ``table``'s section (a ``TABLE_KEYS`` name): ``[suite]``, ``[workloads.ID]``, ``[[include]]``."""
    if table == "":
        return TOP_HEADING
    name = re.escape(table.split(".")[0])
    found = [h for h in _sections() if re.search(rf"`\[\[?{name}[.\]]", h)]
    assert found, f"docs/suite-file.md has no section for [{table}]"
    return found[0]


def _rows(table: str) -> dict[str, list[str]]:
    """The documented keys of ``table``: key -> the row's other cells (type, default, meaning)."""
    body = _sections()[_heading_of(table)]
    rows: dict[str, list[str]] = {}
    for line in body.splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        key = match.group(1)
        if table == "":
            key = key.strip("[]").split(".")[0]  # [workloads.ID] -> workloads, [[include]] -> include
        rows[key] = [c.strip() for c in match.group(2).split("|")]
    return rows


@pytest.mark.parametrize("table", list(suitespec.TABLE_KEYS))
def test_every_key_the_loader_accepts_is_documented(table: str) -> None:
    documented = set(_rows(table))
    missing = [k for k in suitespec.TABLE_KEYS[table] if k not in documented]
    assert not missing, f"docs/suite-file.md, section {_heading_of(table)!r}: no line for {missing}"


@pytest.mark.parametrize("table", list(suitespec.TABLE_KEYS))
def test_no_key_is_documented_that_the_loader_refuses(table: str) -> None:
    extra = sorted(set(_rows(table)) - set(suitespec.TABLE_KEYS[table]))
    assert not extra, f"docs/suite-file.md, section {_heading_of(table)!r}: the loader accepts no key {extra}"


def test_every_top_level_table_has_a_section() -> None:
    for table in suitespec.TOP_KEYS:
        _heading_of(table)


# -- the documented types and defaults of [suite] and [measure], through the loader --------------------------------

TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float), "list": list}
"""A type cell's first word -> the Python type of a TOML value of that type."""
WRONG: dict[str, Any] = {"string": 1, "integer": 1.5, "number": "1", "list": "x"}
"""A type cell's first word -> a value of another type, which the loader must refuse."""


def _type_word(cell: str) -> str:
    word = re.match(r"[a-z]+", cell)
    assert word is not None and word.group(0) in TYPES, f"type {cell!r}: expected it to begin with one of {list(TYPES)}"
    return word.group(0)


def _example() -> dict[str, Any]:
    """The page's first TOML example: a suite file with every table."""
    block = re.search(r"```toml\n(.*?)```", _text(), flags=re.DOTALL)
    assert block is not None, "docs/suite-file.md has no ```toml example"
    return tomllib.loads(block.group(1))


def _suite_text(**tables: Any) -> str:
    """A fresh suite file of ``tables`` (one toy workload and ``fp32`` unless given); loading it loads no plugin."""
    data = {"workloads": {"toy": {"batch_size": 8}}, "combinations": {"fp32": []}} | tables
    return "\n".join(toml_lines(data)) + "\n"


def _value(spec: suitespec.SuiteSpec, table: str, key: str) -> Any:
    value = getattr(spec.measure if table == "measure" else spec, key)
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("table", ["suite", "measure"])
def test_the_example_uses_every_key_with_its_documented_type(table: str, tmp_path: Path) -> None:
    example = _example()
    rows = _rows(table)
    unused = [k for k in rows if k not in example[table]]
    assert not unused, f"the example's [{table}] does not use {unused}"
    for key, cells in rows.items():
        value = example[table][key]
        kind = TYPES[_type_word(cells[0])]
        assert isinstance(value, kind) and not isinstance(value, bool), f"{table}.{key} = {value!r} is no {cells[0]}"
    path = tmp_path / "documented.toml"
    text = _suite_text(suite=example["suite"], measure=example["measure"], combinations=example["combinations"])
    path.write_text(text, encoding="utf-8")
    spec = suitefile.load(path)
    for key in rows:
        assert _value(spec, table, key) == example[table][key], f"{table}.{key} did not load as written"


@pytest.mark.parametrize("table", ["suite", "measure"])
def test_a_value_of_another_type_is_refused_under_its_key(table: str) -> None:
    example = _example()
    for key, cells in _rows(table).items():
        tables = {"suite": dict(example["suite"]), "measure": dict(example["measure"])}
        tables[table][key] = WRONG[_type_word(cells[0])]
        with pytest.raises(SuiteFileError) as caught:
            suitefile.loads(_suite_text(**tables, combinations=example["combinations"]))
        assert caught.value.key == f"{table}.{key}", f"{table}.{key}: {caught.value}"


@pytest.mark.parametrize("table", ["suite", "measure"])
def test_a_documented_number_takes_a_fraction(table: str) -> None:
    """ "number" is not "integer": a value with a fraction loads (the wrong-type test cannot tell the two apart)."""
    example = _example()
    for key, cells in _rows(table).items():
        if _type_word(cells[0]) == "number":
            tables = {"suite": dict(example["suite"]), "measure": dict(example["measure"])}
            tables[table][key] = float(example[table][key]) + 0.25
            spec = suitefile.loads(_suite_text(**tables, combinations=example["combinations"]))
            assert _value(spec, table, key) == tables[table][key], f"{table}.{key}"


@pytest.mark.parametrize("table", ["suite", "measure"])
def test_each_documented_default_is_the_loaders(table: str) -> None:
    spec = suitefile.loads(_suite_text())
    for key, cells in _rows(table).items():
        literal = re.fullmatch(r"`([^`]+)`", cells[1])
        if literal is None:
            continue  # a default in words ("the file's name without .toml")
        documented = tomllib.loads(f"v = {literal.group(1)}")["v"]
        assert _value(spec, table, key) == documented, f"{table}.{key}: documented default {documented!r}"


# -- keys the loader takes out of tables whose other keys are a plugin's options ------------------------------------

WORKLOAD_VALUES = {"workload": "toy", "plugin": "toy", "batch_size": 8, "gpus": 1, "nodes": 1}
"""A value for each of ``WORKLOAD_KEYS`` (a key added there needs one here)."""


@pytest.mark.parametrize("spelling", ["workload", "plugin"])  # one of the two per table
def test_workload_keys_are_the_loaders_and_the_rest_are_options(spelling: str) -> None:
    keys = [k for k in suitespec.WORKLOAD_KEYS if k in (spelling, "batch_size", "gpus", "nodes")]
    assert len(keys) == len(suitespec.WORKLOAD_KEYS) - 1
    body = {key: WORKLOAD_VALUES[key] for key in keys} | {"hidden": 16}
    (entry,) = suitefile.loads(_suite_text(workloads={"toy": body})).workloads
    assert dict(entry.options) == {"hidden": 16}


def test_executor_keys_are_the_loaders_and_the_rest_are_options() -> None:
    body = {key: "local" for key in suitespec.EXECUTOR_KEYS} | {"poll_seconds": 1.0}
    spec = suitefile.loads(_suite_text(executor=body))
    assert spec.executor.name == "local" and dict(spec.executor.options) == {"poll_seconds": 1.0}
