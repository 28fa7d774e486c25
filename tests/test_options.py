"""Rules on one option declared in its field's metadata (choices, min_length, pattern, bounds): checked with the
option's key, held against the default when a plugin loads, shown by ``ampsuite list``, and read by tune."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from ampsuite import PluginError, Technique, cli, hookimpl
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.spec.options import OptionError, build_options, declared_choices, describe
from ampsuite.tune.space import option_choices

BUILTINS = PluginSettings(autoload=False)


@dataclass(frozen=True)
class Declared:
    depth: int = field(default=50, metadata={"help": "a depth", "choices": (18, 50)})
    scale: float = field(default=1.0, metadata={"choices": (0.5, 1.0)})
    kinds: tuple[str, ...] = field(default=("a",), metadata={"choices": ("a", "b"), "min_length": 1})
    name: str = field(default="x", metadata={"min_length": 1})
    path: str = field(default="blocks", metadata={"pattern": r"[a-z]+(\.[a-z]+)*"})
    table: dict[str, int] = field(default_factory=lambda: {"k": 1}, metadata={"min_length": 1})
    warps: Literal[4, 8] = 4
    maybe: str | None = field(default=None, metadata={"choices": ("on", "off")})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"depth": 20}, "depth: expected one of 18, 50, got 20"),
        ({"kinds": ["a", "c"]}, "kinds[1]: expected one of 'a', 'b', got 'c'"),
        ({"kinds": []}, "kinds: expected a non-empty list, got ()"),
        ({"name": ""}, "name: expected a non-empty string, got ''"),
        ({"path": "blocks..0"}, r"path: expected a string matching [a-z]+(\.[a-z]+)*, got 'blocks..0'"),
        ({"table": {}}, "table: expected a non-empty table, got {}"),
        ({"maybe": "auto"}, "maybe: expected one of 'on', 'off', got 'auto'"),
        # A choice is a value of its own type: true is not 1, nor 8.0 the integer 8.
        ({"warps": 8.0}, "warps: expected one of 4, 8, got 8.0"),
        ({"warps": True}, "warps: expected one of 4, 8, got True"),
    ],
)
def test_a_value_outside_its_declared_rule_is_refused_with_the_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionError) as info:
        build_options(Declared, values)
    assert str(info.value) == message


def test_values_inside_their_rules_pass_and_keep_the_declared_choice() -> None:
    built = build_options(
        Declared, {"depth": 18, "scale": 1, "kinds": ["b", "a"], "path": "encoder.layers", "warps": 8, "maybe": None}
    )
    assert (built.depth, built.kinds, built.path, built.warps, built.maybe) == (
        18,
        ("b", "a"),
        "encoder.layers",
        8,
        None,
    )
    # An integer for a float choice is that float, as for any float option.
    assert built.scale == 1.0 and isinstance(built.scale, float)


def test_ampsuite_list_shows_each_rule_with_the_type() -> None:
    types_by_name = {spec.name: spec.type for spec in describe(Declared)}
    assert types_by_name == {
        "depth": "18 | 50",
        "scale": "0.5 | 1.0",
        "kinds": "non-empty list of 'a' | 'b'",
        "name": "non-empty str",
        "path": r"str matching [a-z]+(\.[a-z]+)*",
        "table": "non-empty table of int",
        "warps": "4 | 8",
        "maybe": "'on' | 'off' or none",
    }


def test_the_builtins_list_their_choices(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for line in (
        "    depth (18 | 34 | 50 | 101 | 152, default 50): ResNet depth",
        "    mode ('default' | 'reduce-overhead' | 'max-autotune' | 'max-autotune-no-cudagraphs', default 'default'): "
        "inductor mode",
        "    backend (non-empty str, default 'inductor'): torch.compile backend ('aot_eager' to test plumbing)",
        "    start_method ('' | 'fork' | 'spawn' | 'forkserver', default ''): worker start method; "
        "empty for the platform default",
        "    mask_prob (float > 0 and <= 1, default 0.15): fraction of positions masked (at least one each)",
    ):
        assert line in lines
    layers = next(line for line in lines if line.startswith("    layers (non-empty list of "))
    assert "'layernorm' | 'softmax' | 'batchnorm' | 'loss'" in layers


def test_declared_choices_are_the_set_valued_options_but_not_a_lists_items() -> None:
    assert declared_choices(Declared) == {
        "depth": (18, 50),
        "scale": (0.5, 1.0),
        "warps": (4, 8),
        "maybe": ("on", "off"),
    }


def _plugin_with(options: type) -> object:
    class Plugin:
        @hookimpl
        def ampsuite_techniques(self) -> list[Technique]:
            return [Technique(name="mine", summary="x", apply=lambda step, options: step, options=options)]

    return Plugin()


@pytest.mark.parametrize(
    ("metadata", "default", "message"),
    [
        ({"choices": ("a", "b")}, "c", "option mode: default: expected one of 'a', 'b', got 'c'"),
        ({"min_length": 1}, "", "option mode: default: expected a non-empty string, got ''"),
        ({"choices": "ab"}, "a", "option mode: choices must be a list or tuple of values, got 'ab'"),
        (
            {"pattern": "("},
            "a",
            "option mode: pattern '(' is no regular expression: missing ), unterminated subpattern at position 0",
        ),
        ({"choices": ("a", "b"), "tune": ("c",)}, "a", "option mode: tune[0]: expected one of 'a', 'b', got 'c'"),
        ({"ge": "1"}, "a", "option mode: ge must be a number, got '1'"),
    ],
)
def test_a_malformed_declaration_or_a_default_outside_it_is_refused_when_the_plugin_loads(
    metadata: dict[str, Any], default: str, message: str
) -> None:
    options = dataclasses.make_dataclass("Bad", [("mode", str, field(default=default, metadata=metadata))], frozen=True)
    with pytest.raises(PluginError) as info:
        load_registry(BUILTINS, objects=[("bad", _plugin_with(options))])
    assert str(info.value) == f"plugin 'bad': technique 'mine': {message}"


@dataclass(frozen=True)
class Tunable:
    size: int = field(default=1, metadata={"choices": (1, 2, 4)})
    level: Literal["low", "high"] = field(default="low", metadata={"tune": ()})
    costly: str = field(default="a", metadata={"choices": ("a", "b", "c"), "tune": ("a", "b")})


def test_tune_tries_declared_choices_as_it_tries_literal_values_and_the_tune_metadata_narrows_them() -> None:
    registry = load_registry(BUILTINS, objects=[("tunable", _plugin_with(Tunable))])
    assert option_choices(registry, "mine", {}) == [("size", 2), ("size", 4), ("costly", "b")]
    # The suite's [tune.mine] table still names any declared value.
    assert option_choices(registry, "mine", {}, {"level": ["high"], "costly": ["c"]}) == [
        ("size", 2),
        ("size", 4),
        ("level", "high"),
        ("costly", "c"),
    ]


def test_torch_compiles_modes_are_declared_once_and_tune_tries_the_quick_ones(registry: Any) -> None:
    mode = next(f for f in dataclasses.fields(registry.techniques["torch-compile"].options) if f.name == "mode")
    assert declared_choices(registry.techniques["torch-compile"].options)["mode"] == (
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
    )
    assert mode.metadata["tune"] == ("default", "reduce-overhead")
    assert [v for name, v in option_choices(registry, "torch-compile", {}) if name == "mode"] == ["reduce-overhead"]
