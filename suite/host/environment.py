"""Facts about the machine and software, written once per run.

GPU facts come from NVML (nvidia-ml-py) when it is importable, so the parent
process never creates a CUDA context that would hold memory on the GPU the
workers measure; torch supplies the rest.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import ampsuite

__all__ = ["collect", "detect_device", "git_commit", "identity"]


def git_commit(path: str | Path, *, toplevel: str | Path | None = None) -> str | None:
    """The commit checked out at ``path`` (with ``+dirty`` when modified), or None.

    :param toplevel: when given, report a commit only if the repository's top
        folder is exactly this one: an ampsuite installed in an ignored folder
        of some other repository (asv's environments, a .venv) is not that
        repository's commit.
    """
    try:
        if toplevel is not None:
            top = subprocess.run(
                ["git", "-C", str(path), "rev-parse", "--show-toplevel"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            if Path(top).resolve() != Path(toplevel).resolve():
                return None
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out + ("+dirty" if dirty else "") if out else None


def _nvml_gpu() -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        max_sm: int | None = None
        with contextlib.suppress(Exception):
            max_sm = int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        return {
            "name": name.decode() if isinstance(name, bytes) else name,
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "max_sm_mhz": max_sm,
            "count": count,
            "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            "capability": f"{major}.{minor}",
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "driver_cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
        }
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _torch_gpu() -> dict[str, Any] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    return {
        "name": props.name,
        "uuid": f"GPU-{uuid}" if uuid is not None else None,
        "max_sm_mhz": None,
        "count": torch.cuda.device_count(),
        "memory_bytes": int(props.total_memory),
        "capability": f"{props.major}.{props.minor}",
        "driver": None,
        "driver_cuda": None,
    }


def gpu_count() -> int:
    """CUDA devices this process sees (``torch.cuda.device_count``, which creates no CUDA context)."""
    import torch

    return int(torch.cuda.device_count())


@functools.cache
def identity(device: str) -> dict[str, Any]:
    """Which machine measures a ``device`` cell in this process: the host, the device (the GPU's name, else the
    CPU's model), the GPU's UUID, driver and highest SM clock (None on a CPU). Every record carries it, so that
    two records can be told measured on one machine or not (:func:`ampsuite.analysis.machines.beside`)."""
    gpu = (_nvml_gpu() or _torch_gpu()) if device == "cuda" else None
    return {
        "host": socket.gethostname(),
        "device": (gpu or {}).get("name") or _cpu_name(),
        "gpu_uuid": (gpu or {}).get("uuid"),
        "driver": (gpu or {}).get("driver"),
        "max_sm_mhz": (gpu or {}).get("max_sm_mhz"),
    }


def detect_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def collect(device: str) -> dict[str, Any]:
    """Everything that makes two runs comparable or not."""
    import torch

    gpu = (_nvml_gpu() or _torch_gpu()) if device == "cuda" else None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "device": device,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_driver": gpu.get("driver_cuda") if gpu else None,
        "driver": gpu.get("driver") if gpu else None,
        "gpu": gpu,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ampsuite_version": ampsuite.__version__,
        "ampsuite_commit": git_commit(Path(ampsuite.__file__).parent, toplevel=Path(ampsuite.__file__).parent.parent),
        "workdir_commit": git_commit(Path.cwd()),
        "peaks": None,
    }
