"""Bad inputs: the suite loader and the results loader refuse them with their own one-line errors.

* Suite files: random TOML-ish text, and random structured documents written
  out by a tiny TOML writer, go through ``suitefile.loads`` and then
  ``matrix.expand`` with the real registry. The only exception allowed is
  ``SuiteFileError``, and its message always starts with the file name.
* Results files: every truncation and every single-field tampering of a real
  results file is refused by ``results.load`` (the file carries a checksum of
  its content), and ``ampsuite run --resume`` against such a file stops with a
  one-line error and exit code 4, leaving the file as it was.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode, ResultsFileError, SuiteFileError
from ampsuite.spec.matrix import expand
from ampsuite.spec.suitefile import loads

NAME = "fuzz.toml"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load_and_expand(text: str, registry: Any) -> None:
    """Load and expand; anything but a SuiteFileError naming the file fails the test."""
    try:
        spec = loads(text, NAME)
        event("loaded")
        cells = expand(spec, registry, "cpu")
        event("expanded to cells" if cells else "expanded to nothing")
    except SuiteFileError as exc:
        event(f"refused at {exc.key.split('.')[0] or 'top'}")
        message = str(exc)
        assert message.startswith(f"{NAME}: "), message
        assert "\n" not in message, message


# ---------------------------------------------------------------------------
# random TOML-ish text
# ---------------------------------------------------------------------------

TOKENS = [
    "[suite]", "[measure]", "[workloads.toy]", "[workloads.r]", "[combinations]", "[techniques.amp-fp16]",
    "[techniques.inject-fault]", "[[include]]", "[[exclude]]", "[workloads]", "[suite.x]",
    "name", "device", "seed", "timeout", "baseline", "memory_limit_gb", "numerics_tolerance", "plugin",
    "batch_size", "hidden", "features", "layers", "depth", "kind", "min_steps", "max_steps", "noise_target",
    "processes",
    "fp32", "bf16", "combination", "technique", "options", "workload",
    "=", " = ", "\n", "\n", "\n", " ", ",", "[", "]", "{", "}", ".", '"', "'", "#",
    '"toy"', '"resnet"', '"gemm"', '"cpu"', '"cuda"', '"auto"', '"fp32"', '"noop"', '"amp-bf16"', '"raise"', '""',
    "0", "1", "-1", "8", "3", "1.5", "-0.0", "1e400", "nan", "inf", "-inf", "true", "false",
    '["noop"]', '["amp-bf16", "amp-fp16"]', "[]", "[1, 2]", "[8, 8]", "[[1], [2]]", "{}", "{ dtype = 1 }",
    "1979-05-27", "0x10", "1_000",
]  # fmt: skip


@FUZZ
@given(st.lists(st.sampled_from(TOKENS) | st.text(max_size=4), max_size=60).map("".join))
def test_random_text_is_refused_only_with_a_suite_file_error(registry, text: str) -> None:
    load_and_expand(text, registry)


# ---------------------------------------------------------------------------
# random structured documents
# ---------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML value (inline tables and arrays; strings quoted as JSON, which TOML reads the same)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_document(doc: dict[str, Any]) -> str:
    """Top-level keys as ``key = value`` lines (every table inline): valid TOML for any document."""
    return "".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}\n" for k, v in doc.items())


# Strings TOML can hold in a basic string: printable, no DEL, no surrogates.
text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_characters="\x7f"), max_size=8)
scalar = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.integers(-3, 70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | text
)
junk = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6
)


def mostly(valid: st.SearchStrategy[Any], other: st.SearchStrategy[Any] = junk) -> st.SearchStrategy[Any]:
    """``other`` one time in ten: mostly plausible documents, so that many reach the matrix expansion."""
    return st.integers(0, 9).flatmap(lambda i: other if i == 9 else valid)


def with_unknown_key(strategy: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return strategy.flatmap(lambda d: mostly(st.just(d), junk.map(lambda v: {**d, "unknown": v})))


def table(known: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A table with some of the known keys (plausible values, sometimes junk) and rarely an unknown one."""
    return with_unknown_key(st.fixed_dictionaries({}, optional={k: mostly(v) for k, v in known.items()}))


def between(low: float, high: float, *, integer: bool = False) -> st.SearchStrategy[Any]:
    """In range usually; out of range, NaN or infinite sometimes."""
    valid = st.integers(int(low), int(high)) if integer else st.floats(low, high)
    return mostly(valid, st.sampled_from([low - 1, -1, 0, math.nan, math.inf, -math.inf, high * 1e6]))


sizes = st.integers(1, 16)
axis = st.lists(st.integers(-1, 16), min_size=0, max_size=2)
WORKLOAD_OPTIONS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "toy": {"hidden": mostly(sizes | axis), "features": mostly(sizes | axis), "layers": between(1, 3, integer=True)},
    "resnet": {"depth": mostly(st.sampled_from([18, 50]), st.sampled_from([7, "50"])), "width": mostly(sizes)},
    "gemm": {"m": mostly(sizes), "dtype": mostly(st.sampled_from(["float16", ["float32", "bfloat16"]]), text)},
}


def workload_table(plugin: str) -> st.SearchStrategy[dict[str, Any]]:
    return with_unknown_key(
        st.fixed_dictionaries(
            {"plugin": mostly(st.just(plugin)), "batch_size": mostly(sizes | st.lists(sizes, max_size=3))},
            optional=WORKLOAD_OPTIONS[plugin],
        )
    )


workloads = st.dictionaries(
    mostly(st.sampled_from(["toy", "w2"]), st.sampled_from(["a/b", "", "x y"])),
    st.sampled_from(sorted(WORKLOAD_OPTIONS)).flatmap(workload_table),
    min_size=1,
    max_size=2,
)
TECHNIQUE_OPTIONS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "noop": {},
    "amp-bf16": {},
    "amp-fp16": {"init_scale": between(1, 2**16), "scaler": st.booleans(), "growth_interval": between(1, 100)},
    "fp32-islands": {},
    "inject-fault": {"kind": mostly(st.sampled_from(["raise", "nan"]), text), "at": st.sampled_from(["step", "apply"])},
    "fault-leak": {"after_steps": between(0, 3, integer=True), "oom_limit_gb": between(1, 8)},
    "cuda-graphs": {"warmup_iters": between(1, 3, integer=True)},
}
technique_name = mostly(st.sampled_from(sorted(TECHNIQUE_OPTIONS)), st.sampled_from(["nope", "amp"]))
combination_id = mostly(st.sampled_from(["fp32", "mixed", "other"]), st.sampled_from(["a b", "x/y", ""]))
combinations = st.dictionaries(combination_id, mostly(st.lists(technique_name, max_size=3)), max_size=3)
techniques = st.dictionaries(
    technique_name,
    st.sampled_from(sorted(TECHNIQUE_OPTIONS)).flatmap(lambda t: table(TECHNIQUE_OPTIONS[t])),
    max_size=2,
)
rule = table(
    {
        "workload": st.sampled_from(["toy", "w2"]),
        "combination": st.sampled_from(["fp32", "mixed"]),
        "technique": technique_name,
        "batch_size": sizes,
        "options": st.dictionaries(st.sampled_from(["hidden", "features"]), sizes, max_size=2),
    }
)
suite_table = table(
    {
        "name": text,
        "device": mostly(st.sampled_from(["auto", "cpu"]), st.sampled_from(["cuda", "gpu"])),
        "seed": st.integers(),
        "timeout": between(0.1, 100),
        "baseline": mostly(st.sampled_from(["fp32", "mixed"]), text),
        "numerics_tolerance": between(0, 1),
        "memory_limit_gb": between(0, 64),
    }
)
measure_table = table(
    {
        "warmup_steps": between(0, 5, integer=True),
        "min_steps": between(3, 10, integer=True),
        "max_steps": between(10, 50, integer=True),
        "max_seconds": between(0.1, 5),
        "noise_target": between(0.001, 1),
        "numerics_steps": between(1, 5, integer=True),
        "processes": between(1, 4, integer=True),
    }
)
document = with_unknown_key(
    st.fixed_dictionaries(
        {"workloads": mostly(workloads)},
        optional={
            "suite": mostly(suite_table),
            "measure": mostly(measure_table),
            "combinations": mostly(combinations),
            "techniques": mostly(techniques),
            "include": mostly(st.lists(rule, max_size=2)),
            "exclude": mostly(st.lists(rule, max_size=2)),
        },
    )
)


@FUZZ
@given(document)
def test_random_documents_are_refused_only_with_a_suite_file_error(registry, doc: dict[str, Any]) -> None:
    load_and_expand(toml_document(doc), registry)


def test_the_toml_writer_round_trips() -> None:
    import tomllib

    doc = {"a b": {"x": [1, 2.5, 'q"\\\n'], "y": {}, "z": [{"k": True}]}, "n": -0.0, "e": 1e300}
    assert tomllib.loads(toml_document(doc)) == doc


# ---------------------------------------------------------------------------
# results files: truncated or tampered, never accepted
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_results(healthy_run) -> tuple[bytes, dict[str, Any], Path]:
    """(bytes, parsed document, suite path) of a real two-cell results file."""
    path, _ = healthy_run
    data = path.read_bytes()
    results.load(path)  # the untouched file is accepted
    return data, json.loads(data), path.parent / "healthy.toml"


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value (containers included), so a tampering can hit any field.

    A value an earlier tampering made deeper than the loader ever reads is not walked:
    the loader refuses it whole, and walking it would overflow the stack here.
    """
    out = [path] if path else []
    if len(path) > 32:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            out += _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _leaves(v, (*path, i))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@FUZZ
@given(data=st.data())
def test_any_truncation_is_refused(real_results, tmp_path_factory, data) -> None:
    raw = real_results[0]
    cut = data.draw(st.integers(0, len(raw) - 1), label="bytes kept")
    path = tmp_path_factory.mktemp("cut") / "results.json"
    path.write_bytes(raw[:cut])
    with pytest.raises(ResultsFileError) as info:
        results.load(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


replacement = (
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | st.text(max_size=6)
    | st.just([]) | st.just({})
)  # fmt: skip


@FUZZ
@given(data=st.data())
def test_any_single_field_tampering_is_refused(real_results, tmp_path_factory, data) -> None:
    doc = copy.deepcopy(real_results[1])
    paths = _leaves(doc)
    where = data.draw(st.sampled_from(paths), label="field")
    parent, key = _get(doc, where[:-1]), where[-1]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]), label="action")
    if action == "replace":
        new = data.draw(replacement, label="new value")
        assume(json.dumps(new, sort_keys=True) != json.dumps(parent[key], sort_keys=True))
        parent[key] = new
    elif action == "delete":
        del parent[key]
    else:
        target = parent if isinstance(parent, dict) else doc
        name = data.draw(st.text(min_size=1, max_size=6).filter(lambda k: k not in target), label="new key")
        target[name] = data.draw(replacement, label="new value")
    path = tmp_path_factory.mktemp("tampered") / "results.json"
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    with pytest.raises(ResultsFileError) as info:
        results.load(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("damage", ["tamper", "truncate"])
def test_resume_refuses_a_damaged_file_and_leaves_it_alone(real_results, tmp_path: Path, capsys, damage: str) -> None:
    raw, doc, suite_path = real_results
    if damage == "tamper":
        doc = copy.deepcopy(doc)
        doc["cells"][0]["metrics"]["throughput"] *= 2  # a better figure than was measured
        bad = json.dumps(doc, indent=1).encode()
    else:
        bad = raw[: len(raw) // 2]
    out = tmp_path / "results.json"
    out.write_bytes(bad)
    shutil.copy(suite_path, tmp_path / "suite.toml")
    code = cli.main(["run", str(tmp_path / "suite.toml"), "-o", str(out), "--resume", "--no-report", "--no-peaks"])
    assert code == ExitCode.USAGE_ERROR == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    reason = "does not match its checksum" if damage == "tamper" else "not strict JSON"
    assert err.startswith(f"ampsuite: error: {out}: ") and reason in err, err
    assert out.read_bytes() == bad
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "suite.toml"]


@pytest.mark.parametrize(
    ("table", "line"),
    [
        ("suite", "timeout = nan"),
        ("suite", "numerics_tolerance = nan"),
        ("suite", "memory_limit_gb = inf"),  # the runner's int(limit * 2**30) would raise OverflowError on it
        ("suite", "timeout = -inf"),
        ("measure", "max_seconds = inf"),
        ("measure", "noise_target = nan"),
        ("measure", "max_seconds = nan"),
    ],
)
def test_non_finite_numbers_are_refused(table: str, line: str) -> None:
    key, value = line.split(" = ")
    message = re.escape(f"{NAME}: {table}.{key}: expected a finite number ") + r"[>=]+ \d+, got " + re.escape(value)
    with pytest.raises(SuiteFileError, match=message + "$"):
        loads(f"[{table}]\n{line}\n[workloads.toy]\nbatch_size = 8\n", NAME)


# ---------------------------------------------------------------------------
# results files with a valid checksum but a broken shape: every reader refuses them in one line
# ---------------------------------------------------------------------------

hostile = (
    replacement
    | st.just(10**400)  # beyond 64 bits: json reads it, no figure is that large
    | st.just(-(2**63))
    | st.just(math.nan)  # sealed as the NaN literal
    | st.just(math.inf)
    | st.just("toy[/]")  # rich markup
    | st.just(json.loads("[" * 80 + "]" * 80))  # deeper than any document ampsuite writes
    | st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=3), max_size=3)
)  # fmt: skip


def _seal(doc: dict[str, Any]) -> str:
    """The text a writer would produce for ``doc``: its checksum is valid, whatever the content."""
    body = {k: v for k, v in doc.items() if k != "integrity"}
    try:
        sha = results.checksum(body)
    except (ValueError, RecursionError, TypeError):
        sha = "0" * 64
    return json.dumps({**body, "integrity": {"sha256": sha}}, indent=1)


def _read_everything(path: Path, out: Path, capsys: Any) -> bool:
    """Every reader of a results file: load, analysis, the HTML report, `show`, `report` and `report --compare`.

    A file the loader accepts must go through every reader; a file it refuses must
    be refused by every command in one line with exit code 4.
    """
    from ampsuite import analysis
    from ampsuite.report import render_site
    from ampsuite.summary import results_table

    try:
        doc = results.load(path)
    except ResultsFileError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
        accepted = False
    else:
        accepted = True
        analysis.derive(doc)
        results_table(doc)
        render_site([doc], out / "site", compare_with=doc)
    for argv in (
        ["show", str(path)],
        ["report", str(path), "-o", str(out / "r")],
        ["report", str(path), "--compare", str(path), "-o", str(out / "c")],
    ):
        capsys.readouterr()
        code = cli.main(argv)
        err = capsys.readouterr().err.strip()
        if accepted:
            assert code == ExitCode.OK, err
        else:
            assert code == ExitCode.USAGE_ERROR == 4, err
            assert len(err.splitlines()) == 1 and err.startswith(f"ampsuite: error: {path}: "), err
    return accepted


FREE_FORM = frozenset({"diagnostics", "notes", "environment", "plugins", "clocks", "ranks", "processes", "memory"})
"""Plugin- and probe-owned JSON: the wire format says only "JSON data" there (see the report's own tests)."""


@settings(
    max_examples=25,  # an accepted example renders a report
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],  # capsys is drained each time
)
@given(data=st.data())
def test_sealed_broken_documents_are_refused_by_every_reader(real_results, tmp_path_factory, capsys, data) -> None:
    doc = copy.deepcopy(real_results[1])
    for _ in range(data.draw(st.integers(0, 3), label="changes")):
        paths = [p for p in _leaves(doc) if not FREE_FORM & {str(k) for k in p}]
        if not paths:
            break
        where = data.draw(st.sampled_from(paths), label="field")
        parent, key = _get(doc, where[:-1]), where[-1]
        if data.draw(st.booleans(), label="delete") and isinstance(parent, dict):
            del parent[key]
        else:
            # A copy: later changes mutate the document in place, and hypothesis may replay the drawn object.
            parent[key] = copy.deepcopy(data.draw(hostile, label="new value"))
    out = tmp_path_factory.mktemp("sealed")
    path = out / "results.json"
    path.write_text(_seal(doc), encoding="utf-8")
    event("accepted" if _read_everything(path, out, capsys) else "refused")


@pytest.mark.parametrize(
    "text",
    [
        '{"format": "ampsuite-results", "version": 1, "cells": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"format": "ampsuite-results", "version": 1, "cells": [' + "9" * 5000 + "]}",
        '{"format": "ampsuite-results", "version": 1, "run": 3, "environment": {}, "cells": []}',
    ],
    ids=["nested-100000-deep", "int-of-5000-digits", "run-not-an-object"],
)
def test_pathological_files_are_refused_by_every_reader(tmp_path: Path, capsys, text: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(text, encoding="utf-8")
    assert not _read_everything(path, tmp_path, capsys)


def test_a_200_mb_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    import time

    path = tmp_path / "results.json"
    with path.open("wb") as f:  # sparse: no 200 MB written, stat says 200 MB
        f.truncate(200 * 1024 * 1024)
    start = time.monotonic()
    with pytest.raises(ResultsFileError, match=r"209,715,200 bytes is larger than any results file"):
        results.load(path)
    assert time.monotonic() - start < 1.0
