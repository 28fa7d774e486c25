"""Suite-file input that once slipped through the checks: each is refused in one line naming the file and the key,
before any cell runs (or, for a byte-order mark, read as the suite it is).

Ids that make one cell id twice, arrays nested past what the parser recurses through, include/exclude options
that name no option, and a CUDA device asked for where there is none.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import toy_suite

from ampsuite import cli
from ampsuite.contract.errors import ExitCode, SuiteFileError, UsageError
from ampsuite.host import session
from ampsuite.spec import matrix, suitefile
from ampsuite.spec.suitespec import WorkloadEntry


def _refused(text: str) -> str:
    with pytest.raises(SuiteFileError) as info:
        suitefile.loads(text, "suite.toml")
    message = str(info.value)
    assert "\n" not in message
    return message


def _refused_by_expand(text: str, registry: object) -> str:
    spec = suitefile.loads(text, "suite.toml")
    with pytest.raises(SuiteFileError) as info:
        matrix.expand(spec, registry, "cpu")  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


# D5: workload ids follow the rule of combination ids, and no two cells share an id.


@pytest.mark.parametrize(
    ("wid", "key", "reason"),
    [
        ("toy[hidden=64]", "workloads.toy[hidden=64]", "workload ids may not contain '/', '[', ']', ',' or spaces"),
        ("a/b", "workloads.a/b", "workload ids may not contain '/', '[', ']', ',' or spaces"),
        ("a b", "workloads.a b", "workload ids may not contain '/', '[', ']', ',' or spaces"),
        ("", 'workloads.""', "expected a non-empty id"),
        ("..", "workloads...", "expected an id, not '..'"),
        ("a\nb", 'workloads."a\\nb"', "workload ids may not contain control characters or other whitespace"),
        ("x" * 5000, "workloads." + "x" * 60 + "...", "expected an id of at most 128 characters, got 5,000"),
    ],
)
def test_a_workload_id_that_cannot_be_part_of_a_cell_id_is_refused(wid: str, key: str, reason: str) -> None:
    text = toy_suite("s", workloads={wid: {"workload": "toy", "batch_size": 8}})
    assert _refused(text) == f"suite.toml: {key}: {reason}"


def test_a_combination_id_with_a_control_character_is_refused() -> None:
    text = toy_suite("s", combinations={"fp32": [], "a\nb": []})
    assert _refused(text) == (
        'suite.toml: combinations."a\\nb": combination ids may not contain control characters or other whitespace'
    )


def test_ids_of_letters_digits_dots_and_dashes_are_still_taken() -> None:
    text = toy_suite("s", workloads={"toy-2.small_v1": {"workload": "toy", "batch_size": 8}})
    assert [w.id for w in suitefile.loads(text).workloads] == ["toy", "toy-2.small_v1"]


def test_an_axis_value_given_twice_is_refused_as_two_cells_with_one_id(registry) -> None:
    text = toy_suite("s", toy={"batch_size": 8, "hidden": [32, 32]})
    assert _refused_by_expand(text, registry) == (
        "suite.toml: workloads.toy: cell id 'toy[hidden=32]/fp32/bs8' is made twice, "
        "by workloads.toy (hidden = 32) and by workloads.toy (hidden = 32); give each cell its own id"
    )


def test_two_entries_that_make_one_cell_id_are_refused_naming_both(registry) -> None:
    # The loader refuses such an id; a spec built in code (the pytest plugin, a hook) does not pass through it.
    spec = suitefile.loads(toy_suite("s", toy={"batch_size": 8, "hidden": [32, 64]}), "suite.toml")
    clash = WorkloadEntry("toy[hidden=64]", "toy", (8,), {"hidden": 128})
    spec = dataclasses.replace(spec, workloads=(*spec.workloads, clash))
    with pytest.raises(SuiteFileError) as info:
        matrix.expand(spec, registry, "cpu")
    assert str(info.value) == (
        "suite.toml: workloads.toy[hidden=64]: cell id 'toy[hidden=64]/fp32/bs8' is made twice, "
        "by workloads.toy (hidden = 64) and by workloads.toy[hidden=64]; give each cell its own id"
    )


# D9: nesting deeper than any suite needs is refused, however deep it goes.


@pytest.mark.parametrize("depth", [40, 500, 5000])
def test_arrays_nested_too_deep_are_refused_in_one_line(depth: int) -> None:
    text = toy_suite("s", toy=None) + "[workloads.toy]\nbatch_size = 8\nhidden = " + "[" * depth + "]" * depth + "\n"
    key = "workloads.toy.hidden: " if depth == 40 else ""  # past tomllib's recursion, the parse itself fails
    assert _refused(text) == f"suite.toml: {key}arrays or tables nested deeper than 32 levels; no suite needs so many"


def test_a_nesting_a_suite_uses_still_loads() -> None:
    text = toy_suite("s", toy=None) + "[workloads.toy]\nbatch_size = 8\nhidden = " + "[" * 20 + "]" * 20 + "\n"
    value: list = []
    for _ in range(19):
        value = [value]
    assert suitefile.loads(text).workloads[0].options == {"hidden": value}


def test_deep_nesting_on_the_command_line_is_a_usage_error_not_a_traceback(tmp_path, capsys) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(toy_suite("s") + "[techniques.amp-bf16]\nx = " + "[" * 500 + "]" * 500 + "\n", encoding="utf-8")
    assert cli.main(["run", str(path), "--dry-run"]) == ExitCode.USAGE_ERROR
    assert "deep.toml: arrays or tables nested deeper than 32 levels" in capsys.readouterr().err


# D13: a rule's options name options of the workloads it can match, with values of their types.


def test_an_exclude_option_no_workload_has_is_refused_with_a_suggestion(registry) -> None:
    text = toy_suite("s", tables={"exclude": [{"options": {"hiden": 32}}]})
    assert _refused_by_expand(text, registry) == (
        "suite.toml: exclude[0].options.hiden: no workload this rule can match ('toy') has it; did you mean 'hidden'?"
    )


def test_an_include_option_of_the_wrong_type_is_refused(registry) -> None:
    text = toy_suite("s", tables={"include": [{"options": {"hidden": "32"}}]})
    assert _refused_by_expand(text, registry) == "suite.toml: include[0].options.hidden: expected an integer, got '32'"


def test_a_rule_option_is_checked_against_the_workloads_the_rule_can_match(registry) -> None:
    gemm = {"workload": "gemm", "batch_size": 1, "m": 8, "n": 8, "k": 8}
    text = toy_suite("s", workloads={"g": gemm}, tables={"exclude": [{"workload": "toy", "options": {"m": 8}}]})
    assert _refused_by_expand(text, registry) == (
        "suite.toml: exclude[0].options.m: no workload this rule can match ('toy') has it; "
        "options are: features, hidden, layers, classes, lr"
    )
    # Without the workload key the rule may match the gemm cells, which have m.
    text = toy_suite("s", workloads={"g": gemm}, tables={"exclude": [{"options": {"m": 8}}]})
    cells = matrix.expand(suitefile.loads(text), registry, "cpu")
    assert [c.id for c in cells] == ["toy/fp32/bs8"]


def test_a_rule_option_that_is_right_still_selects(registry) -> None:
    text = toy_suite(
        "s",
        toy={"batch_size": 8, "hidden": [32, 64], "lr": 0.5},
        tables={"exclude": [{"options": {"hidden": 32, "lr": 0.5}}]},
    )
    cells = matrix.expand(suitefile.loads(text), registry, "cpu")
    assert [c.id for c in cells] == ["toy[hidden=64]/fp32/bs8"]


# A byte-order mark (what some Windows editors write first) carries no meaning: the suite reads as without it.


def test_a_suite_file_that_starts_with_a_byte_order_mark_loads(tmp_path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + toy_suite("bom").encode("utf-8"))
    spec = suitefile.load(path)
    assert spec.name == "bom"
    assert spec == suitefile.loads(toy_suite("bom"), str(path))


def test_a_byte_order_mark_in_text_loads_too() -> None:
    assert suitefile.loads("\ufeff" + toy_suite("bom")).name == "bom"


# D-device: a CUDA device asked for on a machine with none names what asked for it.


def test_suite_device_cuda_without_a_gpu_names_the_file_and_the_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("ampsuite.host.environment.detect_device", lambda: "cpu")
    path = tmp_path / "suite.toml"
    path.write_text(toy_suite("s", device="cuda"), encoding="utf-8")
    with pytest.raises(UsageError) as info:
        session.plan(path)
    assert str(info.value) == (
        f'{path}: suite.device = "cuda": the suite asks for a CUDA device, and torch sees none '
        "(--device cpu runs it here; --dry-run --as-device cuda:N previews its cells as on N GPUs)"
    )
    assert [c.device for c in session.plan(path, device="cpu").cells] == ["cpu"]


def test_device_flag_cuda_without_a_gpu_names_the_flag(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("ampsuite.host.environment.detect_device", lambda: "cpu")
    path = tmp_path / "suite.toml"
    path.write_text(toy_suite("s"), encoding="utf-8")
    assert cli.main(["run", str(path), "--dry-run", "--device", "cuda"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert "--device cuda: torch sees no CUDA device (--device cpu runs it here;" in err
    assert "suite.toml" not in err


def test_a_device_that_only_repeats_the_suites_names_the_file(tmp_path, monkeypatch) -> None:
    # The pytest plugin passes the suite's own device on; the suite file is still what asked for CUDA.
    monkeypatch.setattr("ampsuite.host.environment.detect_device", lambda: "cpu")
    path = tmp_path / "suite.toml"
    path.write_text(toy_suite("s", device="cuda"), encoding="utf-8")
    with pytest.raises(UsageError, match=r'suite\.toml: suite\.device = "cuda": the suite asks for a CUDA device'):
        session.plan(path, device="cuda")
