"""The results file: versioned strict JSON, written atomically after every cell.

Version history:
    1 -- first format (ampsuite 0.1).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from suite.contract.errors import ResultsFileError
from suite.results.atomic import write_json_atomic

__all__ = [
    "FORMAT",
    "STATUSES",
    "TERMINAL",
    "VERSION",
    "ResultsWriter",
    "check_comparable",
    "checksum",
    "load",
    "sanitize",
]

FORMAT = "ampsuite-results"
VERSION = 1
STATUSES = ("passed", "skipped", "failed", "oom", "timeout", "crashed", "interrupted")
TERMINAL = frozenset(STATUSES) - {"interrupted"}
"""Statuses that ``--resume`` keeps; interrupted cells run again."""
COMPARABLE_KEYS = ("torch", "torch_cuda", "gpu_name")


def sanitize(value: Any) -> Any:
    """Replace NaN and infinities by None so the file stays strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    return value


def checksum(doc: dict[str, Any]) -> str:
    """SHA-256 over the canonical JSON of everything but the checksum itself."""
    body = {k: v for k, v in doc.items() if k != "integrity"}
    canonical = json.dumps(sanitize(body), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    clean = sanitize(doc)
    clean["integrity"] = {"sha256": checksum(clean)}
    write_json_atomic(path, clean, indent=1)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def load(path: str | Path) -> dict[str, Any]:
    """Read and check a results file.

    :raises ResultsFileError: missing, not JSON (truncated), NaN literals,
        not an ampsuite results file, unknown version, or malformed records.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsFileError(str(path), "no such results file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(str(path), f"cannot read: {exc}") from exc
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ResultsFileError(str(path), f"corrupt results file (not strict JSON: {exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultsFileError(str(path), f'not an ampsuite results file (no "format": "{FORMAT}")')
    if doc.get("version") != VERSION:
        raise ResultsFileError(
            str(path), f"results format version {doc.get('version')!r} is not supported; this ampsuite reads {VERSION}"
        )
    for key in ("run", "environment", "cells"):
        if key not in doc:
            raise ResultsFileError(str(path), f"corrupt results file: missing {key!r}")
    integrity = doc.get("integrity")
    if not isinstance(integrity, dict) or set(integrity) != {"sha256"} or integrity["sha256"] != checksum(doc):
        raise ResultsFileError(
            str(path), "content does not match its checksum (edited or damaged after it was written); refusing it"
        )
    if not isinstance(doc["cells"], list):
        raise ResultsFileError(str(path), "corrupt results file: 'cells' is not a list")
    seen: set[str] = set()
    for i, rec in enumerate(doc["cells"]):
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or rec.get("status") not in STATUSES:
            raise ResultsFileError(str(path), f"corrupt results file: cells[{i}] is not a valid record")
        if rec["id"] in seen:
            raise ResultsFileError(str(path), f"corrupt results file: cell {rec['id']!r} recorded twice")
        seen.add(rec["id"])
    return doc


def _key(env: dict[str, Any]) -> dict[str, Any]:
    gpu = env.get("gpu") or {}
    return {"torch": env.get("torch"), "torch_cuda": env.get("torch_cuda"), "gpu_name": gpu.get("name")}


def check_comparable(path: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse to merge results measured on different software or hardware."""
    a, b = _key(old), _key(new)
    diffs = [f"{k} {a[k]!r} vs {b[k]!r}" for k in COMPARABLE_KEYS if a[k] != b[k]]
    if diffs:
        raise ResultsFileError(path, "measured in another environment, refusing to merge: " + "; ".join(diffs))


class ResultsWriter:
    """Holds one run's document and rewrites it atomically after each record."""

    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path = path
        self.doc = doc
        self._index = {rec["id"]: i for i, rec in enumerate(doc["cells"])}
        self.flush()

    def has(self, cell_id: str) -> bool:
        return cell_id in self._index

    def add(self, record: dict[str, Any]) -> None:
        if record["id"] in self._index:
            self.doc["cells"][self._index[record["id"]]] = record
        else:
            self._index[record["id"]] = len(self.doc["cells"])
            self.doc["cells"].append(record)
        self.flush()

    def order(self, ids: Iterable[str]) -> None:
        """Put records in matrix order (resumed runs append out of order)."""
        rank = {cid: i for i, cid in enumerate(ids)}
        self.doc["cells"].sort(key=lambda r: rank.get(r["id"], len(rank)))
        self._index = {rec["id"]: i for i, rec in enumerate(self.doc["cells"])}

    def flush(self) -> None:
        self.doc.pop("integrity", None)
        _write_atomic(self.path, self.doc)
