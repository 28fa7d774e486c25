"""Bad suite files: each one is refused before any work starts, with a message that
names the file, the key path and what was expected.

Structural errors come from ``suitefile.load``; errors that need the plugins
(unknown workload, technique or option) from ``matrix.expand``. Both run before
the first cell.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampsuite.contract.errors import ExitCode, SuiteFileError
from ampsuite.spec import matrix, suitefile, suitespec

GOOD_TOY = """
[workloads.toy]
batch_size = 8
"""

# (test id, suite text, regex for the message after "PATH: ")
STRUCTURE_ERRORS = [
    (
        "invalid-toml",
        "[suite\nname = 'x'\n",
        r"not valid TOML: .+ \(at line 1, column \d+\)",
    ),
    (
        "unknown-top-level-key",
        "[measures]\nmin_steps = 3\n" + GOOD_TOY,
        r"measures: unknown key; did you mean 'measure'\?",
    ),
    (
        "unknown-suite-key",
        "[suite]\ntimout = 5\n" + GOOD_TOY,
        r"suite\.timout: unknown key; did you mean 'timeout'\?",
    ),
    (
        "no-workloads",
        "[suite]\nname = 'empty'\n",
        r"workloads: no workloads: add at least one \[workloads\.ID\] table",
    ),
    (
        "batch-size-missing",
        "[workloads.toy]\nhidden = 16\n",
        r"workloads\.toy\.batch_size: missing; expected an integer > 0 or a list of them",
    ),
    (
        "batch-size-zero",
        "[workloads.toy]\nbatch_size = 0\n",
        r"workloads\.toy\.batch_size: expected an integer > 0 or a list of them, got 0",
    ),
    (
        "batch-size-string",
        "[workloads.toy]\nbatch_size = '8'\n",
        r"workloads\.toy\.batch_size: expected an integer > 0 or a list of them, got '8'",
    ),
    (
        "batch-size-repeats",
        "[workloads.toy]\nbatch_size = [8, 16, 8]\n",
        r"workloads\.toy\.batch_size: batch sizes repeat: \[8, 16, 8\]",
    ),
    (
        "empty-axis",
        "[workloads.toy]\nbatch_size = 8\nhidden = []\n",
        r"workloads\.toy\.hidden: empty list: an axis needs at least one value",
    ),
    (
        "baseline-not-a-combination",
        "[suite]\nbaseline = 'fp33'\n" + GOOD_TOY + "[combinations]\nfp32 = []\nnoop = ['noop']\n",
        r"suite\.baseline: 'fp33' is not a combination; did you mean 'fp32'\?",
    ),
    (
        "device-not-allowed",
        "[suite]\ndevice = 'gpu'\n" + GOOD_TOY,
        r"suite\.device: expected one of auto, cpu, cuda, got 'gpu'",
    ),
    (
        "timeout-zero",
        "[suite]\ntimeout = 0\n" + GOOD_TOY,
        r"suite\.timeout: expected a number > 0, got 0",
    ),
    (
        "max-steps-below-min-steps",
        "[measure]\nmin_steps = 10\nmax_steps = 5\n" + GOOD_TOY,
        r"measure\.max_steps: must be >= measure\.min_steps \(10\), got 5",
    ),
    (
        "unknown-measure-key",
        "[measure]\nwarmup = 2\n" + GOOD_TOY,
        r"measure\.warmup: unknown key; did you mean 'warmup_steps'\?",
    ),
    (
        "processes-zero",
        "[measure]\nprocesses = 0\n" + GOOD_TOY,
        r"measure\.processes: expected an integer >= 1, got 0",
    ),
    (
        "processes-not-an-integer",
        "[measure]\nprocesses = 2.5\n" + GOOD_TOY,
        r"measure\.processes: expected an integer >= 1, got 2\.5",
    ),
    (
        "processes-a-boolean",
        "[measure]\nprocesses = true\n" + GOOD_TOY,
        r"measure\.processes: expected an integer >= 1, got True",
    ),
    (
        "processes-misspelled",
        "[measure]\nprocess = 3\n" + GOOD_TOY,
        r"measure\.process: unknown key; did you mean 'processes'\?",
    ),
    (
        "combination-not-a-list",
        GOOD_TOY + "[combinations]\nfp32 = 'noop'\n",
        r"combinations\.fp32: expected a list of technique names, got 'noop'",
    ),
    (
        "combination-id-with-slash",
        GOOD_TOY + "[combinations]\n'a/b' = []\n",
        r"combinations\.a/b: combination ids may not contain '/', '\[', '\]', ',' or spaces",
    ),
    (
        "rule-key-misspelled",
        GOOD_TOY + "[[exclude]]\ncombo = 'fp32'\n",
        r"exclude\[0\]\.combo: unknown key; did you mean 'combination'\?",
    ),
    (
        "rule-empty",
        GOOD_TOY + "[[include]]\n",
        r"include\[0\]: empty rule; give at least one of: "
        r"workload, plugin, combination, technique, batch_size, options",
    ),
    (
        "rule-wrong-value-type",
        GOOD_TOY + "[[include]]\nbatch_size = 'big'\n",
        r"include\[0\]\.batch_size: expected an integer, got 'big'",
    ),
    (
        "rules-not-an-array",
        GOOD_TOY + "[exclude]\nworkload = 'toy'\n",
        r"exclude: expected an array of tables, got a table",
    ),
    (
        "tune-choices-not-a-list",
        GOOD_TOY + "[tune.torch-compile]\nmode = 'reduce-overhead'\n",
        r"tune\.torch-compile\.mode: expected a non-empty list of values to try, got 'reduce-overhead'",
    ),
    (
        "tune-choices-empty",
        GOOD_TOY + "[tune.torch-compile]\nmode = []\n",
        r"tune\.torch-compile\.mode: expected a non-empty list of values to try, got an empty list",
    ),
    (
        "tune-table-entry-not-a-list",
        GOOD_TOY + "[tune.torch-compile.inductor]\ncombo_kernels = true\n",
        r"tune\.torch-compile\.inductor\.combo_kernels: expected a non-empty list of values to try, got True",
    ),
    (
        "workload-named-twice",
        "[workloads.w]\nworkload = 'toy'\nplugin = 'toy'\nbatch_size = 8\n",
        r"workloads\.w\.plugin: give the workload once, as `workload` \(`plugin` is its older spelling\)",
    ),
    (
        "tune-not-a-table-of-tables",
        GOOD_TOY + "[tune]\ntorch-compile = 'fast'\n",
        r"tune\.torch-compile: expected a table of option = \[values\], got 'fast'",
    ),
]

INDUCTOR = "[combinations]\nfp32 = []\nc = ['torch-compile']\n[techniques.torch-compile.inductor]\n"

# Errors found when the suite meets the registry (matrix.expand).
PLUGIN_ERRORS = [
    (
        "unknown-workload-plugin",
        "[workloads.mlp]\nplugin = 'tyo'\nbatch_size = 8\n",
        r"workloads\.mlp\.plugin: unknown workload 'tyo'; did you mean 'toy'\? \(see `ampsuite list`\)",
    ),
    (
        "unknown-workload",
        "[workloads.mlp]\nworkload = 'tyo'\nbatch_size = 8\n",
        r"workloads\.mlp\.workload: unknown workload 'tyo'; did you mean 'toy'\? \(see `ampsuite list`\)",
    ),
    (
        "unknown-technique-in-combination",
        GOOD_TOY + "[combinations]\nfp32 = []\nquiet = ['noopp']\n",
        r"combinations\.quiet\[0\]: unknown technique 'noopp'; did you mean 'noop'\? \(see `ampsuite list`\)",
    ),
    (
        "unknown-workload-option",
        "[workloads.toy]\nbatch_size = 8\nhiden = 16\n",
        r"workloads\.toy\.hiden: unknown option; did you mean 'hidden'\?",
    ),
    (
        "workload-option-wrong-type",
        "[workloads.toy]\nbatch_size = 8\nhidden = 'wide'\n",
        r"workloads\.toy\.hidden: expected an integer, got 'wide'",
    ),
    (
        "workload-option-wrong-type-in-axis",
        "[workloads.toy]\nbatch_size = 8\nlr = [0.1, 'fast']\n",
        r"workloads\.toy\.lr: expected a number, got 'fast'",
    ),
    (
        "workload-option-out-of-bounds",
        "[workloads.toy]\nbatch_size = 8\nlayers = 0\n",
        r"workloads\.toy\.layers: expected an integer >= 1, got 0",
    ),
    (
        "technique-options-unused",
        GOOD_TOY + "[combinations]\nfp32 = []\n[techniques.amp-fp16]\ninit_scale = 1024.0\n",
        r"techniques\.amp-fp16: options given for a technique no combination uses",
    ),
    (
        "technique-options-unknown-technique",
        GOOD_TOY + "[combinations]\nfp32 = []\n[techniques.amp-fp61]\ninit_scale = 1024.0\n",
        r"techniques\.amp-fp61: unknown technique 'amp-fp61'; did you mean 'amp-fp16'\? \(see `ampsuite list`\)",
    ),
    (
        "technique-option-misspelled",
        GOOD_TOY + "[combinations]\nfp32 = []\nfp16 = ['amp-fp16']\n[techniques.amp-fp16]\ninit_scal = 1024.0\n",
        r"techniques\.amp-fp16\.init_scal: unknown option; did you mean 'init_scale'\?",
    ),
    (
        "technique-option-not-allowed",
        GOOD_TOY + "[combinations]\nfp32 = []\nbad = ['inject-fault']\n[techniques.inject-fault]\nkind = 'explode'\n",
        r"techniques\.inject-fault\.kind: expected one of 'raise', 'abort', 'segfault', .*, got 'explode'",
    ),
    (
        "tune-choices-unknown-technique",
        GOOD_TOY + "[combinations]\nfp32 = []\nc = ['torch-compile']\n[tune.torch-compiel]\nmode = ['default']\n",
        r"tune\.torch-compiel: unknown technique 'torch-compiel'; "
        r"did you mean 'torch-compile'\? \(see `ampsuite list`\)",
    ),
    (
        "tune-choices-unused-technique",
        GOOD_TOY + "[combinations]\nfp32 = []\n[tune.torch-compile]\nmode = ['default']\n",
        r"tune\.torch-compile: choices given for a technique no combination uses",
    ),
    (
        "tune-choices-unknown-option",
        GOOD_TOY + "[combinations]\nfp32 = []\nc = ['torch-compile']\n[tune.torch-compile]\nmdoe = ['default']\n",
        r"tune\.torch-compile\.mdoe: unknown option; did you mean 'mode'\?",
    ),
    (
        "tune-choices-bad-value",
        GOOD_TOY
        + "[combinations]\nfp32 = []\nc = ['torch-compile']\n[tune.torch-compile]\nmode = ['default', 'turbo']\n",
        r"tune\.torch-compile\.mode\[1\]: expected one of 'default', .*, got 'turbo'",
    ),
    (
        "inductor-setting-unknown",
        GOOD_TOY + INDUCTOR + "tile_reductionz = true\n",
        r"techniques\.torch-compile\.inductor\.tile_reductionz: not a torch\._inductor\.config setting of torch "
        r"\S+; did you mean 'triton\.tile_reductions'\?",
    ),
    (
        "inductor-setting-unknown-dotted",
        GOOD_TOY + INDUCTOR + "triton.tile_reductionz = true\n",
        r"techniques\.torch-compile\.inductor\.\"triton\.tile_reductionz\": not a torch\._inductor\.config setting "
        r"of torch \S+; did you mean 'triton\.tile_reductions'\?",
    ),
    (
        "inductor-setting-wrong-type",
        GOOD_TOY + INDUCTOR + "coordinate_descent_tuning = 'yes'\n",
        r"techniques\.torch-compile\.inductor\.coordinate_descent_tuning: expected true or false, got 'yes'",
    ),
    (
        "inductor-not-a-table",
        GOOD_TOY + "[combinations]\nfp32 = []\nc = ['torch-compile']\n[techniques.torch-compile]\ninductor = true\n",
        r"techniques\.torch-compile\.inductor: expected a table \(KEY = value\), got True",
    ),
    (
        "inductor-setting-unknown-in-a-combination",
        GOOD_TOY
        + "[combinations]\nfp32 = []\nc = ['torch-compile']\n"
        + "[combination_options.c.torch-compile.inductor]\ncombo_kernel = true\n",
        r"combination_options\.c\.torch-compile\.inductor\.combo_kernel: not a torch\._inductor\.config setting "
        r"of torch \S+; did you mean 'combo_kernels'\?",
    ),
    (
        "inductor-with-another-backend",
        GOOD_TOY + INDUCTOR + "combo_kernels = true\n[techniques.torch-compile]\nbackend = 'aot_eager'\n",
        r"techniques\.torch-compile: inductor settings \(combo_kernels\) apply to the inductor backend only, "
        r"got backend 'aot_eager'",
    ),
]


def _full(path: Path, pattern: str) -> str:
    return re.escape(str(path)) + ": " + pattern


@pytest.mark.parametrize(("text", "pattern"), [c[1:] for c in STRUCTURE_ERRORS], ids=[c[0] for c in STRUCTURE_ERRORS])
def test_bad_structure_is_refused_by_load(write_suite, text: str, pattern: str) -> None:
    path = write_suite(text, "bad.toml")
    with pytest.raises(SuiteFileError) as info:
        suitefile.load(path)
    assert re.fullmatch(_full(path, pattern), str(info.value)), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "pattern"), [c[1:] for c in PLUGIN_ERRORS], ids=[c[0] for c in PLUGIN_ERRORS])
def test_bad_plugin_reference_is_refused_by_expand(write_suite, registry, text: str, pattern: str) -> None:
    path = write_suite(text, "bad.toml")
    spec = suitefile.load(path)  # structurally fine
    with pytest.raises(SuiteFileError) as info:
        matrix.expand(spec, registry, "cpu")
    assert re.fullmatch(_full(path, pattern), str(info.value)), str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    with pytest.raises(SuiteFileError, match=re.escape(f"{path}: no such file")):
        suitefile.load(path)


def test_misspelled_workloads_table_gets_did_you_mean(write_suite) -> None:
    path = write_suite("[workload.toy]\nbatch_size = 8\n", "bad.toml")
    with pytest.raises(SuiteFileError) as info:
        suitefile.load(path)
    assert str(info.value) == f"{path}: workload: unknown key; did you mean 'workloads'?"


def test_rule_naming_an_unknown_combination_is_refused(write_suite, registry) -> None:
    path = write_suite(GOOD_TOY + "[combinations]\nfp32 = []\nnoop = ['noop']\n[[exclude]]\ncombination = 'nop'\n")
    spec = suitefile.load(path)
    with pytest.raises(SuiteFileError, match=re.escape(f"{path}: exclude[0].combination: ") + ".*did you mean 'noop'"):
        matrix.expand(spec, registry, "cpu")


def test_good_file_gives_the_values_it_declares(write_suite) -> None:
    """The counterpart of the bad files: every key lands where it should, defaults fill the rest."""
    path = write_suite(
        """
        [suite]
        name = "named"
        device = "cpu"
        timeout = 30
        baseline = "noop"
        memory_limit_gb = 4

        [measure]
        min_steps = 4
        max_steps = 9
        processes = 3

        [workloads.small]
        plugin = "toy"
        batch_size = [8, 16]
        hidden = [16, 32]

        [combinations]
        fp32 = []
        noop = ["noop"]

        [[exclude]]
        batch_size = 16
        options = { hidden = 32 }
        """
    )
    spec = suitefile.load(path)
    assert (spec.name, spec.device, spec.timeout, spec.baseline, spec.memory_limit_gb) == (
        "named",
        "cpu",
        30.0,
        "noop",
        4.0,
    )
    assert (spec.measure.min_steps, spec.measure.max_steps) == (4, 9)
    assert spec.measure.warmup_steps == suitespec.MeasureSpec.warmup_steps
    assert spec.measure.processes == 3
    assert suitefile.loads(GOOD_TOY).measure.processes == suitespec.MeasureSpec.processes == 1
    assert spec.workloads == (suitespec.WorkloadEntry("small", "toy", (8, 16), {"hidden": [16, 32]}),)
    assert dict(spec.combinations) == {"fp32": (), "noop": ("noop",)}
    assert spec.exclude == (suitespec.Rule(batch_size=16, options={"hidden": 32}),)


def test_cli_reports_a_bad_suite_in_one_line_and_exits_4(write_suite) -> None:
    path = write_suite("[workloads.toy]\nbatch_size = 0\n", "bad.toml")
    proc = subprocess.run(
        [sys.executable, "-m", "ampsuite", "run", str(path), "--no-report"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == ExitCode.USAGE_ERROR == 4
    lines = proc.stderr.splitlines()
    assert lines == [
        f"ampsuite: error: {path}: workloads.toy.batch_size: expected an integer > 0 or a list of them, got 0"
    ], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_cli_reports_an_unknown_plugin_in_one_line_and_exits_4(write_suite) -> None:
    path = write_suite("[workloads.toy]\nbatch_size = 8\nhiden = 3\n", "bad.toml")
    proc = subprocess.run(
        [sys.executable, "-m", "ampsuite", "run", str(path), "--no-report"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4
    assert proc.stderr.splitlines() == [
        f"ampsuite: error: {path}: workloads.toy.hiden: unknown option; did you mean 'hidden'?"
    ], proc.stderr


def test_base_techniques_start_every_combination_and_minus_removes_one() -> None:
    spec = suitefile.loads(
        textwrap.dedent("""\
        [suite]
        base_techniques = ["cudnn-benchmark"]
        [workloads.toy]
        batch_size = 4
        [combinations]
        fp32 = []
        plain = ["-cudnn-benchmark"]
        bf16 = ["amp-bf16", "cudnn-benchmark"]
        """),
        "b.toml",
    )
    assert spec.combinations == {
        "fp32": ("cudnn-benchmark",),
        "plain": (),
        "bf16": ("amp-bf16", "cudnn-benchmark"),
    }
    assert spec.base_techniques == ("cudnn-benchmark",)


@pytest.mark.parametrize(
    ("suite_table", "combination", "pattern"),
    [
        ('base_techniques = "tf32"', "[]", r"b\.toml: suite\.base_techniques: expected a list"),
        ('base_techniques = ["tf32", "tf32"]', "[]", r"suite\.base_techniques: expected a list of distinct"),
        ('base_techniques = ["tf32"]', '["-channels-last"]', r"combinations\.c: '-channels-last' removes a technique"),
    ],
)
def test_bad_base_techniques_are_refused(suite_table: str, combination: str, pattern: str) -> None:
    text = f"[suite]\n{suite_table}\n[workloads.toy]\nbatch_size = 4\n[combinations]\nc = {combination}\n"
    with pytest.raises(SuiteFileError, match=pattern):
        suitefile.loads(text, "b.toml")


def test_the_default_cuda_suite_gives_each_model_its_own_tuned_row(registry) -> None:
    """The rows that follow `ampsuite tune` on an H200: one per model workload, with what tune chose for it."""
    spec = suitefile.load(suitefile.default_suite_path("cuda"))
    tuned: dict[str, set[tuple[str, ...]]] = {}
    for cell in matrix.expand(spec, registry, "cuda"):
        if cell.combination.startswith("tuned"):
            tuned.setdefault(cell.id.split("/")[0], set()).add(cell.technique_names)
            if cell.workload_id == "resnet50":  # its recipe's compile options, as tune measured it
                assert dict(cell.techniques)["torch-compile"]["mode"] == "reduce-overhead"
    assert tuned == {
        "resnet50": {("cudnn-benchmark", "channels-last", "amp-fp16", "fused-optimizer", "torch-compile")},
        "bert-base": {("cudnn-benchmark", "amp-bf16", "fused-optimizer", "torch-compile")},
        "vit-b16": {("cudnn-benchmark", "patch-gemm", "amp-bf16", "fused-optimizer", "torch-compile")},
        "llm-125m": {("cudnn-benchmark", "amp-bf16", "fused-optimizer", "torch-compile")},
    }


def test_the_default_cuda_suite_measures_every_lever_at_the_large_batch_and_no_host_bound_eager_cell(registry) -> None:
    """The main job's matrix: FP32 and TF32 baselines, both AMP dtypes, loss scaling and FP32 islands for every
    model at its training batch; pinned against pageable loading, channels-last and CUDA graphs where they teach
    (ResNet-50); checkpointing and the compiled recipe for the decoder; at batch 32 only FP32 and the CUDA-graph
    cell (an eager AMP cell there is host-bound, and its noise says so)."""
    spec = suitefile.load(suitefile.default_suite_path("cuda"))
    cells = [c for c in matrix.expand(spec, registry, "cuda") if c.skip_reason is None]

    def techniques(workload: str, batch: int) -> set[str]:
        return {t for c in cells if c.workload_id == workload and c.batch_size == batch for t in c.technique_names}

    for workload, batch in {"resnet50": 256, "bert-base": 128, "vit-b16": 256}.items():
        assert {"tf32", "amp-fp16", "amp-bf16", "fp32-islands", "torch-compile", "fused-optimizer"} <= techniques(
            workload, batch
        )
    assert {"pinned-loading", "pageable-loading", "channels-last", "cuda-graphs"} <= techniques("resnet50", 256)
    assert {"tf32", "amp-bf16", "activation-checkpointing", "torch-compile"} <= techniques("llm-125m", 8)
    small = {c.combination for c in cells if c.batch_size == 32}
    assert small == {"fp32", "bf16-cl-fused-graphs"}
    assert len(cells) <= 40


def test_cpu_workers_run_one_thread_unless_the_suite_says_otherwise() -> None:
    # A small CPU cell spread over every core measures the scheduler (noise of 60-140% on two cores).
    assert suitefile.loads(GOOD_TOY, "s.toml").cpu_threads == 1
    assert suitefile.loads("[suite]\ncpu_threads = 0\n" + GOOD_TOY, "s.toml").cpu_threads == 0


def test_workload_names_the_workload_and_plugin_is_its_older_spelling() -> None:
    table = "[workloads.small]\n{} = 'toy'\nbatch_size = 8\nhidden = 16\n"
    new, old = (suitefile.loads(table.format(key)).workloads for key in ("workload", "plugin"))
    assert new == old == (suitespec.WorkloadEntry("small", "toy", (8,), {"hidden": 16}),)
    assert (new[0].key, old[0].key) == ("workload", "plugin")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_default_suites_name_workloads_as_ampsuite_list_does(device: str, capsys) -> None:
    """A newcomer reads the default suites beside `ampsuite list`: the suites' key and the listing's word agree."""
    import tomllib

    from ampsuite.cli import main

    tables = tomllib.loads(suitefile.default_suite_path(device).read_text(encoding="utf-8"))["workloads"]
    assert all("plugin" not in t for t in tables.values())
    assert main(["list"]) == 0
    listed = set(re.findall(r"^workload (\S+) ", capsys.readouterr().out, flags=re.MULTILINE))
    assert {t["workload"] for t in tables.values()} <= listed
