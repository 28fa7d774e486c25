"""cudnn-batch-norm with ``fuse = true``: the torch.fx rewrite, the fused operators, and cuDNN's Ex kernels.

On CPU the operators run PyTorch's native batch norm, add and ReLU, so these tests hold what the option adds
(which patterns fuse, parameter identity, the autograd formula with the residual's gradient, fallbacks,
skips) to the model it rewrites; the tests marked ``cuda`` hold cuDNN's fused kernels to PyTorch's arithmetic.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torchvision
from ampsuite import SkipCell
from torch import nn

from ampsuite_resnet_kernels import _cudnn_api as api
from ampsuite_resnet_kernels import _cudnn_fused as fused
from ampsuite_resnet_kernels import cudnn_batch_norm
from kernels_testing import resnet_step, toy_step, train

TECHNIQUE = cudnn_batch_norm.ampsuite_techniques()[0]
FUSE = cudnn_batch_norm.CudnnBatchNormOptions(fuse=True)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="cuDNN's fused batch norm needs a GPU")


class Residual(nn.Module):
    """conv -> bn -> relu -> conv -> bn, + identity, relu: the pattern ResNet repeats, with the add's spelling open."""

    def __init__(self, add: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], relu: str = "module") -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.add, self.relu_kind = add, relu

    def _relu(self, x: torch.Tensor) -> torch.Tensor:
        if self.relu_kind == "function":
            return F.relu(x)
        if self.relu_kind == "method":
            return x.relu()
        return self.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._relu(self.bn1(self.conv1(x)))
        out = self.add(self.bn2(self.conv2(out)), x)
        return self._relu(out)


def _iadd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a += b
    return a


def assert_same_training(ref: nn.Module, model: nn.Module, inputs: list[torch.Tensor], tol: float) -> None:
    ref_out, ref_grads = train(ref, inputs)
    out, grads = train(model, inputs)
    for a, b in zip(ref_out, out, strict=True):
        torch.testing.assert_close(b, a, atol=tol, rtol=tol)
    for a, b in zip(ref_grads, grads, strict=True):
        torch.testing.assert_close(b, a, atol=tol, rtol=tol)
    ref_buffers, buffers = dict(ref.named_buffers()), dict(model.named_buffers())
    assert ref_buffers.keys() == buffers.keys()
    for name, a in ref_buffers.items():
        torch.testing.assert_close(buffers[name], a, atol=tol, rtol=tol, msg=name)


# -- the rewrite -----------------------------------------------------------------------


def test_resnet50_fuses_every_relu_and_residual_add_and_keeps_its_parameters() -> None:
    """ResNet-50: the stem and 32 block ReLUs, 16 residual adds, 4 downsample batch norms alone."""
    model = torchvision.models.resnet50()
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    rewritten, kinds = fused.fuse_model(model)
    assert sorted(kinds.values()).count("bn+relu") == 33
    assert sorted(kinds.values()).count("bn+add+relu") == 16
    assert [name for name, k in kinds.items() if k == "bn"] == [f"layer{i}.0.downsample.1" for i in range(1, 5)]
    assert kinds["layer3.5.bn3"] == "bn+add+relu" and kinds["bn1"] == "bn+relu"
    # The very same tensors under the very same names: the optimizer, checkpoints and probes see no change.
    assert {n: id(p) for n, p in rewritten.named_parameters()} == {n: id(p) for n, p in params.items()}
    assert {n: id(b) for n, b in rewritten.named_buffers()} == {n: id(b) for n, b in buffers.items()}
    assert not any(isinstance(m, nn.ReLU) for m in rewritten.modules())  # every ReLU went into a batch norm
    norms = [m for m in rewritten.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == 53 and all(type(m) is fused.FusedBatchNorm2d for m in norms)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_a_fused_resnet_trains_like_the_original(memory_format: torch.memory_format) -> None:
    torch.manual_seed(0)
    ref = torchvision.models.resnet18(num_classes=10).to(memory_format=memory_format)
    model, _ = fused.fuse_model(copy.deepcopy(ref))
    inputs = [torch.randn(4, 3, 32, 32).contiguous(memory_format=memory_format) for _ in range(3)]
    assert_same_training(ref, model, inputs, tol=1e-5)
    assert int(model.get_buffer("layer1.0.bn1.num_batches_tracked")) == 3


@pytest.mark.parametrize(
    ("add", "relu"),
    [(operator.add, "module"), (_iadd, "module"), (torch.add, "function"), (lambda a, b: b + a, "method")],
    ids=["add", "iadd", "torch.add", "reversed"],
)
def test_each_spelling_of_add_and_relu_fuses(add: Callable[..., torch.Tensor], relu: str) -> None:
    torch.manual_seed(0)
    ref = Residual(add, relu)
    model, kinds = fused.fuse_model(copy.deepcopy(ref))
    assert kinds == {"bn1": "bn+relu", "bn2": "bn+add+relu"}
    assert_same_training(ref, model, [torch.randn(2, 8, 6, 6) for _ in range(2)], tol=1e-5)


@pytest.mark.parametrize(
    "add",
    [
        lambda a, b: torch.add(a, b, alpha=2.0),  # not a plain sum
        lambda a, b: b.add_(a),  # writes into the residual, which the block's input may still need
        lambda a, b: a + a,  # no second tensor
    ],
    ids=["alpha", "iadd-into-residual", "self"],
)
def test_adds_that_are_not_a_residual_sum_stay_outside(add: Callable[..., torch.Tensor]) -> None:
    torch.manual_seed(0)
    ref = Residual(add)
    model, kinds = fused.fuse_model(copy.deepcopy(ref))
    assert kinds == {"bn1": "bn+relu", "bn2": "bn"}
    x = torch.randn(2, 8, 6, 6)
    torch.testing.assert_close(model(x.clone()), ref(x.clone()))


def test_a_batch_norm_output_used_twice_is_not_fused() -> None:
    class TwoUsers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.bn(x)
            return torch.relu(y) + y

    ref = TwoUsers()
    model, kinds = fused.fuse_model(copy.deepcopy(ref))
    assert kinds == {"bn": "bn"}
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(model(x), ref(x))


def test_a_batch_norm_module_called_twice_stays_plain_batch_norm_at_each_call() -> None:
    """One module has one ``ops``: fusing its first call's ReLU would apply a ReLU at the second call too."""

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.bn(x)) - self.bn(x * 2)

    torch.manual_seed(0)
    ref = Shared()
    model, kinds = fused.fuse_model(copy.deepcopy(ref))
    assert kinds == {"bn": "bn"}
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(model(x), ref(x))


def test_evaluation_mode_runs_pytorchs_batch_norm_add_and_relu(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    ref = Residual(operator.add)
    for stats in (ref.bn1.running_mean, ref.bn2.running_var):
        stats.uniform_(0.5, 1.5)
    model, _ = fused.fuse_model(copy.deepcopy(ref))
    calls: list[int] = []
    operator_ = fused.fused_batch_norm
    monkeypatch.setattr(fused, "fused_batch_norm", lambda *args: calls.append(args[-1]) or operator_(*args))
    x = torch.randn(2, 8, 6, 6)
    ref.eval(), model.eval()
    torch.testing.assert_close(model(x), ref(x))
    assert calls == [] and int(model.get_buffer("bn1.num_batches_tracked")) == 0
    ref.train(), model.train()
    torch.testing.assert_close(model(x), ref(x))
    assert calls == [api.OPS_BN_RELU, api.OPS_BN_ADD_RELU]  # training goes through the operator


def test_the_operators_pass_pytorchs_custom_op_checks() -> None:
    """Fake kernels, autograd formula and schema agree with the real kernels, for each kind of fusion."""
    x = torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    z = torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    for ops, residual in ((api.OPS_BN, None), (api.OPS_BN_RELU, None), (api.OPS_BN_ADD_RELU, z)):
        args = (x, residual, weight, bias, 1e-5, ops)
        torch.library.opcheck(fused.fused_batch_norm, args)
        y, mean, invstd, reserve = fused.fused_batch_norm(*args)
        saved = (weight.detach(), bias.detach(), mean.detach(), invstd.detach(), reserve)
        torch.library.opcheck(fused.fused_batch_norm_backward, (torch.randn_like(y), x, y.detach(), *saved, 1e-5, ops))


def test_the_residual_gets_the_gradient_through_the_relu() -> None:
    x = torch.randn(4, 3, 5, 5)
    z = torch.randn(4, 3, 5, 5, requires_grad=True)
    weight, bias = torch.ones(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    y = fused.fused_batch_norm(x, z, weight, bias, 1e-5, api.OPS_BN_ADD_RELU)[0]
    y.sum().backward()
    assert z.grad is not None
    torch.testing.assert_close(z.grad, (y > 0).float())


# -- the technique ---------------------------------------------------------------------


def test_apply_with_fuse_rewrites_the_model_and_says_so() -> None:
    step = resnet_step()
    assert step.model is not None
    params = [id(p) for p in step.model.parameters()]
    step = TECHNIQUE.apply(step, FUSE)
    assert isinstance(step.model, torch.fx.GraphModule)
    assert [id(p) for p in step.model.parameters()] == params
    assert step.notes["cudnn_batch_norm"] == {
        "modules": 20,
        "fused": {"bn+relu": 9, "bn+add+relu": 8, "bn": 3},
        "kernel": "native",
        "input_dtype": "float32",
    }
    run = step.compose()
    assert all(torch.isfinite(run(step.data())) for _ in range(2))


def test_fuse_refuses_a_model_without_batch_norm_2d() -> None:
    with pytest.raises(SkipCell, match=r"cudnn-batch-norm \(fuse\) found no BatchNorm2d"):
        TECHNIQUE.apply(toy_step(), FUSE)


def test_fuse_refuses_a_model_torch_fx_cannot_trace_with_the_reason() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(x) if x.sum() > 0 else x  # data-dependent control flow

    step = resnet_step()
    step.model = Branchy()
    with pytest.raises(SkipCell, match=r"torch\.fx cannot trace this model: TraceError"):
        TECHNIQUE.apply(step, FUSE)


def test_fuse_on_cuda_without_channels_last_is_a_skip_with_the_reason() -> None:
    """Every call would fall back to PyTorch's batch norm: the cell would measure the model without the option.

    Decided before any CUDA call, so a CPU machine checks it with a step that names a CUDA device.
    """
    step = resnet_step()
    step.device = torch.device("cuda")
    with pytest.raises(SkipCell, match=r"fused kernels take channels-last input; add channels-last"):
        TECHNIQUE.apply(step, FUSE)


def test_the_option_is_declared_and_off_by_default() -> None:
    assert TECHNIQUE.options is cudnn_batch_norm.CudnnBatchNormOptions
    assert cudnn_batch_norm.CudnnBatchNormOptions().fuse is False


# -- on a GPU: cuDNN's fused kernels ----------------------------------------------------------


def _reference(x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor, ops: int) -> Any:
    """The same training-mode batch norm (+ add) (+ ReLU) in float32 with PyTorch's kernels."""
    y = F.batch_norm(x.float(), None, None, weight, bias, training=True, eps=1e-5)
    if z is not None:
        y = y + z.float()
    return torch.relu(y) if ops != api.OPS_BN else y


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("ops", [api.OPS_BN, api.OPS_BN_RELU, api.OPS_BN_ADD_RELU])
def test_cudnns_fused_kernels_compute_pytorchs_batch_norm(dtype: torch.dtype, ops: int) -> None:
    reason = fused.refusal(torch.device("cuda"), dtype)
    if reason is not None:
        assert dtype != torch.float16, reason  # float16 is what the fused kernels were built for
        pytest.skip(f"cuDNN refuses {dtype}: {reason}")
    torch.manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(32, 64, 14, 14, device="cuda").to(dtype, memory_format=cl).requires_grad_()
    z = torch.randn(32, 64, 14, 14, device="cuda").to(dtype, memory_format=cl).requires_grad_()
    residual = z if ops == api.OPS_BN_ADD_RELU else None
    weight = torch.rand(64, device="cuda", requires_grad=True)
    bias = torch.randn(64, device="cuda", requires_grad=True)
    y, mean, invstd, _ = fused.fused_batch_norm(x, residual, weight, bias, 1e-5, ops)
    assert y.dtype == dtype and y.is_contiguous(memory_format=cl)
    grad = torch.randn_like(y)
    y.backward(grad)
    leaves = [x, weight, bias] + ([z] if residual is not None else [])
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    ref = _reference(x, residual, weight, bias, ops)
    ref.backward(grad.float())
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.float(), ref, atol=tol, rtol=tol)
    for a, b in zip(got, [t.grad for t in leaves], strict=True):
        torch.testing.assert_close(a.float(), b.float(), atol=tol * 10, rtol=tol)
    torch.testing.assert_close(mean, x.float().mean(dim=(0, 2, 3)), atol=tol, rtol=tol)
    variance = x.float().var(dim=(0, 2, 3), unbiased=False)
    torch.testing.assert_close(invstd, (variance + 1e-5).rsqrt(), atol=tol, rtol=tol)


@needs_cuda
@pytest.mark.cuda
def test_the_fused_operators_pass_pytorchs_custom_op_checks_on_cuda() -> None:
    """Schema, fake kernels and autograd registration against cuDNN's kernels.

    Not opcheck's AOT tests: they compare every output bitwise, and the reserve space holds bytes cuDNN
    never writes (padding of its ReLU mask). Training through AOTAutograd and inductor is held to eager
    PyTorch by the compiled test below.
    """
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    cl = torch.channels_last
    x = torch.randn(4, 8, 5, 5, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    z = torch.randn(4, 8, 5, 5, device="cuda", dtype=torch.float16).contiguous(memory_format=cl)
    weight = torch.randn(8, device="cuda", requires_grad=True)
    bias = torch.randn(8, device="cuda", requires_grad=True)
    torch.library.opcheck(fused.fused_batch_norm, (x, z, weight, bias, 1e-5, api.OPS_BN_ADD_RELU), test_utils=utils)
    y, mean, invstd, reserve = fused.fused_batch_norm(x, z, weight, bias, 1e-5, api.OPS_BN_ADD_RELU)
    saved = (weight.detach(), bias.detach(), mean, invstd, reserve)
    args = (torch.randn_like(y), x, y, *saved, 1e-5, api.OPS_BN_ADD_RELU)
    torch.library.opcheck(fused.fused_batch_norm_backward, args, test_utils=utils)


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_compiled_fused_resnet_trains_like_the_original_under_autocast(dtype: torch.dtype, mode: str) -> None:
    """Inductor compiles around the operators (and CUDA graphs capture them) without changing the training.

    The compiled fused model is held to the same fused model run eagerly. Four SGD steps in 16 bits drift a few
    per cent between any two orderings of the arithmetic (on an H100 in bfloat16, torch.compile of the unfused
    model is 3.6% from eager at step 4), so eager PyTorch is the reference only for the first step."""
    reason = fused.refusal(torch.device("cuda"), dtype)
    if reason is not None:
        pytest.skip(f"cuDNN refuses {dtype}: {reason}")
    torch.manual_seed(0)
    cl = torch.channels_last
    ref = torchvision.models.resnet18(num_classes=10).cuda().to(memory_format=cl)
    eager, _ = fused.fuse_model(copy.deepcopy(ref))
    model, _ = fused.fuse_model(copy.deepcopy(ref))
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=False, mode=mode)
    inputs = [torch.randn(16, 3, 64, 64, device="cuda").contiguous(memory_format=cl) for _ in range(4)]

    def trace(module: nn.Module, params: Any) -> list[float]:
        optimizer = torch.optim.SGD(params, lr=0.01)
        out = []
        for x in inputs:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=dtype):
                loss = module(x).float().square().mean()
            loss.backward()
            optimizer.step()
            out.append(loss.item())
        return out

    # AOTAutograd's cache does not key on the autocast dtype (torch 2.11): the other dtype's graph would be reused.
    with torch._functorch.config.patch(enable_autograd_cache=False):
        got = trace(compiled, model.parameters())
    want = trace(eager, eager.parameters())
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=0.0, rtol=1e-2)
    assert trace(ref, ref.parameters())[0] == pytest.approx(want[0], rel=1e-2)
    torch.testing.assert_close(
        model.get_buffer("layer4.1.bn2.running_var"), eager.get_buffer("layer4.1.bn2.running_var"), atol=1e-2, rtol=1e-2
    )
