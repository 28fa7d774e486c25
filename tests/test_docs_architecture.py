"""docs/architecture.md stays true where the code can say so: its module listing, its hooks, a record's keys."""

from __future__ import annotations

import re
from pathlib import Path

from ampsuite.contract import wire
from ampsuite.host import hookspecs

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _between(start: str, end: str) -> str:
    assert start in TEXT and end in TEXT, f"docs/architecture.md lost its {start!r} or {end!r}"
    return TEXT[TEXT.index(start) : TEXT.index(end, TEXT.index(start))]


PACKAGES = _between("### Packages", "## The flow of one run")


def test_every_module_of_suite_is_listed() -> None:
    # A folder listed whole ("suite/tune/") covers its modules; every other module is named by its path.
    folders = re.findall(r"^    (suite/[a-z_]+/)\s", PACKAGES, flags=re.MULTILINE)
    assert "suite/tune/" in folders  # the pattern still reads the listing
    unlisted = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "suite").rglob("*.py"))
        if "templates" not in path.parts
        and not (path.name == "__init__.py" and path.parent != ROOT / "suite")
        and str(path.relative_to(ROOT)) not in PACKAGES
        and not any(str(path.relative_to(ROOT)).startswith(f) for f in folders)
    ]
    assert not unlisted, f"docs/architecture.md's Packages does not list {unlisted}"


def test_every_listed_module_exists() -> None:
    listed = set(re.findall(r"\b((?:suite|plugins)/[\w/]+\.py)\b", TEXT))
    missing = sorted(p for p in listed if not (ROOT / p).is_file())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_hook_is_named() -> None:
    hooks = _between("## Hooks", "suite/host/hookspecs.py documents each")
    names = {n for n in vars(hookspecs) if n.startswith("ampsuite_")}
    assert names == set(re.findall(r"`(ampsuite_\w+)`", hooks))


def test_every_key_of_a_record_is_listed() -> None:
    block = _between("A record:", "Strict JSON")
    missing = [key for key in wire.Record.__annotations__ if f'"{key}"' not in block]
    assert not missing, f"docs/architecture.md's record lists no {missing}"
