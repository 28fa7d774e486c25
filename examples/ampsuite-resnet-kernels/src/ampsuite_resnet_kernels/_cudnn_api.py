"""ctypes bindings to cuDNN's batch-norm "Ex" calls, the ones that fuse a ReLU and a residual add.

``cudnnBatchNormalizationForwardTrainingEx`` / ``BackwardEx`` take a ``bnOps``
argument: plain batch norm, batch norm + ReLU, or batch norm + add + ReLU
(``y = relu(bn(x) + z)``, and in the backward ``dz`` beside ``dx``). PyTorch
calls them with plain batch norm only and exposes nothing else, so this module
binds the library that torch itself loaded (``libcudnn.so.<major>``) through
ctypes: no C++ toolchain, no second cuDNN. Only the calls, enums and sizes
used here are declared; the enums are cuDNN's public, stable values
(``cudnn_graph.h`` / ``cudnn_ops.h`` since cuDNN 7.4).

Every call runs on PyTorch's current CUDA stream with memory from PyTorch's
caching allocator, so the kernels order with the rest of the step and can be
captured in a CUDA graph.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import threading
from ctypes import POINTER, c_double, c_float, c_int, c_size_t, c_void_p
from dataclasses import dataclass

import torch
from torch import Tensor

NHWC = 1
"""cudnnTensorFormat_t CUDNN_TENSOR_NHWC."""
SPATIAL_PERSISTENT = 2
"""cudnnBatchNormMode_t CUDNN_BATCHNORM_SPATIAL_PERSISTENT: the NHWC kernels the fused ops require."""
OPS_BN, OPS_BN_RELU, OPS_BN_ADD_RELU = 0, 1, 2
"""cudnnBatchNormOps_t: batch norm, + activation, + add + activation."""
_ACTIVATION_RELU = 1
_NOT_PROPAGATE_NAN = 0
DATA_TYPES: dict[torch.dtype, int] = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 9}
"""cudnnDataType_t of each input dtype cuDNN's batch norm may take (statistics and weights stay float32)."""

_SIGNATURES: dict[str, list[type[ctypes._CData]]] = {
    "cudnnCreate": [POINTER(c_void_p)],
    "cudnnSetStream": [c_void_p, c_void_p],
    "cudnnCreateTensorDescriptor": [POINTER(c_void_p)],
    "cudnnSetTensor4dDescriptor": [c_void_p, c_int, c_int, c_int, c_int, c_int, c_int],
    "cudnnDeriveBNTensorDescriptor": [c_void_p, c_void_p, c_int],
    "cudnnCreateActivationDescriptor": [POINTER(c_void_p)],
    "cudnnSetActivationDescriptor": [c_void_p, c_int, c_int, c_double],
    "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize": [c_void_p, c_int, c_int]
    + [c_void_p] * 5
    + [POINTER(c_size_t)],
    "cudnnGetBatchNormalizationTrainingExReserveSpaceSize": [
        c_void_p,
        c_int,
        c_int,
        c_void_p,
        c_void_p,
        POINTER(c_size_t),
    ],
    "cudnnGetBatchNormalizationBackwardExWorkspaceSize": [c_void_p, c_int, c_int]
    + [c_void_p] * 7
    + [POINTER(c_size_t)],
    "cudnnBatchNormalizationForwardTrainingEx": [c_void_p, c_int, c_int, c_void_p, c_void_p]
    + [c_void_p] * 6
    + [c_void_p, c_void_p, c_void_p, c_double, c_void_p, c_void_p, c_double, c_void_p, c_void_p]
    + [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t],
    "cudnnBatchNormalizationBackwardEx": [c_void_p, c_int, c_int]
    + [c_void_p] * 4
    + [c_void_p] * 10
    + [c_void_p] * 5
    + [c_double, c_void_p, c_void_p, c_void_p, c_void_p, c_size_t, c_void_p, c_size_t],
}


class CudnnError(RuntimeError):
    """A cuDNN call returned an error status; the message carries cuDNN's own words."""


def _open(name: str) -> ctypes.CDLL:
    try:
        # torch has loaded it already; dlopen by soname returns that very copy.
        return ctypes.CDLL(name)
    except OSError:
        for root in torch.__path__:
            for path in glob.glob(os.path.join(root, "..", "nvidia", "cudnn", "lib", name)):
                return ctypes.CDLL(path)
    raise CudnnError(f"cannot load {name}, the cuDNN that torch {torch.__version__} uses")


@functools.cache
def _library() -> ctypes.CDLL:
    version = torch.backends.cudnn.version()
    if version is None:
        raise CudnnError("this torch build has no cuDNN")
    name = f"libcudnn.so.{version // 10000 if version >= 10000 else version // 1000}"
    lib = _open(name)
    for function, argtypes in _SIGNATURES.items():
        getattr(lib, function).argtypes = argtypes
        getattr(lib, function).restype = c_int
    lib.cudnnGetErrorString.argtypes = [c_int]
    lib.cudnnGetErrorString.restype = ctypes.c_char_p
    return lib


def _check(function: str, status: int) -> None:
    if status != 0:
        message = _library().cudnnGetErrorString(status).decode()
        raise CudnnError(f"{function}: {message} (status {status})")


def _call(function: str, *args: object) -> None:
    _check(function, getattr(_library(), function)(*args))


_handles: dict[tuple[int, int], int] = {}
_streams: dict[int, int] = {}
"""The stream each handle was last bound to: binding costs a library call, and the stream rarely changes."""
_lock = threading.Lock()


def _handle(device: torch.device) -> int:
    """This thread's cuDNN handle for ``device``, bound to PyTorch's current stream there."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (threading.get_ident(), index)
    handle = _handles.get(key)
    if handle is None:
        with _lock, torch.cuda.device(index):
            created = c_void_p()
            _call("cudnnCreate", ctypes.byref(created))
            assert created.value is not None
            handle = _handles[key] = created.value
    stream = torch._C._cuda_getCurrentRawStream(index)
    if _streams.get(handle) != stream:
        _call("cudnnSetStream", handle, stream)
        _streams[handle] = stream
    return handle


@dataclass(frozen=True)
class _Descriptors:
    x: int
    """The input's (and the output's, residual's and gradients') NHWC tensor descriptor."""
    stats: int
    """The per-channel descriptor cuDNN derives for scale, bias, mean and variance."""


@functools.cache
def _descriptors(n: int, c: int, h: int, w: int, dtype: torch.dtype) -> _Descriptors:
    # Descriptors are plain host structs; one per shape lives as long as the process, like torch's own cache.
    x, stats = c_void_p(), c_void_p()
    _call("cudnnCreateTensorDescriptor", ctypes.byref(x))
    _call("cudnnSetTensor4dDescriptor", x, NHWC, DATA_TYPES[dtype], n, c, h, w)
    _call("cudnnCreateTensorDescriptor", ctypes.byref(stats))
    _call("cudnnDeriveBNTensorDescriptor", stats, x, SPATIAL_PERSISTENT)
    assert x.value is not None and stats.value is not None
    return _Descriptors(x.value, stats.value)


@functools.cache
def _relu() -> int:
    desc = c_void_p()
    _call("cudnnCreateActivationDescriptor", ctypes.byref(desc))
    _call("cudnnSetActivationDescriptor", desc, _ACTIVATION_RELU, _NOT_PROPAGATE_NAN, c_double(0.0))
    assert desc.value is not None
    return desc.value


def _shape(x: Tensor) -> tuple[int, int, int, int]:
    n, c, h, w = x.shape
    return n, c, h, w


def _activation(ops: int) -> int | None:
    return _relu() if ops != OPS_BN else None


@dataclass(frozen=True)
class _Sizes:
    forward_workspace: int
    backward_workspace: int
    reserve: int
    """Bytes the forward keeps for the backward (the ReLU's mask among them)."""


@functools.cache
def _sizes(device: torch.device, n: int, c: int, h: int, w: int, dtype: torch.dtype, ops: int) -> _Sizes:
    # Asked once per shape: three library calls a step per batch norm are host time a compiled step waits for.
    handle, desc, act = _handle(device), _descriptors(n, c, h, w, dtype), _activation(ops)
    z = desc.x if ops == OPS_BN_ADD_RELU else None
    y = desc.x if ops != OPS_BN else None
    forward, backward, reserve = c_size_t(), c_size_t(), c_size_t()
    _call(
        "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
        handle,
        SPATIAL_PERSISTENT,
        ops,
        desc.x,
        z,
        desc.x,
        desc.stats,
        act,
        ctypes.byref(forward),
    )
    _call(
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize",
        handle,
        SPATIAL_PERSISTENT,
        ops,
        desc.x,
        y,
        desc.x,
        z,
        desc.x,
        desc.stats,
        act,
        ctypes.byref(backward),
    )
    _call(
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize",
        handle,
        SPATIAL_PERSISTENT,
        ops,
        act,
        desc.x,
        ctypes.byref(reserve),
    )
    return _Sizes(forward.value, backward.value, reserve.value)


def reserve_size(x: Tensor, ops: int) -> int:
    """Bytes the forward keeps for the backward for ``x``'s shape and dtype (shapes only, no data)."""
    return _sizes(x.device, *_shape(x), x.dtype, ops).reserve


_ONE, _ZERO = c_float(1.0), c_float(0.0)  # cuDNN's blend factors are float for half, bfloat16 and float data


def _ptr(t: Tensor | None) -> int | None:
    return t.data_ptr() if t is not None else None


def _buffer(size: int, device: torch.device) -> Tensor | None:
    return torch.empty(size, dtype=torch.uint8, device=device) if size else None


def forward_training(
    x: Tensor, z: Tensor | None, weight: Tensor, bias: Tensor, eps: float, ops: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``y = act(bn(x) [+ z])`` in training mode.

    ``x`` (and ``z``, same shape and dtype) are 4-D channels-last contiguous. Returns (y, saved mean, saved
    inverse std, reserve space). The running statistics are the caller's: cuDNN is given none to update
    (both pointers NULL, as its API allows), because an operator that mutates nothing is one PyTorch can
    register an autograd formula for, and the update from the saved statistics fuses into the compiled step.
    """
    handle = _handle(x.device)
    shape = _shape(x)
    desc, sizes, act = _descriptors(*shape, x.dtype), _sizes(x.device, *shape, x.dtype, ops), _activation(ops)
    z_desc = desc.x if ops == OPS_BN_ADD_RELU else None
    workspace = _buffer(sizes.forward_workspace, x.device)
    reserve = torch.empty(sizes.reserve, dtype=torch.uint8, device=x.device)
    y = torch.empty_like(x, memory_format=torch.channels_last)
    mean = torch.empty(shape[1], dtype=torch.float32, device=x.device)
    invstd = torch.empty(shape[1], dtype=torch.float32, device=x.device)
    _call(
        "cudnnBatchNormalizationForwardTrainingEx",
        handle,
        SPATIAL_PERSISTENT,
        ops,
        ctypes.byref(_ONE),
        ctypes.byref(_ZERO),
        desc.x,
        x.data_ptr(),
        z_desc,
        _ptr(z) if z_desc else None,
        desc.x,
        y.data_ptr(),
        desc.stats,
        weight.data_ptr(),
        bias.data_ptr(),
        0.0,
        None,
        None,
        eps,
        mean.data_ptr(),
        invstd.data_ptr(),
        act,
        _ptr(workspace),
        sizes.forward_workspace,
        _ptr(reserve) if sizes.reserve else None,
        sizes.reserve,
    )
    return y, mean, invstd, reserve


def backward(
    grad_y: Tensor,
    x: Tensor,
    y: Tensor,
    weight: Tensor,
    bias: Tensor,
    mean: Tensor,
    invstd: Tensor,
    reserve: Tensor,
    eps: float,
    ops: int,
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """Gradients of :func:`forward_training`: (dx, dz or None, d weight, d bias)."""
    handle = _handle(x.device)
    shape = _shape(x)
    desc, sizes, act = _descriptors(*shape, x.dtype), _sizes(x.device, *shape, x.dtype, ops), _activation(ops)
    dz_desc = desc.x if ops == OPS_BN_ADD_RELU else None
    y_desc = desc.x if ops != OPS_BN else None
    workspace = _buffer(sizes.backward_workspace, x.device)
    grad_x = torch.empty_like(x, memory_format=torch.channels_last)
    grad_z = torch.empty_like(x, memory_format=torch.channels_last) if dz_desc else None
    grad_weight, grad_bias = torch.empty_like(weight), torch.empty_like(bias)
    _call(
        "cudnnBatchNormalizationBackwardEx",
        handle,
        SPATIAL_PERSISTENT,
        ops,
        ctypes.byref(_ONE),
        ctypes.byref(_ZERO),
        ctypes.byref(_ONE),
        ctypes.byref(_ZERO),
        desc.x,
        x.data_ptr(),
        y_desc,
        y.data_ptr() if y_desc else None,
        desc.x,
        grad_y.data_ptr(),
        dz_desc,
        _ptr(grad_z),
        desc.x,
        grad_x.data_ptr(),
        desc.stats,
        weight.data_ptr(),
        bias.data_ptr(),
        grad_weight.data_ptr(),
        grad_bias.data_ptr(),
        eps,
        mean.data_ptr(),
        invstd.data_ptr(),
        act,
        _ptr(workspace),
        sizes.backward_workspace,
        _ptr(reserve) if sizes.reserve else None,
        sizes.reserve,
    )
    return grad_x, grad_z, grad_weight, grad_bias
