"""cudnn-batch-norm: the operators against nn.BatchNorm, their opacity to torch.compile, and when it refuses.

On CPU the operators run PyTorch's native kernels, so these tests check what the
technique adds (the operator pair, its autograd formula, running statistics,
opacity to the compiler); the tests marked ``cuda`` check cuDNN's kernels on a GPU.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from ampsuite import SkipCell
from torch import nn

from ampsuite_resnet_kernels import _cudnn_batch_norm as impl
from ampsuite_resnet_kernels import cudnn_batch_norm
from kernels_testing import resnet_step, toy_step, train

TECHNIQUE = cudnn_batch_norm.ampsuite_techniques()[0]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="cuDNN's batch norm needs a GPU")


def block() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))


def replaced(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, impl.BATCH_NORMS):
            assert impl.replace(module)
    return model


def assert_same_training(ref: nn.Module, model: nn.Module, inputs: list[torch.Tensor], tol: float) -> None:
    ref_out, ref_grads = train(ref, inputs)
    out, grads = train(model, inputs)
    for a, b in zip(ref_out, out, strict=True):
        assert a.dtype == b.dtype and a.stride() == b.stride()
        torch.testing.assert_close(b, a, atol=tol, rtol=tol)
    for a, b in zip(ref_grads, grads, strict=True):
        torch.testing.assert_close(b, a, atol=tol, rtol=tol)
    ref_buffers, buffers = dict(ref.named_buffers()), dict(model.named_buffers())
    assert ref_buffers.keys() == buffers.keys()  # running_mean, running_var, num_batches_tracked: same names
    for name, a in ref_buffers.items():
        torch.testing.assert_close(buffers[name], a, atol=tol, rtol=tol)
    assert int(buffers["1.num_batches_tracked"]) == len(inputs)


# -- the operators -----------------------------------------------------------------


def test_the_operators_pass_pytorchs_custom_op_checks() -> None:
    """Fake (meta) kernels, autograd formula and schema agree with the real kernels (torch.library.opcheck)."""
    x = torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    torch.library.opcheck(impl.batch_norm, (x, weight, bias, torch.zeros(3), torch.ones(3), 0.1, 1e-5))
    y, mean, invstd, reserve, _, _ = impl.batch_norm(x, weight, bias, torch.zeros(3), torch.ones(3), 0.1, 1e-5)
    saved = (mean.detach(), invstd.detach(), reserve)  # no double backward: the backward has no formula of its own
    torch.library.opcheck(impl.batch_norm_backward, (torch.randn_like(y), x, weight.detach(), *saved, 1e-5))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_replaced_batch_norm_trains_like_nn_batch_norm(memory_format: torch.memory_format) -> None:
    ref = block().to(memory_format=memory_format)
    inputs = [torch.randn(6, 3, 9, 9).contiguous(memory_format=memory_format) for _ in range(3)]
    assert_same_training(ref, replaced(ref), inputs, tol=1e-5)


def test_the_operator_leaves_its_inputs_alone() -> None:
    """Functional: the running statistics come back as outputs; the module, not the operator, writes its buffers."""
    x, weight, bias = torch.randn(4, 3, 5, 5), torch.ones(3), torch.zeros(3)
    mean, var = torch.zeros(3), torch.ones(3)
    *_, new_mean, new_var = impl.batch_norm(x, weight, bias, mean, var, 0.1, 1e-5)
    assert torch.equal(mean, torch.zeros(3)) and torch.equal(var, torch.ones(3))
    torch.testing.assert_close(new_mean, 0.1 * x.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(new_var, 0.9 + 0.1 * x.var(dim=(0, 2, 3), unbiased=True))


def test_other_modes_keep_nn_batch_norms_forward() -> None:
    """Evaluation, a cumulative average (momentum None) and (N, C) input are not the operator's to compute."""
    bn = nn.BatchNorm1d(3)
    calls: list[str] = []
    original = bn.forward
    bn.forward = lambda x: calls.append("original") or original(x)  # type: ignore[method-assign]
    impl.replace(bn)
    bn(torch.randn(4, 3))  # (N, C)
    bn.momentum = None
    bn(torch.randn(4, 3, 5))
    bn.momentum = 0.1
    bn.eval()
    bn(torch.randn(4, 3, 5))
    assert calls == ["original"] * 3
    bn.train()
    bn(torch.randn(4, 3, 5))
    assert calls == ["original"] * 3  # now through the operator


def test_replacing_twice_is_a_no_op() -> None:
    bn = nn.BatchNorm2d(3)
    assert impl.replace(bn) and not impl.replace(bn)


def test_torch_compile_sees_the_operator_not_batch_norms_decomposition() -> None:
    """The point of the technique: the compiled graphs call the operator pair, and no batch norm of aten's."""
    targets: list[str] = []

    def capture(graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        targets.extend(str(node.target) for node in graph.graph.nodes if node.op == "call_function")
        return graph

    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def boxed(graph: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return make_boxed_func(capture(graph, example_inputs))

    model = replaced(block())
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=boxed, bw_compiler=boxed), dynamic=False)
    compiled(torch.randn(6, 3, 9, 9)).sum().backward()
    norms = [t for t in targets if "batch_norm" in t]
    assert norms and all(t.startswith("ampsuite_resnet_kernels.") for t in norms), norms
    assert "ampsuite_resnet_kernels.batch_norm.default" in norms
    assert "ampsuite_resnet_kernels.batch_norm_backward.default" in norms

    plain: list[str] = []
    targets = plain
    torch._dynamo.reset()
    torch.compile(block(), backend=aot_autograd(fw_compiler=boxed, bw_compiler=boxed), dynamic=False)(
        torch.randn(6, 3, 9, 9)
    ).sum().backward()
    assert not any(t.startswith("ampsuite_resnet_kernels.") for t in plain)  # the test tells the two apart


# -- the technique ---------------------------------------------------------------


def test_declaration() -> None:
    assert TECHNIQUE.requires == frozenset({"cuda"})
    assert "fp32-islands" in TECHNIQUE.conflicts  # declared here: the built-in fp32-islands knows nothing of it
    assert TECHNIQUE.requires_traits == frozenset({"model"})


def test_the_matrix_skips_it_on_cpu_and_beside_fp32_islands_with_the_reason(ampsuite_run) -> None:
    suite = {
        "workloads": {"resnet": {"batch_size": 4, "depth": 18}},
        "combinations": {
            "cudnn-bn": ["amp-fp16", "cudnn-batch-norm"],
            "with-islands": ["amp-fp16", "cudnn-batch-norm", "fp32-islands"],
        },
    }
    result = ampsuite_run(suite, plugins=[cudnn_batch_norm], keyword="not fp32")
    result.assert_status(
        "resnet/cudnn-bn/*", "skipped", reason="^cudnn-batch-norm needs a CUDA device; this run is on cpu$"
    )
    result.assert_status("resnet/with-islands/*", "skipped", reason="^cudnn-batch-norm conflicts with fp32-islands$")


def test_apply_replaces_every_batch_norm_and_says_so() -> None:
    step = resnet_step()
    assert step.model is not None
    norms = [m for m in step.model.modules() if isinstance(m, nn.BatchNorm2d)]
    step = TECHNIQUE.apply(step, cudnn_batch_norm.CudnnBatchNormOptions())
    assert step.notes["cudnn_batch_norm"] == {"modules": len(norms), "kernel": "native", "input_dtype": "float32"}
    assert all(getattr(m, impl._MARK) for m in norms)
    run = step.compose()
    assert all(torch.isfinite(run(step.data())) for _ in range(2))
    assert all(int(m.num_batches_tracked) == 2 for m in norms)


def test_apply_refuses_a_model_without_batch_norm() -> None:
    with pytest.raises(SkipCell, match="no BatchNorm"):
        TECHNIQUE.apply(toy_step(), cudnn_batch_norm.CudnnBatchNormOptions())


def test_apply_refuses_half_precision_batch_norm_weights() -> None:
    step = resnet_step()
    assert step.model is not None
    step.model.half()
    with pytest.raises(SkipCell, match=r"float32 batch-norm weights, found torch\.float16"):
        TECHNIQUE.apply(step, cudnn_batch_norm.CudnnBatchNormOptions())


# -- on a GPU: cuDNN's kernels -------------------------------------------------------


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_cudnn_batch_norm_trains_like_nn_batch_norm_under_fp16_autocast(memory_format: torch.memory_format) -> None:
    """On CUDA eager fp16 batch norm is cuDNN's already: the operator must give the same numbers."""
    assert impl.refusal(torch.device("cuda"), torch.float16) is None
    ref = block().cuda().to(memory_format=memory_format)
    model = replaced(ref)
    inputs = [torch.randn(16, 3, 12, 12, device="cuda").contiguous(memory_format=memory_format) for _ in range(3)]

    def autocast(module: nn.Module) -> nn.Module:
        class Autocast(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = module

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                with torch.autocast("cuda", dtype=torch.float16):
                    return self.inner(x)

        return Autocast()

    ref_out, ref_grads = train(autocast(ref), inputs)
    out, grads = train(autocast(model), inputs)
    for a, b in zip(ref_out, out, strict=True):
        assert b.dtype == torch.float16 and a.stride() == b.stride()
        torch.testing.assert_close(b, a, atol=2e-3, rtol=2e-3)
    for a, b in zip(ref_grads, grads, strict=True):
        torch.testing.assert_close(b, a, atol=2e-3, rtol=2e-3)
    for (name, a), b in zip(ref.named_buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4, msg=name)


@needs_cuda
@pytest.mark.cuda
def test_cudnn_operators_pass_pytorchs_custom_op_checks_on_cuda() -> None:
    x = torch.randn(4, 3, 5, 5, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    weight = torch.randn(3, device="cuda", requires_grad=True)
    bias = torch.randn(3, device="cuda", requires_grad=True)
    stats = (torch.zeros(3, device="cuda"), torch.ones(3, device="cuda"))
    torch.library.opcheck(impl.batch_norm, (x, weight, bias, *stats, 0.1, 1e-5))


@needs_cuda
@pytest.mark.cuda
def test_inductor_compiles_around_cudnn_batch_norm() -> None:
    """Inductor calls the operator as an extern kernel; the compiled model trains like the eager one."""
    ref = block().cuda().to(memory_format=torch.channels_last)
    model = replaced(ref)
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=False)
    inputs = [torch.randn(16, 3, 12, 12, device="cuda").contiguous(memory_format=torch.channels_last) for _ in range(3)]
    ref_out, ref_grads = train(ref, inputs)
    out, grads = train(compiled, inputs)
    for a, b in zip(ref_out, out, strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
    for a, b in zip(ref_grads, grads, strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
    for a, b in zip(ref.buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


@needs_cuda
@pytest.mark.cuda
def test_bfloat16_is_run_or_refused_with_cudnns_reason() -> None:
    """Whatever this cuDNN build does with bfloat16, the technique says which before any step runs."""
    reason = impl.refusal(torch.device("cuda"), torch.bfloat16)
    if reason is None:
        bn = nn.BatchNorm2d(3).cuda()
        ref = copy.deepcopy(bn)
        impl.replace(bn)
        x = torch.randn(8, 3, 6, 6, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(bn(x), ref(x), atol=2e-2, rtol=2e-2)
    else:
        assert reason
