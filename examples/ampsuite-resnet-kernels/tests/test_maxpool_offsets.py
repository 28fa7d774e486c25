"""maxpool-offsets: a max pool by compares that saves int8 window offsets, and computes what ATen's did."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from ampsuite import SkipCell
from torch import nn

from ampsuite_resnet_kernels import _maxpool_offsets as impl
from ampsuite_resnet_kernels import maxpool_offsets
from kernels_testing import in_float64, resnet_step, toy_step

TECHNIQUE = maxpool_offsets.ampsuite_techniques()[0]

GEOMETRIES = [(3, 2, 1), (2, 2, 0), (3, 1, 1), (3, 3, 0), (5, 2, 2), (2, 3, 0), ((3, 2), (2, 1), (1, 0))]


def pool_and_grad(pool: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    out = pool(x)
    out.backward(grad)
    assert x.grad is not None
    return out.detach(), x.grad


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (1, 2, 7, 9), (2, 1, 5, 6)], ids=str)
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
def test_values_and_gradients_are_atens(
    geometry: tuple[Any, Any, Any], shape: tuple[int, ...], memory_format: torch.memory_format
) -> None:
    torch.manual_seed(0)
    reference = nn.MaxPool2d(*geometry)
    mine = impl.OffsetMaxPool2d(reference)
    x = torch.randn(*shape, dtype=torch.float64).contiguous(memory_format=memory_format)
    grad = torch.randn_like(reference(x))
    ref_out, ref_dx = pool_and_grad(reference, x, grad)
    out, dx = pool_and_grad(mine, x, grad)
    assert torch.equal(out, ref_out)
    torch.testing.assert_close(dx, ref_dx, rtol=0, atol=1e-12)


def test_ties_nans_and_half_precision_follow_aten() -> None:
    # Rounded fp16 values tie often: ATen sends a window's gradient to its first maximum, and so must this.
    torch.manual_seed(0)
    reference = nn.MaxPool2d(3, 2, 1)
    mine = impl.OffsetMaxPool2d(reference)
    x = torch.randn(2, 4, 12, 12).round().half()
    x[0, 0, 3, 3] = float("nan")  # a NaN wins its windows, as in ATen
    grad = torch.randn(2, 4, 6, 6).half()
    ref_out, ref_dx = pool_and_grad(reference, x, grad)
    out, dx = pool_and_grad(mine, x, grad)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0, equal_nan=True)
    # A pixel that wins several windows sums their gradients in another order: one fp16 ulp apart at most.
    torch.testing.assert_close(dx.double(), ref_dx.double(), rtol=0, atol=2**-11 * ref_dx.abs().max().item())


def test_offsets_are_int8_and_saved_rather_than_recomputed_under_compile() -> None:
    """The point of the technique: AOTAutograd's partitioner keeps the int8 offsets for the backward
    instead of recomputing the window maxima there (what it does with ATen's pool in torch 2.11)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    graphs: dict[str, torch.fx.GraphModule] = {}

    def keep(name: str) -> Any:
        def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            graphs[name] = gm
            return make_boxed_func(gm.forward)

        return compiler

    backend = aot_autograd(
        fw_compiler=keep("forward"), bw_compiler=keep("backward"), partition_fn=min_cut_rematerialization_partition
    )
    torch._dynamo.reset()
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    impl.replace(model)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(2, 3, 16, 16)
    compiled(x).sum().backward()
    torch._dynamo.reset()
    (output,) = [n for n in graphs["forward"].graph.nodes if n.op == "output"]
    saved = [a.meta["val"] for a in output.args[0][1:] if isinstance(a, torch.fx.Node)]
    assert any(t.dtype == torch.int8 and tuple(t.shape) == (2, 8, 8, 8) for t in saved)
    backward_ops = {str(n.target) for n in graphs["backward"].graph.nodes if n.op == "call_function"}
    assert not any(op.startswith("aten.gt") for op in backward_ops), backward_ops  # no window maximum found again
    assert any(op.startswith("aten.eq") for op in backward_ops)  # the gather compares offsets


def test_only_plain_max_pools_it_can_express_are_replaced() -> None:
    class Sub(nn.MaxPool2d):
        pass

    model = nn.Sequential(
        nn.MaxPool2d(3, 2, 1),
        nn.MaxPool2d(3, 2, 1, dilation=2),
        nn.MaxPool2d(3, 2, 1, ceil_mode=True),
        nn.MaxPool2d(2, return_indices=True),
        nn.MaxPool2d(12),
        Sub(2),
        nn.MaxPool2d(2),
    )
    reference = copy.deepcopy(model)
    replaced, left = impl.replace(model)
    assert replaced == ["0", "6"]
    assert left == {
        "1": "dilation 2",
        "2": "ceil_mode",
        "3": "return_indices (its caller reads ATen's int64 indices)",
        "4": "a 12x12 window: more than 127 offsets for int8",
    }
    x = torch.randn(1, 2, 24, 24)
    torch.testing.assert_close(model[0](x), reference[0](x))


def test_a_resnet_trains_the_same_with_it() -> None:
    step, reference = resnet_step(), resnet_step()
    step = TECHNIQUE.apply(step, maxpool_offsets.MaxPoolOffsetsOptions())
    assert step.notes["maxpool_offsets"] == {
        "replaced": ["maxpool"],
        "backward": "inline",
        "backward_note": "backward='kernel' runs on CUDA only; this cpu cell gathered inline",
    }
    assert step.model is not None and type(step.model.maxpool).__name__ == "OffsetMaxPool2d"
    assert reference.model is not None
    step, reference = in_float64(step), in_float64(reference)
    runs = [step.compose(), reference.compose()]
    # The same training, up to the order in which a pixel that wins several windows sums their gradients.
    for _ in range(3):
        batch = step.data()
        torch.testing.assert_close(runs[0](batch), runs[1](batch), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(step.model.conv1.weight, reference.model.conv1.weight, rtol=1e-9, atol=1e-10)


def test_declaration_and_skips() -> None:
    assert TECHNIQUE.order == 22 and TECHNIQUE.requires == frozenset({"torch-compile"}) and not TECHNIQUE.conflicts
    assert TECHNIQUE.requires_traits == frozenset({"model"})
    with pytest.raises(SkipCell, match="the model has no max pool it can replace"):
        TECHNIQUE.apply(toy_step(), maxpool_offsets.MaxPoolOffsetsOptions(backward="inline"))
    assert TECHNIQUE.options is maxpool_offsets.MaxPoolOffsetsOptions
    assert maxpool_offsets.MaxPoolOffsetsOptions().backward == "kernel"
    with pytest.raises(ValueError, match="backward must be one of 'kernel', 'inline'"):
        impl.OffsetMaxPool2d(nn.MaxPool2d(2), backward="fast")


# The Triton kernel runs here under Triton's interpreter (CPU tensors, numpy underneath), in a process of its
# own: triton.jit reads TRITON_INTERPRET when the kernel is defined, and this process may have imported it.
KERNEL_CHECK = """
import torch
from torch import nn
from ampsuite_resnet_kernels import _maxpool_offsets as impl

torch.manual_seed(0)
for geometry in {geometries!r}:
    # 64 channels fill the kernel's channel tile (the unmasked, vectorized path); the others mask it
    for shape in [(2, 8, 9, 10), (1, 3, 7, 6), (4, 5, 5), (2, 64, 7, 9)]:
        for layout in [torch.contiguous_format, torch.channels_last]:
            if len(shape) == 3 and layout is torch.channels_last:
                continue
            reference = nn.MaxPool2d(*geometry)
            x = torch.randn(*shape).round().half().contiguous(memory_format=layout)  # rounded: many ties
            grad = torch.randn_like(reference(x))
            results = []
            for pool in (impl.OffsetMaxPool2d(reference, "kernel"), impl.OffsetMaxPool2d(reference, "inline")):
                leaf = x.detach().clone().requires_grad_(True)
                pool(leaf).backward(grad)
                results.append(leaf.grad)
            kernel, inline = results
            assert kernel.is_contiguous(memory_format=layout), (geometry, shape, kernel.stride())
            exact = x.double().requires_grad_(True)
            reference(exact).backward(grad.double())
            # the kernel sums a pixel's windows in fp32 and rounds once, the tensor ops round every sum
            error = (kernel.double() - exact.grad).abs().max().item()
            assert error <= (inline.double() - exact.grad).abs().max().item(), (geometry, shape, layout)
            assert error <= 2**-11 * exact.grad.abs().max().item(), (geometry, shape, layout)

print("ok")
"""


@pytest.mark.slow
def test_the_kernel_backward_sums_what_the_inline_gather_does() -> None:
    pytest.importorskip("triton")
    script = textwrap.dedent(KERNEL_CHECK.format(geometries=GEOMETRIES))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


class _Traced(Exception):
    """Raised in place of running a traced backward whose Triton kernel this CPU cannot launch."""


def test_under_compile_the_kernel_backward_is_one_operator_inductor_cannot_inline() -> None:
    pytest.importorskip("triton")
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    graphs: dict[str, torch.fx.GraphModule] = {}

    def forward(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs["forward"] = gm
        return make_boxed_func(gm.forward)

    def backward(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs["backward"] = gm

        def stop(*args: Any) -> Any:
            raise _Traced

        return make_boxed_func(stop)

    torch._dynamo.reset()
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    impl.replace(model, "kernel")
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=forward, bw_compiler=backward))
    with pytest.raises(_Traced):
        compiled(torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)).sum().backward()
    torch._dynamo.reset()
    calls = [n for n in graphs["backward"].graph.nodes if n.op == "call_function"]
    # the triton_op is traced into its kernel, a call inductor launches as it is
    (kernel,) = [n for n in calls if "triton_kernel_wrapper" in str(n.target)]
    # the input was channels-last, so is its gradient: a channel's stride is 1
    assert kernel.kwargs["kwargs"]["x_sc"] == 1
    assert not any(str(n.target).startswith("aten.eq") for n in calls)  # no gather left to inline
