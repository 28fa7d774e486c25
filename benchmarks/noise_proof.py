"""Proof that asv tells noise from a slowdown: ``python benchmarks/noise_proof.py`` (from the repository root).

In a temporary git repository (a copy of this working tree, uncommitted
changes included) it makes three commits with no code change and a fourth
whose only change makes the toy workload about 2x slower (its model runs
forward, hence backward, twice; the loss is unchanged). It measures all four
with ``asv run`` (the offline ``ampsuite-venv`` environment, the suite of
``--suite``, ``--rounds`` runs of it per commit) and prints what
``asv compare`` (default ``--factor`` 1.1) flags between them:

- between the three unchanged commits: nothing, else exit code 1;
- from the third to the fourth: exactly the toy workload's timing cells that
  ran, as slower, else exit code 1.

``--rounds 1`` gives the pre-``AMPSUITE_ASV_ROUNDS`` behaviour (one bare value
per cell, compared by ratio only). Takes about ``4 x rounds`` runs of the suite
(about 20 minutes with the default CPU suite on a loaded 2-core machine). Figures: ``benchmarks/README.md``.

Not a benchmark: asv imports this module while discovering benchmarks and finds
none in it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOY = Path("plugins/workloads/_toy.py")
MODEL = "model = nn.Sequential(*body, nn.Linear(widths[-1], options.classes)).to(ctx.device)"
TWICE = '''model = _Twice(nn.Sequential(*body, nn.Linear(widths[-1], options.classes))).to(ctx.device)


class _Twice(nn.Module):
    """The same network run twice per step: forward and backward cost double, the loss does not change."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.inner(x) + self.inner(x)) / 2
'''
TIMING = "cells.track_seconds_per_sample"
ROW = re.compile(r"^\|\s*([+\-!*x ]?)\s*\|.*\|\s*(cells\.\S.*?)\s*\|\s*$")


def twice_as_slow(text: str) -> str:
    """The toy workload's source with its network run twice a step (the class it names at the module's end)."""
    if MODEL not in text:
        raise SystemExit(f"{TOY}: the line to patch is gone: {MODEL}")
    line, cls = TWICE.split("\n\n\n", 1)
    return text.replace(MODEL, line) + "\n\n" + cls


def is_toy_timing(benchmark: str) -> bool:
    """Whether ``asv compare`` names a timing of the toy workload: ``cells.track_seconds_per_sample('toy/...')``."""
    return benchmark.startswith(f"{TIMING}('toy/") or benchmark.startswith(f"{TIMING}('toy[")


def git(root: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout.strip()


def make_repository(root: Path, env: dict[str, str]) -> list[str]:
    """Copy the working tree into ``root``; commit it, twice more unchanged, then the slower toy workload."""
    files = git(REPO, env, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file() and not name.startswith("reports/"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    git(root, env, "init", "-q", "-b", "main")
    commits = []
    for day, message in enumerate(("base", "no code change 1", "no code change 2", "toy workload 2x slower"), 1):
        if day == 4:
            toy = root / TOY
            toy.write_text(twice_as_slow(toy.read_text(encoding="utf-8")), encoding="utf-8")
        date = f"2024-01-{day:02d}T12:00:00+00:00"
        git(root, env, "add", "-A")
        git(
            root,
            {**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
        )
        commits.append(git(root, env, "rev-parse", "HEAD"))
    return commits


def asv(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "asv", *args], cwd=root, env=env, capture_output=True, text=True)


def flags(root: Path, env: dict[str, str], before: str, after: str) -> dict[str, str]:
    """``asv compare`` between two commits: benchmark (with parameters) -> "+" (worse) or "-" (better)."""
    done = asv(root, env, "compare", before, after)
    if done.returncode != 0:
        raise SystemExit(f"asv compare failed:\n{done.stdout}\n{done.stderr}")
    found = {}
    for line in done.stdout.splitlines():
        match = ROW.match(line.strip())
        if match and match.group(1) in ("+", "-"):
            found[match.group(2)] = match.group(1)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suite/defaults/cpu.toml", help="suite file, relative to the repository")
    parser.add_argument("--rounds", type=int, default=5, help="AMPSUITE_ASV_ROUNDS (default 5)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from ampsuite.asvtools.machine import write_machine_file

    work = args.keep or Path(tempfile.mkdtemp(prefix="ampsuite-asv-proof-"))
    root, home = work / "repo", work / "home"
    root.mkdir(parents=True)
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMPSUITE_ASV_", "GIT_", "ASV_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        HOME=str(home),
        AMPSUITE_ASV_SUITE=args.suite,
        AMPSUITE_ASV_ROUNDS=str(args.rounds),
        OMP_NUM_THREADS="1",
        GIT_AUTHOR_NAME="ampsuite proof",
        GIT_AUTHOR_EMAIL="proof@example.invalid",
        GIT_COMMITTER_NAME="ampsuite proof",
        GIT_COMMITTER_EMAIL="proof@example.invalid",
        GIT_CONFIG_NOSYSTEM="1",
    )
    commits = make_repository(root, env)
    write_machine_file(home / ".asv-machine.json")
    done = asv(root, env, "run", "--show-stderr", "ALL")
    if done.returncode not in (0, 2) or "setup_cache failed" in done.stdout + done.stderr:
        print(done.stdout[-6000:], done.stderr[-3000:])
        return 1

    names = ["base", "same-1", "same-2", "toy-2x"]
    ok = True
    for a, b in ((0, 1), (1, 2), (0, 2), (2, 3)):
        found = flags(root, env, commits[a], commits[b])
        print(f"asv compare {names[a]} {names[b]}: {len(found)} flagged")
        for name, mark in sorted(found.items()):
            print(f"    {mark} {name}")
        if b < 3:
            ok &= not found
        else:
            slower = {n for n, m in found.items() if m == "+" and is_toy_timing(n)}
            ok &= bool(slower) and set(found) == slower
    full = asv(root, env, "compare", commits[2], commits[3]).stdout
    print("\n".join(line for line in full.splitlines() if "Change" in line or (TIMING in line and "n/a" not in line)))
    print(f"rounds {args.rounds}, suite {args.suite}: {'PASS' if ok else 'FAIL'}; results in {work}")
    if args.keep is None and ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
