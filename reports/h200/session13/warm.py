"""Fill inductor's cache before a measurement call: the first step of every named cell compiled at once,
one `ampsuite run` process each (session 13, issue 15).

A compiled ResNet-50 cell spends 107-190 s of its first step in torch.compile on an H200, most of it
single-threaded Python, while 15 cores and the GPU wait. Session 12's plain loops compiled six
variants at once in 184 s, about what one takes alone. This script does the same for ampsuite cells:
each item becomes a one-combination copy of its suite with a minimal [measure] (the compiled graph
depends on the model, the batch, the dtype, the layout and the compile options, not on how many steps
are timed), run with `ampsuite run` in its own process. The cells measured afterwards, by `ampsuite
tune` or `ampsuite run`, find their graphs in TORCHINDUCTOR_CACHE_DIR and compile in seconds.
Nothing here is a measurement: the warm results files are thrown away.

    python3 warm.py --deadline EPOCH --out DIR SUITE:NAME[=TECHNIQUE+TECHNIQUE...] ...

NAME alone is a combination of SUITE (its [combination_options] kept); NAME=... a new one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from suite.spec.tomltext import toml_lines

MEASURE = {"warmup_steps": 0, "min_steps": 3, "max_steps": 3, "max_seconds": 0.1, "numerics_steps": 1}


def warm_suite(path: str, name: str, techniques: list[str] | None) -> dict:
    data = tomllib.loads(Path(path).read_text())
    combinations = data["combinations"]
    combo = techniques if techniques is not None else combinations[name]
    baseline = data["suite"].get("baseline", "fp32")
    data["suite"]["name"] = f"warm-{name}"
    data["measure"] = {**data.get("measure", {}), **MEASURE}
    data["combinations"] = {baseline: combinations.get(baseline, []), name: combo}
    options = {k: v for k, v in data.get("combination_options", {}).items() if k == name and techniques is None}
    data.pop("combination_options", None)
    if options:
        data["combination_options"] = options
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deadline", type=float, required=True, help="epoch seconds by which every warm must end")
    ap.add_argument("--out", default="/tmp/warm")
    ap.add_argument("items", nargs="+", metavar="SUITE:NAME[=T+T...]")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    procs: dict[str, tuple[str, subprocess.Popen]] = {}
    for item in args.items:
        path, _, combo = item.partition(":")
        name, eq, techniques = combo.partition("=")
        data = warm_suite(path, name, techniques.split("+") if eq else None)
        key = f"{Path(path).stem}-{name}"  # two suites may both name a combination "tuned"
        toml = out / f"{key}.toml"
        toml.write_text("\n".join(toml_lines(data)) + "\n")
        log = open(out / f"{key}.log", "w")  # noqa: SIM115 - closed with the process
        cmd = [sys.executable, "-m", "suite", "run", str(toml), "-k", f"/{name}/", "--no-report", "--no-peaks"]
        proc = subprocess.Popen([*cmd, "-o", str(out / f"{key}.json")], stdout=log, stderr=subprocess.STDOUT)
        procs[key] = (name, proc)
    start = time.time()
    ended: dict[str, float] = {}
    while len(ended) < len(procs) and time.time() < args.deadline:
        for key, (_, p) in procs.items():
            if key not in ended and p.poll() is not None:
                ended[key] = time.time() - start
        time.sleep(1)
    for key, (name, p) in procs.items():
        if p.poll() is None:
            p.terminate()
        first = None
        try:
            cells = json.loads((out / f"{key}.json").read_text())["cells"]
            first = [c["metrics"].get("first_step_seconds") for c in cells if f"/{name}/" in c["id"]]
        except (OSError, ValueError, KeyError):
            pass
        seconds = round(ended.get(key, time.time() - start), 1)
        print(json.dumps({"warm": key, "rc": p.wait(), "seconds": seconds, "first_step": first}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
