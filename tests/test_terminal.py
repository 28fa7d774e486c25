"""What reaches the terminal: a plugin's or a file's text is shown, never obeyed (no markup, no control sequence,
no second line in a one-line message), and ``ampsuite list`` names plugins as ``-p no:NAME`` takes them."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ampsuite import cli, results
from ampsuite.contract.errors import ExitCode
from ampsuite.summary import print_summary
from ampsuite.terminal import echo, plain

ROOT = Path(__file__).resolve().parent.parent

CLEAR = "\x1b[2J"
RESET = "\x1bc"
"""A terminal reset (RIS): an ESC sequence a record's name may hold ('[' may not be in one)."""
LINK = "\x1b]8;;javascript:alert(1)\x1b\\click\x1b]8;;\x1b\\"
HOSTILE = f"clears{CLEAR} the screen\nsecond line {LINK} \u202eright-to-left"

_PLUGIN = f"""
from dataclasses import dataclass, field

from ampsuite import Technique, hookimpl


@dataclass(frozen=True)
class Options:
    level: int = field(default=1, metadata={{"help": {HOSTILE!r}}})


def apply(step, options):
    return step


@hookimpl
def ampsuite_techniques():
    return [Technique(name="hostile{RESET}", summary={HOSTILE!r}, apply=apply, options=Options)]
"""


@pytest.fixture
def hostile_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed distribution ``hostile-dist`` whose entry points are named with rich markup: ``t-mark[/]``
    (an unbalanced closing tag) and ``t-[red]x[/red]``, the first registering a technique whose name, summary
    and option help hold ESC sequences, an OSC 8 link, a newline and a right-to-left override."""
    (tmp_path / "hostile_mod.py").write_text(_PLUGIN)
    (tmp_path / "hostile_empty.py").write_text("")
    info = tmp_path / "hostile_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ampsuite]\nt-mark[/] = hostile_mod\nt-[red]x[/red] = hostile_empty\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AMPSUITE_DISABLE_PLUGIN_AUTOLOAD", "0")
    monkeypatch.setenv("COLUMNS", "400")


def test_plain_writes_every_control_character_as_its_escape() -> None:
    assert plain(HOSTILE) == (
        "clears\\x1b[2J the screen\\nsecond line \\x1b]8;;javascript:alert(1)\\x1b\\click\\x1b]8;;\\x1b\\ "
        "\\u202eright-to-left"
    )
    assert plain("résumé [bold]x[/bold] :smile: 日本") == "résumé [bold]x[/bold] :smile: 日本"  # text, kept as it is
    assert plain("a\tb\x00c\x7fd\x85e") == "a\\tb\\x00c\\x7fd\\x85e"


def test_list_shows_markup_names_as_they_are_and_control_sequences_escaped(
    hostile_entry_points: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    rows = [line for line in out.splitlines() if "hostile-dist" in line]
    assert len(rows) == 2 and "t-mark[/]" in rows[1] and "t-[red]x[/red]" in rows[0], out
    (line,) = [line for line in out.splitlines() if line.startswith("technique hostile")]
    assert line.startswith("technique hostile\\x1bc (plugin t-mark[/]) [order 50]: clears\\x1b[2J the screen\\n")
    assert "\\x1b]8;;javascript:alert(1)" in line  # the link is text, not a link
    (option,) = [line for line in out.splitlines() if line.startswith("    level (int, default 1)")]
    assert option.endswith("\\u202eright-to-left")


def test_list_names_each_plugin_as_p_no_takes_it_with_its_distribution_beside(
    hostile_entry_points: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list"]) == ExitCode.OK
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "version" in line)
    assert "name (-p no:NAME)" in header and "distribution" in header
    cells = [c.strip() for c in next(line for line in out.splitlines() if "t-mark[/]" in line).split("│")]
    assert cells[1:5] == ["t-mark[/]", "hostile-dist", "1.0", "entry point"]
    assert cli.main(["-p", "no:t-mark[/]", "list"]) == ExitCode.OK  # the name in the first column blocks it
    assert "t-mark[/]" not in capsys.readouterr().out


def test_a_plugin_error_with_control_sequences_is_one_escaped_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "raising_mod.py").write_text(f"raise RuntimeError({HOSTILE!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["list", "-p", "raising_mod"]) == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b[2J" in err


def test_the_summary_of_a_results_file_shows_its_text_escaped(healthy_run: Any, tmp_path: Path) -> None:
    doc = results.load(healthy_run[0])
    doc["run"]["suite"]["name"] = f"suite{CLEAR}"
    failed = doc["cells"][1]
    failed.update(status="failed", evidence={"type": "RuntimeError", "message": HOSTILE})
    path = tmp_path / "r.json"
    results.ResultsWriter(path, json.loads(json.dumps(doc)))
    out = io.StringIO()
    print_summary(results.load(path), Console(file=out, width=300, color_system=None, force_terminal=False))
    text = out.getvalue()
    assert "\x1b" not in text and "suite\\x1b[2J" in text
    assert f"{failed['id']} failed: RuntimeError: clears\\x1b[2J the screen\\nsecond line" in text


def test_echo_to_a_pipe_whose_reader_has_gone_goes_on_quietly() -> None:
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as stream:
        echo("first line", file=stream)  # EPIPE: the stream now writes to /dev/null
        echo("second line", file=stream)
        assert os.path.samefile(f"/proc/self/fd/{stream.fileno()}", os.devnull)


@pytest.mark.parametrize("command", [["list"], ["show", "reports/example/results.json"]])
def test_a_command_whose_reader_goes_away_ends_as_it_would_have(command: list[str]) -> None:
    # `ampsuite show ... | head -1`: rich raises SystemExit(1), which the CLI would take for a plugin's sys.exit().
    child = subprocess.Popen(
        [sys.executable, "-m", "ampsuite", *command], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the interpreter has started: every write of the child meets a closed pipe
    stderr = child.stderr.read().decode()
    assert (child.wait(timeout=120), stderr) == (0, "")
