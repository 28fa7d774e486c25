"""asv's machine file, written without questions and with the GPU in it.

asv stops on a prompt when ``~/.asv-machine.json`` has no entry for the
machine it runs on. :func:`write_machine_file` writes that entry: asv's own
defaults (``asv machine --yes``: host name, OS, CPU, RAM) plus the GPU, the
NVIDIA driver and the CUDA version the driver supports. asv keeps every key of
the entry in the machine's ``machine.json`` and uses them as graph parameters,
so a new GPU or driver, once this file is rewritten, starts a new series
instead of silently joining the old one. Rewrite it (``ampsuite asv-machine``)
after changing hardware or driver.

asv reads ``~/.asv-machine.json`` (there is no environment variable for
another path; ``HOME`` decides) and picks the entry named by ``asv run
--machine NAME``, else the one named after the host, else the only entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ampsuite.contract.errors import OutputError, UsageError
from ampsuite.results.outputs import file_target, holds_run

__all__ = ["GPU_KEYS", "NONE", "gpu_facts", "machine_info", "write_machine_file"]

NONE = "none"
"""The value of the GPU keys on a machine without a GPU (asv wants strings)."""

GPU_KEYS = ("gpu", "num_gpu", "gpu_memory", "nvidia_driver", "cuda")


def gpu_facts(environment: dict[str, Any]) -> dict[str, str]:
    """The GPU keys of a machine entry, from ampsuite's environment facts
    (:func:`ampsuite.host.environment.collect` for the ``cuda`` device).

    ``cuda`` is the CUDA version the driver supports (NVML); torch's own CUDA
    build is part of its version string, which the ``ampsuite-venv``
    environment records.
    """
    gpu = environment.get("gpu") or None
    if not gpu:
        return dict.fromkeys(GPU_KEYS, NONE)

    def text(value: Any) -> str:
        return NONE if value is None else str(value)

    return {
        "gpu": text(gpu.get("name")),
        "num_gpu": text(gpu.get("count")),
        "gpu_memory": text(gpu.get("memory_bytes")),
        "nvidia_driver": text(environment.get("driver")),
        "cuda": text(environment.get("cuda_driver")),
    }


def machine_info(machine: str | None = None) -> dict[str, str]:
    """asv's default machine entry plus :func:`gpu_facts`; ``machine`` renames it."""
    from asv.machine import Machine

    from ampsuite.host import environment

    info: dict[str, str] = {k: str(v) for k, v in Machine.get_defaults().items()}
    if machine is not None:
        if not machine.strip() or "/" in machine:
            raise ValueError(f"machine must be a non-empty name without '/', got {machine!r}")
        info["machine"] = machine
    device = environment.detect_device()
    facts = environment.collect(device) if device == "cuda" else {"gpu": None}
    info.update(gpu_facts(facts))
    return info


def default_path() -> Path:
    """Where asv looks for the machine file: ``~/.asv-machine.json``."""
    return Path("~/.asv-machine.json").expanduser()


def write_machine_file(path: str | Path | None = None, machine: str | None = None) -> Path:
    """Add (or replace) this machine's entry in asv's machine file and return the file.

    :param path: the machine file; default ``~/.asv-machine.json``, the one asv reads.
    :param machine: the entry's name; default the host name, which is the entry
        ``asv run`` uses without ``--machine``. Other machines' entries are kept.
    :raises UsageError: ``path`` is a directory, lies under a file, or is a file other than an asv machine file
        (asv would rewrite it in place, with no backup).
    :raises OutputError: the file cannot be read or written (read-only folder, full disk).
    """
    from asv.machine import MachineCollection

    target = file_target(str(default_path() if path is None else path), "--file", "asv's machine file")
    info = machine_info(machine)
    try:
        if target.exists():
            _check_machine_file(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        MachineCollection.save(info["machine"], info, _path=str(target))
    except OSError as exc:
        raise OutputError(str(target), exc) from None
    return target


def _check_machine_file(path: Path) -> None:
    """:class:`UsageError` unless ``path`` holds what asv writes there: a JSON object with ``version`` and one
    object per machine. asv updates that file in place (several machines share it), so anything else is refused."""
    if holds_run(path):
        raise UsageError(
            f"{path}: holds an ampsuite run, not asv machines; --file names asv's machine file (~/.asv-machine.json)"
        )
    try:
        data = json.loads(path.read_bytes())
    except ValueError:
        data = None
    if not (
        isinstance(data, dict)
        and isinstance(data.get("version"), int)
        and all(isinstance(v, dict) for k, v in data.items() if k != "version")
    ):
        raise UsageError(
            f'{path}: is not an asv machine file (expected a JSON object with "version" and one object per '
            "machine, as ~/.asv-machine.json); choose another --file"
        )
