#!/usr/bin/env python3
"""Lab runs on a GPU machine: ampsuite commands in order, within a wall-clock budget, into one folder.

    python benchmarks/gpu/run.py --out DIR --budget SECONDS SPEC [SPEC ...]

Each SPEC is one shell word (quote it) naming an ampsuite command and its arguments:

    [name=NAME] [timeout=SECONDS] [gpu=IDS] [from=FILE] COMMAND [SUITE.toml] [ARGS...]

COMMAND is ``run``, ``tune``, ``selfcheck`` or ``max-batch``; ARGS are that command's own options, except the
outputs, which the driver sets: ``run`` writes DIR/NAME/results.json and its report into DIR/NAME/, ``tune`` its
results, recipe and pages into DIR/NAME/, ``selfcheck`` and ``max-batch`` DIR/NAME.json. An argument ``@NAME``
stands for the results file of the spec called NAME (``selfcheck --tuned @tune-resnet50``); such a spec waits
until NAME has finished. ``--resume`` is added to ``run`` and ``tune`` when their results file exists, ``from=``
seeds it from an earlier file, and ``tune`` gets a ``--budget`` that ends it before its command's time is up.

Every command gets a log (DIR/NAME.log) and a time limit: its ``timeout=``, cut to what the budget has left.
At the limit it is interrupted like Ctrl-C (SIGINT: ampsuite keeps every finished record and exits 2), and
killed ``--grace`` seconds later if it has not ended. A command is not started with less than
``--min-seconds`` left. DIR/driver.json records each spec's attempts, so the same command line run again
(the next call on the machine) skips what finished (exit 0 or 1) and resumes the rest. DIR/environment.json
gets one entry per call: nvidia-smi's summary when there is one, the Python, torch, CUDA and cuDNN versions
(from a subprocess; the driver imports neither torch nor ampsuite), the CPU count and the git commit.

The exit status is the worst (largest) of the specs' statuses: ampsuite's exit codes, 2 for a spec left
for a later call (interrupted, not started, waiting), 128 + N for a command ended by signal N; 4 for a bad
driver command line. benchmarks/gpu/README.md has the details and examples.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as _dt
import io
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMMANDS = ("run", "tune", "selfcheck", "max-batch")
OWNED = {  # the outputs the driver chooses: a spec may not set them
    "run": ("-o", "--output", "--report-dir"),
    "tune": ("--report-dir",),
    "selfcheck": ("-o", "--output"),
    "max-batch": ("-o", "--output"),
}
RESUMABLE = ("run", "tune")
KEYS = ("name", "timeout", "gpu", "from")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

OK, INTERRUPTED, USAGE = 0, 2, 4
DONE = (0, 1, 5)
"""Statuses of a finished command: OK, some cells failed (their records say why), no cells selected.
Running it again would measure nothing new, so a later call skips it."""

STATE = "driver.json"
ENVIRONMENT = "environment.json"
NVIDIA_SMI_TEXT = "nvidia-smi.txt"
GPU_FIELDS = (
    "index",
    "name",
    "driver_version",
    "memory.total",
    "power.limit",
    "clocks.max.sm",
    "clocks.sm",
    "temperature.gpu",
    "utilization.gpu",
)

TORCH_PROBE = r"""
import json, os, platform, sys
out = {"python": platform.python_version(), "executable": sys.executable}
try:
    from importlib.metadata import version
    out["ampsuite"] = version("ampsuite")
except Exception as exc:
    out["ampsuite"] = None
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    out["cuda_available"] = torch.cuda.is_available()
    out["torch_threads"] = torch.get_num_threads()
    out["devices"] = [
        {"name": p.name, "capability": f"{p.major}.{p.minor}", "memory_bytes": p.total_memory}
        for p in (torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count()))
    ]
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


class UsageError(Exception):
    """A bad driver command line or spec: one line, exit status 4."""


def now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def say(text: str) -> None:
    print(f"[gpu-run {_dt.datetime.now(_dt.UTC):%H:%M:%S}] {text}", flush=True)


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m`` or ``1h`` as seconds (ampsuite tune's --budget syntax)."""
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:].lower(), 0.0)
    try:
        value = float(text[:-1] if scale else text) * (scale or 1.0)
    except ValueError:
        raise UsageError(f"expected a duration like 90s, 15m or 1h, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"a duration must be > 0, got {text!r}")
    return value


# ---------------------------------------------------------------------------
# specs
# ---------------------------------------------------------------------------


@dataclass
class Spec:
    """One SPEC of the command line, parsed."""

    text: str
    command: str
    args: list[str]
    name: str
    timeout: float | None = None
    gpu: str | None = None
    seed: Path | None = None
    refs: list[str] = field(default_factory=list)

    def output(self, out: Path) -> Path:
        """The results file this spec writes."""
        return out / self.name / "results.json" if self.command in RESUMABLE else out / f"{self.name}.json"


def _option_name(arg: str) -> str:
    return arg.split("=", 1)[0] if arg.startswith("--") else arg


def _ref(arg: str) -> str | None:
    value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
    return value[1:] if value.startswith("@") and len(value) > 1 else None


def parse_spec(text: str) -> Spec:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"spec {text!r}: {exc}") from None
    keys: dict[str, str] = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0] in KEYS:
        key, value = words.pop(0).split("=", 1)
        keys[key] = value
    if not words or words[0] not in COMMANDS:
        raise UsageError(f"spec {text!r}: expected [KEY=VALUE ...] COMMAND ..., COMMAND one of {', '.join(COMMANDS)}")
    command, args = words[0], words[1:]
    for arg in args:
        if _option_name(arg) in OWNED[command]:
            raise UsageError(f"spec {text!r}: {_option_name(arg)} is the driver's (outputs go into --out)")
    suite = next((a for a in args if a.endswith(".toml") and not a.startswith("-")), None)
    refs = [r for r in (_ref(a) for a in args) if r]
    name = keys.get("name") or default_name(command, suite, args, refs)
    if not NAME.fullmatch(name):
        raise UsageError(f"spec {text!r}: name {name!r} is not a file name (letters, digits, '.', '_', '-')")
    timeout = duration(keys["timeout"]) if "timeout" in keys else None
    seed = Path(keys["from"]) if "from" in keys else None
    if seed is not None and command not in RESUMABLE:
        raise UsageError(f"spec {text!r}: from= seeds the results file of run or tune, not of {command}")
    return Spec(text, command, args, name, timeout, keys.get("gpu"), seed, refs)


def default_name(command: str, suite: str | None, args: list[str], refs: list[str]) -> str:
    stem = Path(suite).stem if suite else "default"
    if command == "run":
        return stem
    if command == "tune":
        return stem if stem.startswith("tune") else f"tune-{stem}"
    if command == "max-batch":
        return f"maxbatch-{stem}"
    # selfcheck: after what it checks
    if refs:
        return f"selfcheck-{refs[0]}"
    for option in ("--tuned", "--cells"):
        if option in args[:-1]:
            return f"selfcheck-{Path(args[args.index(option) + 1]).stem}"
    return "selfcheck"


def parse_specs(texts: list[str]) -> list[Spec]:
    specs = [parse_spec(t) for t in texts]
    seen: dict[str, Spec] = {}
    for spec in specs:
        if spec.name in seen:
            raise UsageError(f"two specs are called {spec.name!r}: give one of them name=OTHER")
        for ref in spec.refs:
            if ref not in seen:
                raise UsageError(f"spec {spec.text!r}: @{ref} names no earlier spec")
        seen[spec.name] = spec
    return specs


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------


def command_line(spec: Spec, out: Path, specs: dict[str, Spec], python: str, seconds: float) -> list[str]:
    """The ampsuite command of ``spec`` with its outputs under ``out``, ``seconds`` before it is interrupted."""
    args = []
    for arg in spec.args:
        ref = _ref(arg)
        if ref:
            path = str(specs[ref].output(out))
            arg = f"{arg.split('=', 1)[0]}={path}" if arg.startswith("--") and "=" in arg else path
        args.append(arg)
    result = spec.output(out)
    if spec.command == "run":
        args += ["-o", str(result), "--report-dir", str(result.parent)]
    elif spec.command == "tune":
        args += ["--report-dir", str(result.parent)]
        # tune stops by its own budget, summary written, before the driver would interrupt it
        allowed = max(1, int(seconds - max(10.0, 0.05 * seconds)))
        budget = [i for i, a in enumerate(args) if _option_name(a) == "--budget"]
        if not budget:
            args += ["--budget", f"{allowed}s"]
        for i in budget:
            given = args[i].split("=", 1)[1] if "=" in args[i] else (args[i + 1] if i + 1 < len(args) else "")
            if given and duration(given) > allowed:
                if "=" in args[i]:
                    args[i] = f"--budget={allowed}s"
                else:
                    args[i + 1] = f"{allowed}s"
    else:
        args += ["-o", str(result)]
    if spec.command in RESUMABLE and (result.exists() or spec.seed is not None) and "--resume" not in args:
        args.append("--resume")
    return [python, "-m", "ampsuite", spec.command, *args]


class Stop:
    """Set by SIGINT or SIGTERM to the driver: the running command is interrupted (once: a second SIGINT could
    cut short the records ampsuite writes after the first), and nothing else starts."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.requested:
            say(f"{signal.Signals(signum).name}: interrupting the running command, starting no other")
        self.requested = True


def _signal_group(child: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, sig)


def execute(
    argv: list[str], log: Path, seconds: float, grace: float, env: dict[str, str], stop: Stop
) -> tuple[int, bool, float]:
    """Run ``argv`` into ``log`` in a process group of its own; SIGINT after ``seconds``, SIGKILL ``grace`` later.

    Returns (exit status, whether the time limit interrupted it, seconds taken); a death by signal N is 128 + N.
    """
    start = time.monotonic()
    with log.open("ab") as sink:
        sink.write(f"== {now()} {shlex.join(argv)} (interrupted after {seconds:.0f} s)\n".encode())
        sink.flush()
        child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    timed_out, interrupted_at = False, None
    while True:
        try:
            rc = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            pass
        elapsed = time.monotonic() - start
        if interrupted_at is None and (elapsed >= seconds or stop.requested):
            timed_out = not stop.requested
            interrupted_at = elapsed
            _signal_group(child, signal.SIGINT)  # as Ctrl-C: ampsuite keeps what it finished and exits 2
        elif interrupted_at is not None and elapsed >= interrupted_at + grace:
            _signal_group(child, signal.SIGKILL)
            rc = child.wait()
            break
    taken = time.monotonic() - start
    status = 128 - rc if rc < 0 else rc
    with log.open("ab") as sink:
        why = " (time limit: interrupted)" if timed_out else (" (driver stopped)" if stop.requested else "")
        sink.write(f"== {now()} exit {status} after {taken:.1f} s{why}\n".encode())
    return status, timed_out, taken


# ---------------------------------------------------------------------------
# state and environment
# ---------------------------------------------------------------------------


def write_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_state(out: Path) -> dict[str, Any]:
    path = out / STATE
    if not path.exists():
        return {"format": "ampsuite-gpu-driver", "version": 1, "specs": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"{path}: not the driver's state ({exc}); remove it to start afresh") from None
    if not isinstance(doc, dict) or doc.get("format") != "ampsuite-gpu-driver":
        raise UsageError(f"{path}: not the driver's state; remove it to start afresh")
    return doc


def _capture(argv: list[str], seconds: float, env: dict[str, str] | None = None) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def nvidia_smi(out: Path) -> dict[str, Any] | None:
    """The GPUs as nvidia-smi lists them (None without nvidia-smi); its full ``-q`` text into nvidia-smi.txt."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = _capture(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"], 60)
    full = _capture(["nvidia-smi", "-q"], 60)
    if full is not None:
        (out / NVIDIA_SMI_TEXT).write_text(full, encoding="utf-8")
    rows = csv.reader(io.StringIO(query or ""))
    gpus = [dict(zip(GPU_FIELDS, (v.strip() for v in row), strict=False)) for row in rows]
    summary: dict[str, Any] = {"gpus": [g for g in gpus if g]}
    for line in (full or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Driver Version", "CUDA Version") and value.strip():
            summary[key.strip().lower().replace(" ", "_")] = value.strip()
    return summary


def environment(out: Path, python: str, env: dict[str, str]) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "time": now(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cwd": os.getcwd(),
        "driver_python": platform.python_version(),
        "nvidia_smi": nvidia_smi(out),
    }
    commit = _capture(["git", "rev-parse", "HEAD"], 30)
    if commit:
        dirty = _capture(["git", "status", "--porcelain", "--untracked-files=no"], 60)
        snapshot["git_commit"] = commit.strip() + ("+dirty" if dirty else "")
    probe = _capture([python, "-c", TORCH_PROBE], 300, env)
    try:
        snapshot["python"] = json.loads(probe) if probe else {"error": f"{python} -c ... failed or took over 300 s"}
    except ValueError:
        snapshot["python"] = {"error": probe[-500:] if probe else ""}
    return snapshot


def record_environment(out: Path, python: str, env: dict[str, str]) -> None:
    path = out / ENVIRONMENT
    doc: dict[str, Any] = {"format": "ampsuite-gpu-driver-environment", "snapshots": []}
    with contextlib.suppress(OSError, ValueError):
        old = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(old, dict) and isinstance(old.get("snapshots"), list):
            doc = old
    snap = environment(out, python, env)
    doc["snapshots"].append(snap)
    write_json(path, doc)
    py, smi = snap["python"], snap["nvidia_smi"] or {}
    gpus = ", ".join(sorted({g.get("name", "?") for g in smi.get("gpus", [])})) or "no nvidia-smi"
    say(
        f"environment: {gpus}; python {py.get('python')}, torch {py.get('torch')}, CUDA {py.get('cuda')}, "
        f"cuDNN {py.get('cudnn')}, {snap['cpu_count']} CPUs"
    )


def copy_out(out: Path, dest: Path | None) -> None:
    if dest is None:
        return
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(out, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*.tmp"))


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # ampsuite's usage status, not argparse's 2 (INTERRUPTED here)
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="benchmarks/gpu/run.py",
        description="Run ampsuite commands in order within a wall-clock budget, into one folder, resumably.",
        epilog="SPEC: '[name=NAME] [timeout=SECONDS] [gpu=IDS] [from=FILE] COMMAND [SUITE.toml] [ARGS...]', "
        "COMMAND one of run, tune, selfcheck, max-batch; @NAME stands for spec NAME's results file.",
    )
    p.add_argument("specs", nargs="+", metavar="SPEC")
    p.add_argument("--out", required=True, type=Path, help="the folder for results, logs and the environment")
    p.add_argument("--budget", required=True, type=duration, help="wall-clock seconds for this call (90, 15m, 1h)")
    p.add_argument("--grace", type=float, default=60.0, help="seconds from SIGINT to SIGKILL (default 60)")
    p.add_argument("--reserve", type=float, default=15.0, help="seconds kept at the budget's end (default 15)")
    p.add_argument("--min-seconds", type=float, default=60.0, help="do not start a command with less (default 60)")
    p.add_argument("--copy-to", type=Path, help="copy the folder here after every command (e.g. $OUT/lab)")
    p.add_argument("--inductor-cache", type=Path, help="TORCHINDUCTOR_CACHE_DIR for the commands")
    p.add_argument("--python", default=sys.executable, help="the Python with ampsuite (default this one)")
    p.add_argument("--again", action="append", default=[], metavar="NAME", help="run NAME again though finished")
    p.add_argument("--dry-run", action="store_true", help="print what would run; run and write nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return drive(args)
    except UsageError as exc:
        print(f"benchmarks/gpu/run.py: error: {exc}", file=sys.stderr)
        return USAGE


def drive(args: argparse.Namespace) -> int:
    start = time.monotonic()
    work_ends = start + args.budget - args.reserve
    for option in ("grace", "reserve", "min_seconds"):
        if not getattr(args, option) >= 0:
            raise UsageError(f"--{option.replace('_', '-')} must be >= 0")
    specs = parse_specs(args.specs)
    by_name = {s.name: s for s in specs}
    unknown = sorted(set(args.again) - set(by_name) - {"all"})
    if unknown:
        raise UsageError(f"--again {unknown[0]}: no spec of that name")
    out = args.out.resolve()
    for spec in specs:
        if spec.seed is not None and not spec.seed.is_file() and not spec.output(out).exists():
            raise UsageError(f"spec {spec.text!r}: from={spec.seed}: no such file")
    state = read_state(out)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.inductor_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(args.inductor_cache.resolve())
    if not args.dry_run:
        out.mkdir(parents=True, exist_ok=True)
        if args.inductor_cache:
            args.inductor_cache.mkdir(parents=True, exist_ok=True)
        record_environment(out, args.python, env)
    stop = Stop()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    statuses: dict[str, tuple[int, str]] = {}
    try:
        for spec in specs:
            statuses[spec.name] = one_spec(spec, args, out, state, by_name, env, stop, work_ends)
            if not args.dry_run:
                write_json(out / STATE, state)
                copy_out(out, args.copy_to)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    worst = max((s for s, _ in statuses.values()), default=OK)
    width = max(len(n) for n in statuses)
    for name, (status, what) in statuses.items():
        print(f"  {name:<{width}}  exit {status:<3}  {what}")
    say(f"exit {worst} (the worst of {len(statuses)}) after {time.monotonic() - start:.0f} s; outputs in {out}")
    return worst


def one_spec(
    spec: Spec,
    args: argparse.Namespace,
    out: Path,
    state: dict[str, Any],
    specs: dict[str, Spec],
    env: dict[str, str],
    stop: Stop,
    work_ends: float,
) -> tuple[int, str]:
    """Run one spec, or say why not; its (exit status, what happened)."""
    entry = state["specs"].setdefault(spec.name, {"spec": spec.text, "done": False, "attempts": []})
    if entry.get("spec") != spec.text:  # another command under the same name: what it did is not this one's
        entry.update(spec=spec.text, done=False)
    again = spec.name in args.again or "all" in args.again
    if entry["done"] and not again:
        return entry["attempts"][-1]["exit"], "finished in an earlier call (--again NAME runs it again)"
    waiting = [r for r in spec.refs if not state["specs"].get(r, {}).get("done")]
    if waiting and not args.dry_run:  # a dry run shows the command as it would run after them
        return INTERRUPTED, f"not started: waits for {', '.join(waiting)}"
    left = work_ends - time.monotonic() - args.grace
    seconds = min(spec.timeout or math.inf, left)
    if stop.requested or left < args.min_seconds:
        why = f"{max(left, 0):.0f} s left, --min-seconds {args.min_seconds:g}"
        if stop.requested:
            why = "the driver was stopped"
        return INTERRUPTED, f"not started: {why}"
    result = spec.output(out)
    argv = command_line(spec, out, specs, args.python, seconds)
    if args.dry_run:
        print(f"{spec.name}: {shlex.join(argv)}  (interrupted after {seconds:.0f} s)")
        return OK, "dry run"
    if spec.seed is not None and not result.exists():
        result.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec.seed, result)
    result.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(env, CUDA_VISIBLE_DEVICES=spec.gpu) if spec.gpu is not None else env
    say(f"start {spec.name}: {spec.command} (interrupted after {seconds:.0f} s; log {out / spec.name}.log)")
    started = now()
    status, timed_out, taken = execute(argv, out / f"{spec.name}.log", seconds, args.grace, child_env, stop)
    done = status in DONE and not timed_out and not stop.requested
    entry["done"] = done
    entry["attempts"].append(
        {
            "started": started,
            "seconds": round(taken, 1),
            "exit": status,
            "timed_out": timed_out,
            "command": argv,
            "results": str(result) if result.exists() else None,
        }
    )
    what = "finished" if done else ("interrupted at its time limit" if timed_out else "not finished")
    say(f"end {spec.name}: exit {status} after {taken:.0f} s, {what}")
    return status if done or status >= INTERRUPTED else INTERRUPTED, f"{what} ({taken:.0f} s)"


if __name__ == "__main__":
    sys.exit(main())
