"""``ampsuite run SUITE --dry-run --as-device cuda[:N]``: a GPU suite's matrix on any machine, GPU skip rules and
all, said to be a preview; the machine's own devices are never asked, and checks are told it is a preview."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from conftest import toy_suite

from ampsuite import CheckContext, Technique, hookimpl
from ampsuite.cli import main
from ampsuite.contract.errors import ExitCode, PluginError
from ampsuite.host import environment, session

GPU_SUITE = toy_suite(
    "gpu-preview",
    device="cuda",
    toy={"batch_size": 8, "gpus": [1, 2]},
    combinations={"fp32": [], "graphs": ["amp-bf16", "cuda-graphs"], "pinned": ["amp-bf16", "pinned-loading"]},
    measure=None,
)
"""A CUDA suite whose matrix depends on the GPUs: a two-GPU layout, CUDA graphs and pinned loading."""
PREVIEW = "preview (--as-device): the cells as on a machine with {}, not this machine's"


@pytest.fixture
def cpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has no GPU, and a preview must not even ask how many it has."""

    def asked() -> int:
        raise AssertionError("a preview asked this machine for its GPUs")

    monkeypatch.setattr(environment, "detect_device", lambda: "cpu")
    monkeypatch.setattr(environment, "gpu_count", asked)
    monkeypatch.setenv("COLUMNS", "400")  # one line per cell, the longest reason included


def _lines(write_suite: Any, capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    path = write_suite(GPU_SUITE)
    assert main(["run", str(path), "--dry-run", *argv]) == ExitCode.OK
    return capsys.readouterr().out.splitlines()


def test_a_gpu_suite_is_refused_without_a_gpu_and_its_message_names_the_preview(
    write_suite: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(environment, "detect_device", lambda: "cpu")
    assert main(["run", str(write_suite(GPU_SUITE)), "--dry-run"]) == ExitCode.USAGE_ERROR
    assert "--dry-run --as-device cuda:N previews its cells" in capsys.readouterr().err


def test_as_device_cuda_n_expands_with_the_gpu_skip_rules_and_says_it_is_a_preview(
    cpu_machine: None, write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines(write_suite, capsys, "--as-device", "cuda:2")
    assert lines[0] == PREVIEW.format("2 CUDA GPUs")
    assert lines[-1].startswith("preview only: nothing ran;")
    cells = dict(line.split("  ", 1) for line in lines if line.endswith("  run") or "  SKIP (" in line)
    assert cells["toy/fp32/bs8"] == cells["toy/graphs/bs8"] == cells["toy/pinned/bs8"] == "run"  # CUDA-only ones
    assert cells["toy/fp32/x2/bs8"] == "run"
    assert cells["toy/graphs/x2/bs8"].startswith("SKIP (cuda-graphs is not supported with gpus > 1")
    assert "6 cells: 5 to run, 1 skipped" in lines


def test_as_device_cuda_is_one_gpu(cpu_machine: None, write_suite: Any, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _lines(write_suite, capsys, "--as-device", "cuda")
    assert lines[0] == PREVIEW.format("1 CUDA GPU")
    assert "toy/fp32/x2/bs8  SKIP (needs 2 GPUs (gpus = 2); this machine has 1)" in lines
    assert "toy/graphs/bs8  run" in lines


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--as-device", "cuda:2"], "--as-device previews the cells of another device; use it with --dry-run"),
        (["--dry-run", "--as-device", "cuda:2", "--device", "cpu"], "give --device (run here) or --as-device"),
        (["--dry-run", "--as-device", "gpu:2"], "--as-device: expected cpu, cuda or cuda:N (N from 1 to 1,024)"),
        (["--dry-run", "--as-device", "cuda:0"], "got 'cuda:0'"),
    ],
)
def test_as_device_usage_errors(
    write_suite: Any, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["run", str(write_suite(GPU_SUITE)), *argv]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1


def _checked_technique(check: Any) -> SimpleNamespace:
    technique = Technique(
        name="sm90-only", summary="a technique for one GPU generation", apply=lambda s, o: s, check=check
    )
    return SimpleNamespace(ampsuite_techniques=hookimpl(lambda: [technique]))


SUITE_OF_ONE = toy_suite(None, device="cuda", toy={"batch_size": 8}, combinations={"sm90": ["sm90-only"]}, measure=None)


def test_a_check_is_told_it_is_a_preview(cpu_machine: None, write_suite: Any) -> None:
    seen: list[CheckContext] = []

    def check(ctx: CheckContext) -> str | None:
        seen.append(ctx)
        return None if ctx.preview else "not a preview"

    plugin = _checked_technique(check)
    plan = session.plan(write_suite(SUITE_OF_ONE), objects=[("sm90", plugin)], preview=("cuda", 1))
    assert [c.skip_reason for c in plan.cells] == [None] and plan.preview == ("cuda", 1)
    assert [(c.device_type, c.preview) for c in seen] == [("cuda", True)]


def test_a_check_that_probes_the_device_in_a_preview_is_a_one_line_plugin_error(
    cpu_machine: None, write_suite: Any
) -> None:
    def check(ctx: CheckContext) -> str | None:
        raise RuntimeError("Found no NVIDIA driver on your system")

    with pytest.raises(PluginError) as info:
        session.plan(write_suite(SUITE_OF_ONE), objects=[("sm90", _checked_technique(check))], preview=("cuda", 1))
    message = str(info.value)
    assert message.startswith(
        "plugin 'sm90': technique 'sm90-only': check raised RuntimeError: Found no NVIDIA driver on your system "
        "in a preview of cuda (--as-device)"
    )
    assert "CheckContext.preview" in message and "\n" not in message


def test_the_default_cuda_suite_previews_without_a_suite_argument(
    cpu_machine: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", "--as-device", "cuda:1"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "34 cells: 34 to run, 0 skipped" in out.splitlines()  # the suite of the published H200 figures
