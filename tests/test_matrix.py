"""Matrix expansion: a suite and a registry in, cells with stable readable ids out.

The throw-away plugin below gives the matrix what the built-ins do not have on
every machine: a list-typed option, a CUDA-only workload, a workload with its
own check, and techniques that require, conflict, need workload traits and check.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from ampsuite import CheckContext, Technique, TrainStep, Workload, hookimpl
from ampsuite.contract.cell import Cell
from ampsuite.contract.errors import SuiteFileError, UsageError
from ampsuite.host.manager import PluginSettings, load_registry
from ampsuite.spec.keyword import KeywordExpression, select
from ampsuite.spec.matrix import expand
from ampsuite.spec.suitefile import loads


@dataclass(frozen=True)
class GridOptions:
    dims: list[int] = field(default_factory=lambda: [4, 4], metadata={"help": "layer widths"})
    act: str = field(default="relu", metadata={"help": "activation"})
    fused: bool = field(default=False, metadata={"help": "fused kernels"})


def _never_built(options: Any, ctx: Any) -> TrainStep:
    raise AssertionError("matrix tests expand cells; they never build one")


def _never_applied(step: TrainStep, options: Any) -> TrainStep:
    raise AssertionError("matrix tests expand cells; they never apply a technique")


def _note_applied(step: TrainStep, options: Any) -> TrainStep:
    step.notes["on_data_path"] = True
    return step


def _odd_dims_check(options: GridOptions, device_type: str) -> str | None:
    return "odd widths are not supported" if any(d % 2 for d in options.dims) else None


def _picky_check(ctx: CheckContext) -> str | None:
    return f"batch size {ctx.batch_size} is below 16" if ctx.batch_size < 16 else None


def _self_naming_check(ctx: CheckContext) -> str | None:
    return "self-naming: needs a model"


class MatrixPlugin:
    """Registered as an object, so it exists only in this test process."""

    @hookimpl
    def ampsuite_workloads(self) -> list[Workload]:
        return [
            Workload(
                name="grid", summary="list-typed option", build=_never_built, options=GridOptions, check=_odd_dims_check
            ),
            Workload(name="gpu-only", summary="needs CUDA", build=_never_built, requires=frozenset({"cuda"})),
        ]

    @hookimpl
    def ampsuite_techniques(self) -> list[Technique]:
        return [
            Technique(name="needs-cuda", summary="cuda only", apply=_never_applied, requires=frozenset({"cuda"})),
            Technique(name="needs-noop", summary="requires noop", apply=_never_applied, requires=frozenset({"noop"})),
            Technique(name="clash", summary="conflicts with noop", apply=_never_applied, conflicts=frozenset({"noop"})),
            Technique(name="picky", summary="checks the batch size", apply=_never_applied, check=_picky_check),
            Technique(name="early", summary="applies first", apply=_never_applied, order=1),
            Technique(name="self-naming", summary="names itself", apply=_never_applied, check=_self_naming_check),
            Technique(
                name="needs-conv",
                summary="needs a convolutional model",
                apply=_never_applied,
                requires_traits=frozenset({"conv", "model"}),
            ),
            Technique(
                name="picky-conv",
                summary="needs convolutions, checks the batch size",
                apply=_never_applied,
                check=_picky_check,
                requires_traits=frozenset({"conv"}),
            ),
            Technique(
                name="on-data-path",
                summary="needs a host data path; runs",
                apply=_note_applied,
                requires_traits=frozenset({"data-path"}),
            ),
        ]


@pytest.fixture(scope="module")
def reg() -> Any:
    return load_registry(
        PluginSettings(extra=("ampsuite.plugins.faults",), autoload=False), objects=[("matrix-test", MatrixPlugin())]
    )


def cells_of(reg: Any, text: str, device: str = "cpu") -> list[Cell]:
    return expand(loads(text, "m.toml"), reg, device)


def ids(cells: list[Cell]) -> list[str]:
    return [c.id for c in cells]


# (test id, suite text, expected cell ids in order)
EXPANSIONS = [
    (
        "no-axes",
        """
        [workloads.toy]
        batch_size = 8
        """,
        ["toy/fp32/bs8"],
    ),
    (
        "scalar-option-is-not-in-the-id",
        """
        [workloads.toy]
        batch_size = 8
        hidden = 16
        """,
        ["toy/fp32/bs8"],
    ),
    (
        "list-value-is-an-axis",
        """
        [workloads.toy]
        batch_size = 8
        hidden = [16, 32]
        """,
        ["toy[hidden=16]/fp32/bs8", "toy[hidden=32]/fp32/bs8"],
    ),
    (
        "two-axes-in-declaration-order",
        """
        [workloads.toy]
        batch_size = 8
        layers = [1, 2]
        hidden = [16, 32]
        """,
        [
            "toy[layers=1,hidden=16]/fp32/bs8",
            "toy[layers=1,hidden=32]/fp32/bs8",
            "toy[layers=2,hidden=16]/fp32/bs8",
            "toy[layers=2,hidden=32]/fp32/bs8",
        ],
    ),
    (
        "list-typed-option-with-a-list-is-one-value",
        """
        [workloads.grid]
        batch_size = 8
        dims = [8, 16]
        """,
        ["grid/fp32/bs8"],
    ),
    (
        "list-typed-option-with-a-list-of-lists-is-an-axis",
        """
        [workloads.grid]
        batch_size = 8
        dims = [[8], [8, 16]]
        """,
        ["grid[dims=8]/fp32/bs8", "grid[dims=8x16]/fp32/bs8"],
    ),
    (
        "bool-and-string-axes",
        """
        [workloads.grid]
        batch_size = 8
        fused = [true, false]
        act = ["gelu"]
        """,
        ["grid[fused=true,act=gelu]/fp32/bs8", "grid[fused=false,act=gelu]/fp32/bs8"],
    ),
    (
        "workload-id-differs-from-plugin",
        """
        [workloads.tiny]
        plugin = "toy"
        batch_size = [8, 16]
        """,
        ["tiny/fp32/bs8", "tiny/fp32/bs16"],
    ),
    (
        "baseline-first-within-each-batch-size",
        """
        [suite]
        baseline = "ref"
        [workloads.toy]
        batch_size = [8, 16]
        [combinations]
        noop = ["noop"]
        early = ["early"]
        ref = []
        """,
        ["toy/ref/bs8", "toy/noop/bs8", "toy/early/bs8", "toy/ref/bs16", "toy/noop/bs16", "toy/early/bs16"],
    ),
    (
        "workloads-in-declaration-order",
        """
        [workloads.second]
        plugin = "toy"
        batch_size = 8
        [workloads.first]
        plugin = "toy"
        batch_size = 8
        """,
        ["second/fp32/bs8", "first/fp32/bs8"],
    ),
    (
        "exclude-rule",
        """
        [workloads.toy]
        batch_size = [8, 16]
        hidden = [16, 32]
        [combinations]
        fp32 = []
        noop = ["noop"]
        [[exclude]]
        combination = "noop"
        batch_size = 16
        [[exclude]]
        options = { hidden = 32 }
        batch_size = 8
        """,
        [
            "toy[hidden=16]/fp32/bs8",
            "toy[hidden=16]/noop/bs8",
            "toy[hidden=16]/fp32/bs16",
            "toy[hidden=32]/fp32/bs16",
        ],
    ),
    (
        "include-rules-are-alternatives",
        """
        [workloads.toy]
        batch_size = [8, 16]
        [workloads.other]
        plugin = "toy"
        batch_size = 8
        [combinations]
        fp32 = []
        noop = ["noop"]
        [[include]]
        technique = "noop"
        batch_size = 16
        [[include]]
        workload = "other"
        """,
        ["toy/noop/bs16", "other/fp32/bs8", "other/noop/bs8"],
    ),
    (
        "include-by-plugin-and-exclude-win-together",
        """
        [workloads.toy]
        batch_size = [8, 16]
        [workloads.grid]
        batch_size = 8
        [[include]]
        plugin = "toy"
        [[exclude]]
        batch_size = 16
        """,
        ["toy/fp32/bs8"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in EXPANSIONS], ids=[c[0] for c in EXPANSIONS])
def test_expansion_ids_and_order(reg, text: str, expected: list[str]) -> None:
    assert ids(cells_of(reg, text)) == expected


def test_axis_values_land_in_options_and_axes(reg) -> None:
    cells = cells_of(reg, "[workloads.grid]\nbatch_size = 8\ndims = [[2], [2, 6]]\nact = 'tanh'\n")
    assert [c.axes for c in cells] == [{"dims": [2]}, {"dims": [2, 6]}]
    assert [c.options for c in cells] == [
        {"dims": [2], "act": "tanh", "fused": False},
        {"dims": [2, 6], "act": "tanh", "fused": False},
    ]


def test_techniques_are_in_apply_order_with_their_options(reg) -> None:
    (cell,) = cells_of(
        reg,
        """
        [workloads.toy]
        batch_size = 8
        [combinations]
        mix = ["noop", "early", "inject-fault"]
        [techniques.inject-fault]
        kind = "abort"
        """,
    )
    names = [n for n, _ in cell.techniques]
    assert names == ["early", "noop", "inject-fault"]  # order 1, 50, 99
    assert dict(cell.techniques)["inject-fault"] == {
        "kind": "abort",
        "at": "step",
        "after_steps": 0,
        "oom_limit_gb": 64.0,
        "seconds": 5.0,
    }
    assert (cell.combination, cell.baseline, cell.batch_size, cell.device) == ("mix", "mix", 8, "cpu")


def test_a_combination_sets_its_own_technique_options(reg) -> None:
    """[combination_options.ID.TECHNIQUE] goes on top of [techniques.TECHNIQUE], in that combination's cells only."""
    cells = cells_of(
        reg,
        """
        [workloads.toy]
        batch_size = 8
        [combinations]
        fp32 = []
        abort = ["inject-fault"]
        late = ["inject-fault", "noop"]
        [techniques.inject-fault]
        kind = "abort"
        seconds = 2.0
        [combination_options.late.inject-fault]
        after_steps = 3
        """,
    )
    faults = {c.combination: dict(c.techniques).get("inject-fault") for c in cells}
    assert faults["abort"] is not None and faults["late"] is not None
    assert (faults["abort"]["kind"], faults["abort"]["after_steps"], faults["abort"]["seconds"]) == ("abort", 0, 2.0)
    assert (faults["late"]["kind"], faults["late"]["after_steps"], faults["late"]["seconds"]) == ("abort", 3, 2.0)


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ("[combination_options.lat.inject-fault]\nat = 'build'", "combination_options.lat", "did you mean 'late'?"),
        ("[combination_options]\nlate = {}", "combination_options.late", "expected [combination_options.late"),
        ("[combination_options.late.tf32]\n", "combination_options.late.tf32", "not in combination 'late'"),
        ("[combination_options]\nlate = {inject-fault = 1}", "combination_options.late.inject-fault", "table"),
        (
            "[combination_options.late.inject-fault]\nafter_steps = -1",
            "combination_options.late.inject-fault",
            "after_steps",
        ),
        (
            "[combination_options.late.inject-fault]\nwhen = 1",
            "combination_options.late.inject-fault.when",
            "unknown",
        ),
    ],
)
def test_combination_options_that_name_nothing_or_bad_values_are_refused(
    reg, table: str, key: str, message: str
) -> None:
    text = f"""
[workloads.toy]
batch_size = 8
[combinations]
late = ["inject-fault", "noop"]
{table}
"""
    with pytest.raises(SuiteFileError) as info:
        cells_of(reg, text)
    assert info.value.key.startswith(key) and message in str(info.value), str(info.value)


# (test id, combination techniques or workload, device, expected skip reason)
SKIPS = [
    ("conflict", "toy", ["clash", "noop"], "cpu", "clash conflicts with noop"),
    ("requires-technique", "toy", ["needs-noop"], "cpu", "needs-noop requires noop in the same combination"),
    ("requirement-met", "toy", ["needs-noop", "noop"], "cpu", None),
    ("requires-cuda-on-cpu", "toy", ["needs-cuda"], "cpu", "needs-cuda needs a CUDA device; this run is on cpu"),
    ("requires-cuda-on-cuda", "toy", ["needs-cuda"], "cuda", None),
    ("technique-check", "toy", ["picky"], "cpu", "picky: batch size 8 is below 16"),
    ("technique-check-names-itself", "toy", ["self-naming"], "cpu", "self-naming: needs a model"),  # prefixed once
    ("traits-met", "resnet", ["needs-conv"], "cpu", None),
    ("trait-missing", "toy", ["needs-conv"], "cpu", "needs-conv needs a workload with trait 'conv'; 'toy' has none"),
    (
        "traits-missing",
        "gemm",
        ["needs-conv"],
        "cpu",
        "needs-conv needs a workload with traits 'conv', 'model'; 'gemm' has none",
    ),
    # The declared traits are decided before the technique's own check is asked.
    (
        "trait-before-check",
        "toy",
        ["picky-conv"],
        "cpu",
        "picky-conv needs a workload with trait 'conv'; 'toy' has none",
    ),
    ("check-once-traits-met", "resnet", ["picky-conv"], "cpu", "picky-conv: batch size 8 is below 16"),
    ("workload-requires-cuda", "gpu-only", [], "cpu", "workload 'gpu-only' needs a cuda device; this run is on cpu"),
    ("workload-requires-cuda-on-cuda", "gpu-only", [], "cuda", None),
    (
        "builtin-cuda-technique-on-cpu",
        "toy",
        ["cuda-graphs"],
        "cpu",
        "cuda-graphs needs a CUDA device; this run is on cpu",
    ),
]


@pytest.mark.parametrize(
    ("workload", "techniques", "device", "reason"), [s[1:] for s in SKIPS], ids=[s[0] for s in SKIPS]
)
def test_skip_reasons(reg, workload: str, techniques: list[str], device: str, reason: str | None) -> None:
    combo = ", ".join(f'"{t}"' for t in techniques)
    (cell,) = cells_of(reg, f"[workloads.{workload}]\nbatch_size = 8\n[combinations]\nc = [{combo}]\n", device)
    assert cell.skip_reason == reason


def test_a_technique_needing_a_trait_runs_where_the_workload_has_it(ampsuite_plugin, ampsuite_run) -> None:
    ampsuite_plugin(MatrixPlugin())
    result = ampsuite_run(
        {
            "workloads": {"toy": {"batch_size": 4, "hidden": 8}, "gemm": {"batch_size": 1, "m": 8, "n": 8, "k": 8}},
            "combinations": {"c": ["on-data-path"]},
        }
    )
    result.assert_status("toy/c/bs4", "passed")
    assert result.notes("toy/c/bs4")["on_data_path"] is True
    result.assert_status(
        "gemm/c/bs1", "skipped", reason="^on-data-path needs a workload with trait 'data-path'; 'gemm' has none$"
    )


def test_workload_check_skips_only_the_points_it_refuses(reg) -> None:
    cells = cells_of(reg, "[workloads.grid]\nbatch_size = 8\ndims = [[4], [3]]\n")
    assert [(c.id, c.skip_reason) for c in cells] == [
        ("grid[dims=4]/fp32/bs8", None),
        ("grid[dims=3]/fp32/bs8", "odd widths are not supported"),
    ]


def test_skipped_cells_stay_in_the_matrix(reg) -> None:
    cells = cells_of(reg, "[workloads.toy]\nbatch_size = 8\n[combinations]\nfp32 = []\ng = ['needs-cuda']\n")
    assert [(c.id, c.skip_reason is None) for c in cells] == [("toy/fp32/bs8", True), ("toy/g/bs8", False)]


SUITE_FOR_PURITY = """
[suite]
baseline = "fp32"
[workloads.toy]
batch_size = [8, 16]
hidden = [16, 32]
[workloads.grid]
batch_size = 8
dims = [[2], [4, 4]]
[combinations]
fp32 = []
noop = ["noop"]
fault = ["inject-fault"]
[techniques.inject-fault]
kind = "hang"
[[exclude]]
combination = "noop"
options = { hidden = 32 }
"""


def test_expand_is_pure(reg) -> None:
    spec = loads(SUITE_FOR_PURITY, "p.toml")
    before = copy.deepcopy(spec.as_dict())
    first = expand(spec, reg, "cpu")
    second = expand(spec, reg, "cpu")
    assert first == second
    assert [c.as_dict() for c in first] == [c.as_dict() for c in second]
    assert spec.as_dict() == before
    assert len(first) == 2 * 2 * 3 - 2 + 2 * 3


def test_cells_share_no_mutable_state(reg) -> None:
    cells = expand(loads(SUITE_FOR_PURITY, "p.toml"), reg, "cpu")
    toy16 = [c for c in cells if c.axes == {"hidden": 16}]
    toy16[0].options["hidden"] = 999
    dict(toy16[0].techniques).get("inject-fault", {})["kind"] = "raise"
    assert [c.options["hidden"] for c in toy16[1:]] == [16] * (len(toy16) - 1)
    faults = [dict(c.techniques)["inject-fault"]["kind"] for c in cells if c.combination == "fault"]
    assert faults == ["hang"] * len(faults)


RULE_SUITE = """
[workloads.toy]
batch_size = [8, 16]
[workloads.other]
plugin = "toy"
batch_size = 8
[combinations]
fp32 = []
noop = ["noop"]
"""

# (rule table, key the error names, what the message must say after the key)
BAD_RULES = [
    ("[[exclude]]\ncombination = 'nop'", "exclude[0].combination", "unknown combination 'nop'; did you mean 'noop'?"),
    ("[[include]]\nworkload = 'othr'", "include[0].workload", "unknown workload id 'othr'; did you mean 'other'?"),
    (
        "[[exclude]]\nbatch_size = 8\n[[exclude]]\nworkload = 'zzz'",
        "exclude[1].workload",
        "unknown workload id 'zzz'; the suite declares: toy, other",
    ),
    ("[[exclude]]\ntechnique = 'nop'", "exclude[0].technique", "unknown technique 'nop'; did you mean 'noop'?"),
    ("[[exclude]]\ntechnique = 'early'", "exclude[0].technique", "no combination of this suite uses 'early'"),
    ("[[include]]\nplugin = 'tyo'", "include[0].plugin", "unknown workload 'tyo'; did you mean 'toy'?"),
    ("[[include]]\nplugin = 'grid'", "include[0].plugin", "no [workloads.ID] table of this suite runs workload 'grid'"),
    (
        "[[exclude]]\nbatch_size = 999",
        "exclude[0].batch_size",
        "no workload this rule can match has batch size 999 (its batch sizes: 8, 16)",
    ),
    (
        "[[exclude]]\nworkload = 'other'\nbatch_size = 16",
        "exclude[0].batch_size",
        "no workload this rule can match has batch size 16 (its batch sizes: 8)",
    ),
]


@pytest.mark.parametrize(("rule", "key", "message"), BAD_RULES, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_RULES)])
def test_rule_values_that_name_nothing_are_refused(reg, rule: str, key: str, message: str) -> None:
    """A misspelled rule value would match no cell and silently change the matrix: it is an error instead."""
    with pytest.raises(SuiteFileError) as info:
        cells_of(reg, RULE_SUITE + rule)
    assert str(info.value).startswith(f"m.toml: {key}: {message}"), str(info.value)


def test_rule_values_that_name_something_are_accepted(reg) -> None:
    rules = "[[exclude]]\ncombination = 'noop'\nworkload = 'toy'\n[[exclude]]\ntechnique = 'noop'\nplugin = 'toy'\n"
    assert ids(cells_of(reg, RULE_SUITE + rules)) == ["toy/fp32/bs8", "toy/fp32/bs16", "other/fp32/bs8"]


# -k: (expression, ids selected out of ALL_IDS)
ALL_IDS = [
    "toy[hidden=16]/fp32/bs8",
    "toy[hidden=16]/noop/bs8",
    "toy[hidden=16]/amp-bf16/bs16",
    "cnn/fp32/bs16",
    "cnn/amp-bf16/bs32",
]
KEYWORDS = [
    ("bs16", [2, 3]),
    ("BS16", [2, 3]),
    ("fp32 and bs8", [0]),
    ("not toy", [3, 4]),
    ("noop or cnn", [1, 3, 4]),
    ("(noop or amp) and not bs32", [1, 2]),
    ("not (toy or bs32)", [3]),
    ("not not cnn", [3, 4]),
    ("hidden=16", [0, 1, 2]),
    ("nothing-matches", []),
]


@pytest.mark.parametrize(("expr", "selected"), KEYWORDS, ids=[k[0] for k in KEYWORDS])
def test_keyword_expressions(expr: str, selected: list[int]) -> None:
    e = KeywordExpression(expr)
    assert [i for i, cid in enumerate(ALL_IDS) if e.matches(cid)] == selected


BAD_KEYWORDS = [
    ("", "-k: empty expression"),
    ("   ", "-k: empty expression"),
    ("(fp32", "-k '(fp32': expression ends too early"),
    ("fp32)", "-k 'fp32)': unexpected ')'"),
    ("fp32 noop", "-k 'fp32 noop': unexpected 'noop'"),
    ("and fp32", "-k 'and fp32': unexpected 'and'"),
    ("fp32 or", "-k 'fp32 or': expression ends too early"),
    ("not", "-k 'not': expression ends too early"),
]


@pytest.mark.parametrize(("expr", "message"), BAD_KEYWORDS, ids=[repr(b[0]) for b in BAD_KEYWORDS])
def test_bad_keyword_expressions_are_usage_errors(expr: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        KeywordExpression(expr)
    assert str(info.value) == message


def test_select_keeps_matrix_order_and_none_selects_all(reg) -> None:
    cells = cells_of(reg, "[workloads.toy]\nbatch_size = [8, 16]\n[combinations]\nfp32 = []\nnoop = ['noop']\n")
    assert ids(select(cells, "noop or bs16")) == ["toy/noop/bs8", "toy/fp32/bs16", "toy/noop/bs16"]
    assert select(cells, None) == cells


# -- table options (a dict-typed field, as torch-compile's inductor) -----------------------------------------------


def _entry_type(name: str) -> Any:
    """An entry_type hook: the settings a table takes, by (dotted) name."""
    known: dict[str, Any] = {"depth": int, "ratio": float, "sub.shape": tuple[int, ...], "sub.on": bool}
    if name not in known:
        raise ValueError(f"no setting {name!r}")
    return known[name]


@dataclass(frozen=True)
class TableOptions:
    weights: dict[str, int] = field(default_factory=dict, metadata={"help": "any names, integer values"})
    settings: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "named settings", "entry_type": _entry_type}
    )
    mode: str = field(default="a", metadata={"help": "a plain option"})


def test_a_table_option_is_described_built_and_written_back_as_plain_values() -> None:
    from ampsuite.spec.options import build_options, describe, is_table_option, options_as_dict

    assert [(o.name, o.type, o.default) for o in describe(TableOptions)][:2] == [
        ("weights", "table of int", {}),
        ("settings", "table", {}),
    ]
    assert is_table_option(TableOptions, "settings") and not is_table_option(TableOptions, "mode")
    # TOML's unquoted dotted keys arrive as sub-tables: the hook's refusal of "sub" makes them dotted names.
    built = build_options(
        TableOptions, {"weights": {"a.b": 2}, "settings": {"ratio": 1, "sub": {"shape": [2, 2], "on": True}}}
    )
    assert built.settings == {"ratio": 1.0, "sub.shape": (2, 2), "sub.on": True}
    assert isinstance(built.settings["ratio"], float)
    assert options_as_dict(built) == {
        "weights": {"a.b": 2},
        "settings": {"ratio": 1.0, "sub.shape": [2, 2], "sub.on": True},
        "mode": "a",
    }


@pytest.mark.parametrize(
    ("values", "key", "message"),
    [
        ({"weights": [1]}, "weights", "expected a table (KEY = value), got [1]"),
        ({"weights": {"a.b": "x"}}, 'weights."a.b"', "expected an integer, got 'x'"),
        ({"weights": {"a": float("nan")}}, "weights.a", "expected an integer, got nan"),
        ({"settings": {"dpeth": 3}}, "settings.dpeth", "no setting 'dpeth'"),
        ({"settings": {"sub": {"of": True}}}, 'settings."sub.of"', "no setting 'sub.of'"),
        ({"settings": {"depth": True}}, "settings.depth", "expected an integer, got True"),
        ({"settings": {"sub.shape": [1, "2"]}}, 'settings."sub.shape"[1]', "expected an integer, got '2'"),
    ],
)
def test_a_table_option_names_the_entry_it_refuses(values: dict[str, Any], key: str, message: str) -> None:
    from ampsuite.spec.options import OptionError, UnknownOption, build_options

    with pytest.raises(OptionError) as info:
        build_options(TableOptions, values)
    assert (info.value.key, info.value.message) == (key, message)
    assert isinstance(info.value, UnknownOption) is message.startswith("no setting")


def test_a_later_table_merges_into_an_earlier_one_entry_by_entry() -> None:
    from ampsuite.spec.options import merge_values

    base = {"weights": {"a": 1, "b": 2}, "mode": "a"}
    assert merge_values(TableOptions, base, {"weights": {"b": 3, "c": 4}, "mode": "b"}) == {
        "weights": {"a": 1, "b": 3, "c": 4},
        "mode": "b",
    }
    # OPTION.ENTRY sets one entry (how tune names a variant of one), the rest of the table kept.
    assert merge_values(TableOptions, base, {"weights.c": 5, "settings.sub.on": True}) == {
        "weights": {"a": 1, "b": 2, "c": 5},
        "settings": {"sub.on": True},
        "mode": "a",
    }
    assert base == {"weights": {"a": 1, "b": 2}, "mode": "a"}  # the earlier table is left as it was


@pytest.mark.parametrize(
    ("body", "key", "meant"),
    [
        ('worklaod = "toy"\nbatch_size = 8', "workloads.mytoy.worklaod", "workload"),
        ('workload = "toy"\nbatchsize = 8', "workloads.mytoy.batchsize", "batch_size"),
        ('workload = "toy"\nbatch_size = 8\ngpu = 2', "workloads.mytoy.gpu", "gpus"),
        ('workload = "toy"\nbatch_size = 8\nnode = 2', "workloads.mytoy.node", "nodes"),
    ],
)
def test_a_misspelled_entry_key_is_named_not_blamed_on_the_id(reg, body: str, key: str, meant: str) -> None:
    with pytest.raises(SuiteFileError) as info:
        cells_of(reg, f"[workloads.mytoy]\n{body}\n")
    assert str(info.value) == f"m.toml: {key}: unknown key; did you mean {meant!r}?"


@dataclass(frozen=True)
class NodeOptions:
    node: int = field(default=1, metadata={"help": "an option named like the entry key `nodes`"})


class NodePlugin:
    @hookimpl
    def ampsuite_workloads(self) -> list[Workload]:
        return [Workload(name="by-node", summary="an option named node", build=_never_built, options=NodeOptions)]


def test_an_option_that_reads_like_an_entry_key_is_still_an_option() -> None:
    """The typo check yields to the workload's own options: only a key that is no option is refused."""
    registry = load_registry(PluginSettings(autoload=False), objects=[("node-test", NodePlugin())])
    cells = cells_of(registry, '[workloads.g]\nworkload = "by-node"\nbatch_size = 8\nnode = [1, 2]\n')
    assert [c.id for c in cells] == ["g[node=1]/fp32/bs8", "g[node=2]/fp32/bs8"]
