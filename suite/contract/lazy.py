"""Callables named by where they live, imported on first call.

A plugin's registration module must import no torch (``ampsuite list``, ``--help``
and suite-file checks load every plugin), while its ``build`` or ``apply`` needs
torch. A record therefore names its implementation, as an entry point does, with
``lazy("package.module:function")``, and the module is imported the first time the
function is called, in the worker. The core reads :attr:`Lazy.module` to preload
the implementations of ampsuite's own plugins in the fork server.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
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

    def exists(self) -> bool:
        """Whether the module can be found, without importing it (its parent packages are imported)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

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
