"""The results file: versioned strict JSON, written atomically after every cell.

Version history:
    1 -- first format (ampsuite 0.1).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ampsuite.contract import wire
from ampsuite.contract.errors import OutputError, ResultsFileError
from ampsuite.results.atomic import TooLarge, write_json_atomic

__all__ = [
    "FORMAT",
    "STATUSES",
    "TERMINAL",
    "VERSION",
    "ResultsWriter",
    "check_comparable",
    "checksum",
    "MAX_BYTES",
    "load",
    "sanitize",
]

FORMAT = "ampsuite-results"
VERSION = 1
STATUSES: tuple[wire.Status, ...] = wire.ORDER
TERMINAL = wire.TERMINAL
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
    write_json_atomic(path, clean, indent=1, max_bytes=MAX_BYTES)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


MAX_BYTES = 64 * 1024 * 1024
"""Largest results file read (64 MiB): a run of thousands of cells writes a few MiB, so a larger
file is no results file, and refusing it before reading keeps ``show`` and ``report`` fast and small."""


def load(path: str | Path) -> dict[str, Any]:
    """Read and check a results file against the whole documented schema (:class:`ampsuite.contract.wire.Document`).

    Every reader after this one may trust the types: numbers finite and within 64 bits,
    nesting within ``wire.MAX_DEPTH``, every required key present.

    :raises ResultsFileError: missing, larger than :data:`MAX_BYTES`, not JSON (truncated),
        NaN literals, too deep, not an ampsuite results file, unknown version, checksum
        mismatch, or a value of the wrong shape (the message names its JSON path).
    """
    p = Path(path)
    where = str(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise ResultsFileError(where, f"{size:,} bytes is larger than any results file ({MAX_BYTES:,} at most)")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsFileError(where, "no such results file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(where, f"cannot read: {exc}") from exc
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ResultsFileError(where, f"corrupt results file (nested deeper than {wire.MAX_DEPTH} levels)") from None
    except ValueError as exc:  # also a 5,000-digit integer (int max_str_digits)
        raise ResultsFileError(where, f"corrupt results file (not strict JSON: {str(exc)[:200]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultsFileError(where, f'not an ampsuite results file (no "format": "{FORMAT}")')
    if doc.get("version") != VERSION:
        version = repr(doc.get("version"))[:40]
        raise ResultsFileError(
            where, f"results format version {version} is not supported; this ampsuite reads {VERSION}"
        )
    for key in ("run", "environment", "cells"):
        if key not in doc:
            raise ResultsFileError(where, f"corrupt results file: missing {key!r}")
    try:
        # Depth and number ranges first: the checksum walks the whole document.
        problem = wire.json_problem(doc)
        if problem:
            raise ResultsFileError(where, f"corrupt results file: {problem}")
        integrity = doc.get("integrity")
        if not isinstance(integrity, dict) or set(integrity) != {"sha256"} or integrity["sha256"] != checksum(doc):
            raise ResultsFileError(
                where, "content does not match its checksum (edited or damaged after it was written); refusing it"
            )
        wire.check(doc, wire.Document)
        for i, rec in enumerate(doc["cells"]):
            problem = wire.record_problem(rec, f"cells[{i}]")
            if problem:
                raise ResultsFileError(where, f"corrupt results file: {problem}")
    except wire.WireError as exc:
        raise ResultsFileError(where, f"corrupt results file: {exc}") from None
    seen: set[str] = set()
    for rec in doc["cells"]:
        if rec["id"] in seen:
            raise ResultsFileError(where, f"corrupt results file: cell {rec['id'][:200]!r} recorded twice")
        seen.add(rec["id"])
    return typing.cast(dict[str, Any], doc)


def _key(env: dict[str, Any]) -> dict[str, Any]:
    gpu = env.get("gpu")
    name = gpu.get("name") if isinstance(gpu, dict) else gpu  # environment is free-form JSON: trust no shape
    return {"torch": env.get("torch"), "torch_cuda": env.get("torch_cuda"), "gpu_name": name}


def _short(value: Any) -> str:
    return repr(value) if not isinstance(value, str) or len(value) <= 60 else repr(value[:60] + "...")


def check_comparable(
    path: str,
    old: dict[str, Any],
    new: dict[str, Any],
    action: str = "merge",
    other: str | None = None,
    instead: str | None = None,
) -> None:
    """Refuse to merge (or ``action``) results measured on different software or hardware.

    ``old`` is the ``environment`` of the file at ``path``, ``new`` the one it would be merged with (this machine's,
    or the file ``other``); each difference reads ``path``'s value first. ``instead`` ends the message: what to
    do with two such files.
    """
    a, b = _key(old), _key(new)
    diffs = [f"{k} {_short(a[k])} vs {_short(b[k])}" for k in COMPARABLE_KEYS if a[k] != b[k]]
    if diffs:
        than = f" than {other}" if other else ""
        message = f"measured in another environment{than}, refusing to {action}: " + "; ".join(diffs)
        raise ResultsFileError(path, message + (f"; {instead}" if instead else ""))


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
        """Put ``record`` in the document and rewrite the file. A record that would make the file larger than
        any reader accepts (:data:`MAX_BYTES`) is written as ``failed`` instead, naming its size: the file, and
        every record in it, stays readable."""
        self._put(record)
        try:
            self._write()
        except TooLarge as exc:
            self._put(_too_large(record, exc))
            self.flush()

    def _put(self, record: dict[str, Any]) -> None:
        if record["id"] in self._index:
            self.doc["cells"][self._index[record["id"]]] = record
        else:
            self._index[record["id"]] = len(self.doc["cells"])
            self.doc["cells"].append(record)

    def order(self, ids: Iterable[str]) -> None:
        """Put records in matrix order (resumed runs append out of order)."""
        rank = {cid: i for i, cid in enumerate(ids)}
        self.doc["cells"].sort(key=lambda r: rank.get(r["id"], len(rank)))
        self._index = {rec["id"]: i for i, rec in enumerate(self.doc["cells"])}

    def flush(self) -> None:
        """Rewrite the file; on an OS error (read-only, disk full) the previous file stays as it was.

        :raises OutputError: naming the path and the error (exit code OUTPUT_ERROR), also when the document
            has grown larger than :data:`MAX_BYTES`.
        """
        try:
            self._write()
        except TooLarge as exc:
            raise OutputError(str(self.path), OSError(errno.EFBIG, f"the results file would be {exc}")) from None

    def _write(self) -> None:
        self.doc.pop("integrity", None)
        try:
            _write_atomic(self.path, self.doc)
        except OSError as exc:
            raise OutputError(str(self.path), exc) from None


def _too_large(record: dict[str, Any], exc: TooLarge) -> dict[str, Any]:
    """``record`` as ``failed``, its measured parts left out: with them the results file would be too large."""
    size = len(json.dumps(sanitize(record)))
    message = (
        f"the record ({size:,} bytes) would make the results file {exc.size:,} bytes, more than any results "
        f"file may hold ({exc.limit:,}); its measured parts are left out"
    )
    empty: dict[str, Any] = {"metrics": {}, "numerics": None, "diagnostics": {}, "notes": {}, "warnings": []}
    return {
        **record,
        **empty,
        "status": wire.Status.FAILED,
        "evidence": {"type": "OversizedRecord", "message": message},
    }
