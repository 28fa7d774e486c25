"""Callables named by where they live, imported on first call.

A plugin's registration module must import no torch (``ampsuite list``, ``--help``
and suite-file checks load every plugin), while its ``build`` or ``apply`` needs
torch. A record therefore names its implementation, as an entry point does, with
``lazy("package.module:function")``, and the module is imported the first time the
function is called, in the worker. The core reads :attr:`Lazy.module` to preload
the implementations of ampsuite's own plugins in the fork server.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampsuite.contract.errors import PluginError

__all__ = ["Lazy", "lazy"]


@dataclass(frozen=True)
class Lazy:
    """``module:attribute``, called through; ``plugin`` names the owner in errors (set at registration)."""

    target: str
    plugin: str = field(default="?", compare=False)

    def __post_init__(self) -> None:
        module, sep, attr = self.target.partition(":")
        if not sep or not module or not attr or not all(p.isidentifier() for p in (*module.split("."), attr)):
            raise ValueError(f"lazy target must be 'package.module:function', got {self.target!r}")

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def attribute(self) -> str:
        return self.target.partition(":")[2]

    def missing(self) -> str | None:
        """What is missing of the target, found without importing it (its parent packages are imported): no
        module, or a module whose source binds no such name at its top level; None when nothing is.

        The source gives the benefit of the doubt whenever it cannot tell: no ``.py`` source, a syntax error (the
        import reports it), a star import, a module ``__getattr__`` or a module that writes its own namespace
        (``globals()``, ``exec``).
        """
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return f"no module {self.module!r}"
        if not spec.origin or not spec.origin.endswith(".py"):
            return None
        names = _top_level_names(spec.origin)
        return None if names is None or self.attribute in names else f"{self.module!r} defines no {self.attribute!r}"

    def resolve(self) -> Callable[..., Any]:
        """The named callable; :class:`PluginError` naming the plugin when it cannot be had."""
        try:
            module = importlib.import_module(self.module)
        except Exception as exc:  # the plugin's code, whatever it raises
            raise PluginError(
                self.plugin, f"cannot import {self.module!r} for {self.target!r}: {type(exc).__name__}: {exc}"
            ) from exc
        fn = getattr(module, self.attribute, None)
        if not callable(fn):
            raise PluginError(
                self.plugin, f"{self.target!r}: module {self.module!r} has no callable {self.attribute!r}"
            )
        return fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.target!r})"


def lazy(target: str) -> Callable[..., Any]:
    """A record's callable that lives in ``target`` (``"package.module:function"``), imported on first call.

    ``Technique(name="mine", apply=lazy("mypackage._impl:apply"))`` registers without
    importing ``mypackage._impl``; a target whose module cannot be found is a
    load error of the plugin, reported when the plugins are loaded.

    :raises ValueError: when ``target`` is not of the form ``package.module:function``.
    """
    return Lazy(target)


_DYNAMIC = frozenset({"globals", "vars", "exec", "setattr"})
"""Calls that let a module bind names its statements do not show."""

_TARGETS: dict[type, Callable[[Any], list[ast.expr]]] = {
    ast.Assign: lambda s: s.targets,
    ast.AnnAssign: lambda s: [s.target],
    ast.AugAssign: lambda s: [s.target],
    ast.For: lambda s: [s.target],
    ast.AsyncFor: lambda s: [s.target],
    ast.With: lambda s: [i.optional_vars for i in s.items if i.optional_vars is not None],
}
"""Where each kind of statement names what it binds."""


@functools.lru_cache(maxsize=256)
def _top_level_names(path: str) -> frozenset[str] | None:
    """The names a module's top-level statements bind (through ``if``/``try``/``with``/loops), or None when its
    source cannot say (unreadable, not Python, a star import, a module ``__getattr__``, a namespace written at
    run time)."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            (isinstance(node, ast.Name) and node.id in _DYNAMIC)
            or isinstance(node, ast.Global)
            or (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names))
        ):
            return None
    names: set[str] = set()
    for stmt in _statements(tree.body):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif type(stmt) in _TARGETS:
            for target in _TARGETS[type(stmt)](stmt):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return None if "__getattr__" in names else frozenset(names)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Each statement that runs at a module's top level, those inside ``if``, ``try``, ``with`` and loops too."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for attr in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, attr, []))
        for handler in getattr(stmt, "handlers", []):
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", []):
            yield from _statements(case.body)
