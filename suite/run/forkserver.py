"""Where workers come from: a fork server with torch and ampsuite's own plugins preloaded (Linux), spawn elsewhere."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import sys
from collections.abc import Iterator, Sequence
from multiprocessing.context import BaseContext

from ampsuite.contract.errors import PluginError
from ampsuite.host.manager import Registry
from ampsuite.run.signals import blocked

__all__ = ["worker_context"]


def worker_context(registry: Registry) -> BaseContext:
    """The multiprocessing context cells run in: a fork server with torch preloaded on Linux, spawn elsewhere and in
    a fork of the process that started the fork server.

    :raises PluginError: when a built-in module the fork server preloads cannot be imported (the fork server
        would die, and with it every cell).
    """
    global _server_owner
    if sys.platform.startswith("linux"):
        if _server_owner not in (None, os.getpid()):
            # A fork of the process that started the fork server (a fork-based process pool of an executor, calling
            # a task there) inherits the server but may not use it: it is not the server's parent, and CPython's
            # check of the server fails ("No child processes"). Its cells start by spawn, as off Linux.
            return mp.get_context("spawn")
        ctx = mp.get_context("forkserver")
        # The fork server imports torch and the built-ins' implementations once; each worker is a fork of it
        # (a cell's memory limit is room above them), and no CUDA context exists before the fork. The first
        # registry of a process decides: CPython starts one fork server per process.
        # abandoned_start: a Ctrl-C in the middle of a worker's start must not print a traceback from the server.
        preload = ["ampsuite.run.abandoned_start", "ampsuite.run.worker", *registry.own_modules()]
        ctx.set_forkserver_preload(preload)
        # The fork server is started in the terminal's process group: a Ctrl-C there during its `import torch` would
        # print a traceback and kill it. It starts with the signals blocked (the mask is inherited across exec); the
        # run's handling of them is the parent's (ampsuite.run.signals), and each worker restores its own (procs).
        # The resource tracker first: starting it, CPython unblocks SIGINT and SIGTERM, which inside blocked() would
        # let a Ctrl-C of that moment meet the ignored disposition and be lost.
        multiprocessing.resource_tracker.ensure_running()
        with blocked(), _without_working_directory():
            multiprocessing.forkserver.ensure_running()
        _server_owner = os.getpid()
        _check_fork_server(ctx, preload)
        return ctx
    return mp.get_context("spawn")


@contextlib.contextmanager
def _without_working_directory() -> Iterator[None]:
    """Start the fork server with PYTHONSAFEPATH: its ``python -c`` would otherwise put the working directory
    first on sys.path, where the folder of a checkout named ``ampsuite`` is imported as an empty namespace package
    in place of the installed one, and every preload fails. Workers get the parent's sys.path from multiprocessing
    either way, so a plugin module of the working directory (``python -m ampsuite -p mine``) still loads there."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


_fork_server_checked = False
_server_owner: int | None = None
"""The process that started the fork server; a fork of it inherits the server and this value."""


def _nothing() -> None:
    """A process that does nothing: it starts the fork server and returns."""


def _check_fork_server(ctx: BaseContext, preload: Sequence[str]) -> None:
    """Start the fork server once per process with a process that does nothing, and say why when it dies.

    CPython's fork server skips a preloaded module that raises ImportError and dies on any other exception, after
    which each start reads an EOF: "internal error". In a fresh venv, torch 2.13.0+cpu beside a torchvision 0.28.0
    built for the CUDA torch (two package indexes) made ``import torchvision`` raise RuntimeError ("operator
    torchvision::nms does not exist") inside the server, while the parent, which never imports torchvision, was
    fine. The failing module is imported again here, in the parent, to name it.
    """
    global _fork_server_checked
    if _fork_server_checked:
        return
    process = ctx.Process(target=_nothing)  # type: ignore[attr-defined]
    try:
        process.start()
    except (EOFError, ConnectionError) as exc:
        broken = _unimportable(preload)
        if broken is None:
            raise
        module, error = broken
        raise PluginError(module, f"cannot be imported: {type(error).__name__}: {error}{_torch_builds()}") from exc
    process.join()
    _fork_server_checked = True


def _unimportable(modules: Sequence[str]) -> tuple[str, BaseException] | None:
    """The first of ``modules`` whose import raises what the fork server does not skip, with the exception."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        except Exception as exc:  # any other exception kills the fork server
            return module, exc
    return None


def _torch_builds() -> str:
    """The installed torch and torchvision, and what to do when they were not built for each other."""
    from importlib import metadata

    try:
        versions = f"torch {metadata.version('torch')}, torchvision {metadata.version('torchvision')}"
    except metadata.PackageNotFoundError:
        return ""
    return f" ({versions}; install a torch and a torchvision built for each other, from one package index)"
