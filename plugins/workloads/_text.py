"""Real text on every machine: byte-level tokens of the Python standard library's own ``.py`` sources.

The corpus is every ``.py`` file under the running interpreter's standard
library folder (``sysconfig``'s ``stdlib``; installed packages left out),
read in the order of their relative paths, each file's bytes one token each
(ids 0-255). A file is held out for evaluation when the SHA-256 of its
relative path, read as a number, is below :data:`EVAL_PERCENT` of its range:
the split depends on the name alone, so a file stays on its side whatever the
Python version changes in it. The two streams are written once per corpus
under the data folder (a name hashed from the Python version and every file's
path and size) and memory-mapped by every worker; ``meta.json`` describes
them (files, bytes, the SHA-256 of each stream) and goes into the cell's notes.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ampsuite.plugins.workloads._data import written_once

__all__ = ["EVAL_PERCENT", "TokenWindows", "corpus_files", "corpus_notes", "held_out_file", "prepare_corpus"]

EVAL_PERCENT = 5
"""Share of the files (by path hash) held out for evaluation, in percent."""
CORPUS_FORMAT = 1
"""Bumped when the written layout changes, so an old corpus is never misread."""
SKIPPED = frozenset({"site-packages", "dist-packages", "__pycache__"})


def corpus_files(root: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """(relative POSIX path, path) of every ``.py`` file of the standard library, sorted by relative path."""
    base = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    found = []
    for path in base.rglob("*.py"):
        relative = path.relative_to(base)
        if SKIPPED.isdisjoint(relative.parts) and path.is_file():
            found.append((relative.as_posix(), path))
    return sorted(found)


def held_out_file(relative: str) -> bool:
    """Whether the file at ``relative`` belongs to the evaluation split (by the hash of its path)."""
    number = int.from_bytes(hashlib.sha256(relative.encode()).digest()[:8], "big")
    return number % 100 < EVAL_PERCENT


def _corpus_key(files: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256(f"{CORPUS_FORMAT} {platform.python_version()}".encode())
    for relative, path in files:
        digest.update(f"\0{relative}\0{path.stat().st_size}".encode())
    return digest.hexdigest()[:12]


def prepare_corpus(data_dir: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Write the corpus's two token streams (``train.bin``, ``eval.bin``: raw uint8) once; returns their folder."""
    files = corpus_files(root)
    if not files:
        raise FileNotFoundError(f"no .py files under {root or sysconfig.get_paths()['stdlib']}: no text corpus")

    def write(tmp: Path) -> None:
        meta: dict[str, Any] = {"format": CORPUS_FORMAT, "python": platform.python_version(), "splits": {}}
        for split in ("train", "eval"):
            chosen = [(r, p) for r, p in files if held_out_file(r) == (split == "eval")]
            digest = hashlib.sha256()
            size = 0
            with open(tmp / f"{split}.bin", "wb") as out:
                for _, path in chosen:
                    data = path.read_bytes()
                    out.write(data)
                    digest.update(data)
                    size += len(data)
            meta["splits"][split] = {"files": len(chosen), "bytes": size, "sha256": digest.hexdigest()}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")

    return written_once(Path(data_dir) / f"text-stdlib-{_corpus_key(files)}", write)


def corpus_notes(folder: Path) -> dict[str, Any]:
    """What the cell's notes say of the corpus: its name, Python version and each split's files, bytes, hash."""
    meta = json.loads((folder / "meta.json").read_text())
    return {"name": "python-stdlib", "tokens": "bytes", "python": meta["python"], "splits": meta["splits"]}


class TokenWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of ``seq_len + 1`` tokens of one split: inputs and their next tokens.

    The stream is memory-mapped lazily in each process and dropped when pickled, so DataLoader workers map
    the file themselves.
    """

    def __init__(self, folder: Path, split: str, seq_len: int) -> None:
        self.path, self.seq_len = folder / f"{split}.bin", seq_len
        self.count = (self.path.stat().st_size - 1) // seq_len
        if self.count < 1:
            raise ValueError(f"{self.path}: fewer than {seq_len + 1} tokens, not one window of seq_len {seq_len}")
        self._tokens: np.ndarray[Any, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.count:
            raise IndexError(index)
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=np.uint8, mode="r")
        start = index * self.seq_len
        window = torch.from_numpy(self._tokens[start : start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]
