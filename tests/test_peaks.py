"""Measured device peaks: positive, cached per device and torch version, and the MFU arithmetic."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ampsuite.run import peaks


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(peaks.CACHE_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def quick(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tiny CPU measurements, for the tests of the caching logic."""
    monkeypatch.setattr(peaks, "CPU_MATMUL", 64)
    monkeypatch.setattr(peaks, "CPU_COPY_BYTES", 1 << 20)
    monkeypatch.setattr(peaks, "CPU_BUDGET_S", 0.01)
    return cache


def test_cpu_peaks_are_positive_and_cached(cache: Path) -> None:
    t0 = time.perf_counter()
    first = peaks.measure_peaks("cpu")
    assert time.perf_counter() - t0 < 5.0  # the CPU method is meant to fit in a couple of seconds
    assert first["cached"] is False
    assert set(first["matmul_tflops"]) == {"float32", "bfloat16"}
    assert all(v > 0 for v in first["matmul_tflops"].values()) and first["copy_gbps"] > 0
    assert first["torch"] == torch.__version__ and first["device"] == peaks.device_name("cpu")
    [file] = cache.glob("peaks-*.json")
    assert json.loads(file.read_text())["matmul_tflops"] == first["matmul_tflops"]

    second = peaks.measure_peaks("cpu")
    assert second["cached"] is True
    assert {k: v for k, v in second.items() if k != "cached"} == {k: v for k, v in first.items() if k != "cached"}


def test_refresh_measures_again(quick: Path) -> None:
    peaks.measure_peaks("cpu")
    assert peaks.measure_peaks("cpu", refresh=True)["cached"] is False


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 0}), json.dumps([1, 2])])
def test_a_bad_cache_file_is_measured_over(quick: Path, content: str) -> None:
    peaks.measure_peaks("cpu")
    [file] = quick.glob("peaks-*.json")
    file.write_text(content)
    result = peaks.measure_peaks("cpu")
    assert result["cached"] is False
    assert json.loads(file.read_text())["matmul_tflops"] == result["matmul_tflops"]


def test_cache_from_another_torch_is_not_used(quick: Path) -> None:
    peaks.measure_peaks("cpu")
    [file] = quick.glob("peaks-*.json")
    doc = json.loads(file.read_text())
    file.write_text(json.dumps({**doc, "torch": "0.0.1"}))
    assert peaks.measure_peaks("cpu")["cached"] is False


def test_cache_dir_defaults_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(peaks.CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert peaks.cache_dir() == tmp_path / ".cache" / "ampsuite"


def test_unknown_device_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="device_type must be 'cpu' or 'cuda', got 'tpu'"):
        peaks.measure_peaks("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_cuda_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        peaks.measure_peaks("cuda")


TABLE = {"matmul_tflops": {"float32": 50.0, "tf32": 400.0, "bfloat16": 800.0}, "copy_gbps": 4000.0}


@pytest.mark.parametrize(
    ("tflops", "dtype", "table", "expected"),
    [
        (400.0, "bfloat16", TABLE, 0.5),
        (40.0, "float32", TABLE, 0.8),
        (100.0, "float16", TABLE, None),  # no measured peak for that class
        (None, "bfloat16", TABLE, None),
        (100.0, None, TABLE, None),
        (100.0, "bfloat16", None, None),
        (100.0, "bfloat16", {"matmul_tflops": {"bfloat16": 0.0}}, None),
    ],
)
def test_mfu(tflops: float | None, dtype: str | None, table: Any, expected: float | None) -> None:
    assert peaks.mfu(tflops, dtype, table) == expected


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peaks(cache: Path) -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    result = peaks.measure_peaks("cuda")
    assert torch.backends.cuda.matmul.allow_tf32 == before  # the TF32 flag is restored
    table = result["matmul_tflops"]
    fp8 = {"float8_e4m3fn", "float8_e5m2"} if torch.cuda.get_device_capability() >= peaks.FP8_MIN_CAPABILITY else set()
    assert set(table) == {"float32", "tf32", "float16", "bfloat16"} | fp8
    assert table["bfloat16"] > table["tf32"] > table["float32"] > 0
    assert all(table[k] > table["bfloat16"] for k in fp8)  # FP8 Tensor Cores: twice bf16's rate
    assert result["copy_gbps"] > 0
    assert peaks.measure_peaks("cuda")["cached"] is True
