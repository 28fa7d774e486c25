"""``ampsuite new-plugin NAME``: write a working plugin package from the templates.

The skeleton is the shortest path from nothing to a plugin that ``ampsuite
list`` shows: a pyproject with the ``ampsuite`` entry point (torch pinned to the
range ampsuite requires), a registration module with one workload and one
technique that imports no torch (their code is in ``_impl.py``, named with
``ampsuite.lazy``, as the built-ins do), a README and tests that use ampsuite's
pytest plugin and pass as generated. The templates live in
``suite/templates/plugin/`` (package data): a path component ``__package__``
becomes the import name, and the ``.j2`` suffix is dropped.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

from ampsuite import PLUGIN_API, __version__
from ampsuite.contract.errors import OutputError, UsageError
from ampsuite.results.outputs import folder_target

__all__ = ["PluginNames", "create", "plugin_names", "render"]

TEMPLATE_DIR = ("templates", "plugin")
PACKAGE_PLACEHOLDER = "__package__"
SUFFIX = ".j2"
_DIST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
RESERVED = frozenset({"suite", "plugins", "ampsuite", "torch", "test", "tests"})
"""Import names that would shadow ampsuite, its built-ins or what its tests import."""


@dataclass(frozen=True)
class PluginNames:
    """The names a generated package uses, all derived from the one the user gave."""

    name: str
    """The distribution (pip) name, also the plugin's name in ``ampsuite list``."""
    package: str
    """The import name: lower case, ``-`` and ``.`` as ``_``."""
    workload: str
    technique: str


def plugin_names(name: str) -> PluginNames:
    """Check ``name`` and derive the package, workload and technique names.

    :raises UsageError: a name that is not a valid distribution name, whose
        import name is not a Python identifier, or that shadows a module
        ampsuite needs.
    """
    if not _DIST_NAME.fullmatch(name):
        raise UsageError(
            f"new-plugin: {name!r} is not a valid package name: use letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit (e.g. ampsuite-myplugin)"
        )
    package = re.sub(r"[-_.]+", "_", name).lower()
    if not package.isidentifier() or keyword.iskeyword(package):
        raise UsageError(f"new-plugin: {name!r} gives the import name {package!r}, which is not a Python identifier")
    if package in RESERVED or package in sys.stdlib_module_names:
        raise UsageError(
            f"new-plugin: the import name {package!r} would shadow an existing module; choose another name"
        )
    installed = _installed(package)
    if installed:
        raise UsageError(
            f"new-plugin: the import name {package!r} is already installed here ({installed}); choose another name"
        )
    return PluginNames(name=name, package=package, workload=f"{name}-mlp", technique=f"{name}-grad-clip")


def _installed(package: str) -> str | None:
    """Where an importable module of that name lives, or None; a bare folder (a namespace portion) is no module."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "namespace"):
        return None
    return spec.origin


def _templates() -> Traversable:
    root = resources.files("ampsuite")
    for part in TEMPLATE_DIR:
        root = root / part
    return root


def _walk(node: Traversable, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Traversable]]:
    found = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name == "__pycache__":
            continue
        if child.is_dir():
            found += _walk(child, (*prefix, child.name))
        elif child.name.endswith(SUFFIX):
            found.append(((*prefix, child.name), child))
    return found


def render(name: str) -> dict[str, str]:
    """The files of the skeleton for ``name``: relative POSIX path -> text."""
    names = plugin_names(name)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    context = {
        "name": names.name,
        "package": names.package,
        "workload": names.workload,
        "technique": names.technique,
        "ampsuite_version": __version__,
        "plugin_api": PLUGIN_API,
    }
    files = {}
    for parts, template in _walk(_templates()):
        relative = "/".join(p.replace(PACKAGE_PLACEHOLDER, names.package) for p in parts)[: -len(SUFFIX)]
        files[relative] = env.from_string(template.read_text(encoding="utf-8")).render(context)
    if not files:
        raise RuntimeError("ampsuite's plugin templates are missing from the installation (suite/templates/plugin)")
    return files


def create(name: str, parent: str | Path = ".") -> Path:
    """Write the skeleton into ``parent/name`` and return that directory.

    :raises UsageError: a bad name, a ``parent`` that is not a directory, or a target that already exists
        (nothing is ever overwritten).
    :raises OutputError: the skeleton cannot be written (read-only folder, full disk); a half-written one is
        removed, so that the next try does not find NAME/ taken.
    """
    files = render(name)
    folder_target(str(parent), "-o", f"the directory in which {name}/ is created")
    target = Path(parent) / name
    try:
        target.mkdir(parents=True)
    except FileExistsError:
        raise UsageError(f"new-plugin: {target} already exists; choose another name or remove it first") from None
    except OSError as exc:
        raise OutputError(str(exc.filename or target), exc) from None
    try:
        for relative, text in files.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        shutil.rmtree(target, ignore_errors=True)  # made by this call, a moment ago: nothing of the user's in it
        raise OutputError(str(exc.filename or target), exc) from None
    return target
