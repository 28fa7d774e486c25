"""Files that records name beside their results file (a kernels probe's profiler trace), copied into the site.

A record names an artifact by a path relative to its results file's folder
(``artifacts/CELL/kernels-trace.json.gz``). The site gets a copy at the same
relative path (the second run's under ``run-2/``, and so on), so the report
links it whether it is opened where it was rendered or copied elsewhere. A
name that is not a plain relative path inside that folder is ignored: a
results file is input, and must not make the report read or write elsewhere.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["copy_artifacts", "trace_of"]


def trace_of(record: Mapping[str, Any]) -> str | None:
    """The relative path of the record's profiler trace (``diagnostics.kernels.trace``), if it names one."""
    kernels = (record.get("diagnostics") or {}).get("kernels")
    trace = kernels.get("trace") if isinstance(kernels, Mapping) else None
    return trace if isinstance(trace, str) and _contained(trace) else None


def _contained(rel: str) -> bool:
    path = PurePosixPath(rel)
    return bool(rel) and not path.is_absolute() and ".." not in path.parts and "\\" not in rel and ":" not in rel


def copy_artifacts(out: Path, items: Sequence[Mapping[str, Any]], files: Sequence[str | Path]) -> list[dict[str, str]]:
    """Per run: each cell id whose artifact is in the site -> its link relative to ``out``."""
    links: list[dict[str, str]] = []
    for i, doc in enumerate(items):
        prefix = "" if i == 0 else f"run-{i + 1}/"
        folder = Path(files[i]).parent if i < len(files) else None
        found: dict[str, str] = {}
        for record in doc.get("cells") or []:
            rel = trace_of(record)
            if rel is None or folder is None:
                continue
            source, target = folder / rel, out / (prefix + rel)
            if not source.is_file():
                continue
            if not (target.exists() and target.samefile(source)):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            found[str(record.get("id"))] = prefix + rel
        links.append(found)
    return links
