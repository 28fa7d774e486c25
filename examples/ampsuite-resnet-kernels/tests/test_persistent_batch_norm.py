"""persistent-batch-norm: the torch.fx rewrite of BatchNorm2d -> ReLU, and the persistent kernels' arithmetic.

On a CPU the rewritten modules fall back to PyTorch's batch norm and ReLU, so these tests hold the rewrite
(which pairs, parameter identity, fallbacks, skips) to the model it rewrites. The kernels themselves run under
Triton's interpreter in a process of their own, launched twice a pass (statistics, then apply) where a GPU runs
one launch with a barrier between the two: the barrier is what only the GPU runs (reports/h200/bn_persistent.py).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torchvision
from ampsuite import SkipCell
from ampsuite.testing import SuiteFileError
from torch import nn

from ampsuite_resnet_kernels import _persistent_batch_norm as impl
from ampsuite_resnet_kernels import cudnn_batch_norm, persistent_batch_norm
from kernels_testing import resnet_step, train

TECHNIQUE = persistent_batch_norm.ampsuite_techniques()[0]
OPTIONS = persistent_batch_norm.PersistentBatchNormOptions
PLUGINS = [persistent_batch_norm, cudnn_batch_norm]


def test_declaration_and_options() -> None:
    assert TECHNIQUE.name == "persistent-batch-norm" and TECHNIQUE.order == 42
    assert TECHNIQUE.requires == frozenset({"cuda", "channels-last"})
    assert TECHNIQUE.conflicts == frozenset({"cudnn-batch-norm", "fp32-islands"})
    assert OPTIONS().min_mb == 256.0
    assert TECHNIQUE.requires_traits == frozenset({"model"})


def test_the_matrix_skips_it_on_cpu_and_without_channels_last_with_the_reason(ampsuite_run) -> None:
    suite = {
        "workloads": {"resnet": {"batch_size": 4, "depth": 18}},
        "combinations": {
            "bn": ["amp-fp16", "channels-last", "persistent-batch-norm"],
            "contiguous": ["amp-fp16", "persistent-batch-norm"],
        },
    }
    result = ampsuite_run(suite, plugins=PLUGINS, keyword="not fp32")
    result.assert_status(
        "resnet/bn/*", "skipped", reason="^persistent-batch-norm needs a CUDA device; this run is on cpu$"
    )
    # pruned before anything runs, so that tune keeps it in a path's pool until channels-last has joined
    result.assert_status(
        "resnet/contiguous/*",
        "skipped",
        reason="^persistent-batch-norm requires channels-last in the same combination$",
    )
    assert all("phase" not in r["evidence"] for r in result.doc["cells"])  # decided at expansion, not in a worker


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_mb": -1}, r"min_mb: expected a number >= 0, got -1\.0"),
        ({"num_warps": 2}, "num_warps: expected one of 4, 8, got 2"),
        ({"num_warps": 8.0}, "num_warps: expected one of 4, 8, got 8.0"),
    ],
)
def test_bad_options_are_refused_with_their_key(ampsuite_run, options: dict[str, object], message: str) -> None:
    suite = {
        "workloads": {"resnet": {"batch_size": 4, "depth": 18}},
        "combinations": {"bn": ["channels-last", "persistent-batch-norm"]},
        "techniques": {"persistent-batch-norm": options},
    }
    with pytest.raises(SuiteFileError, match=rf"techniques\.persistent-batch-norm\.{message}$"):
        ampsuite_run(suite, plugins=PLUGINS)


def test_resnet50_takes_the_stem_and_every_block_relu_and_keeps_its_parameters() -> None:
    """The stem and bn1, bn2 of each of 16 blocks; bn3 meets the residual add and the downsample norms no ReLU."""
    model = torchvision.models.resnet50()
    params = {n: id(p) for n, p in model.named_parameters()}
    buffers = {n: id(b) for n, b in model.named_buffers()}
    rewritten, replaced = impl.replace(model, 0)
    assert len(replaced) == 33 and "bn1" in replaced and "layer4.2.bn2" in replaced
    assert not any(name.endswith(("bn3", "downsample.1")) for name in replaced)
    assert {n: id(p) for n, p in rewritten.named_parameters()} == params
    assert {n: id(b) for n, b in rewritten.named_buffers()} == buffers
    kinds = [type(m) for m in rewritten.modules() if isinstance(m, nn.BatchNorm2d)]
    assert kinds.count(impl.PersistentBatchNormReLU) == 33 and kinds.count(nn.BatchNorm2d) == 20


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_on_a_cpu_the_rewritten_resnet_trains_exactly_like_the_original(memory_format: torch.memory_format) -> None:
    torch.manual_seed(0)
    ref = torchvision.models.resnet18(num_classes=10).to(memory_format=memory_format)
    model, _ = impl.replace(copy.deepcopy(ref), 0)
    inputs = [torch.randn(4, 3, 32, 32).contiguous(memory_format=memory_format) for _ in range(3)]
    x = inputs[0]
    assert not model.get_submodule("bn1").takes(model.get_submodule("conv1")(x))  # no Triton on this CPU
    (ref_out, ref_grads), (out, grads) = train(ref, inputs), train(model, inputs)
    for a, b in [*zip(ref_out, out, strict=True), *zip(ref_grads, grads, strict=True)]:
        torch.testing.assert_close(b, a, atol=0, rtol=0)
    assert int(model.get_buffer("layer1.0.bn1.num_batches_tracked")) == 3


def test_a_module_takes_the_kernels_only_in_training_on_large_enough_channels_last_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # what makes a CPU tensor one the kernels could take
    module = impl.PersistentBatchNormReLU(nn.BatchNorm2d(8), min_bytes=4 * 8 * 6 * 6 * 4)
    x = torch.randn(4, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    assert module.takes(x)
    assert not module.takes(x[:3])  # below min_bytes
    assert not module.takes(x.contiguous())
    assert not module.takes(x.double())
    module.eval()
    assert not module.takes(x)
    untracked = impl.PersistentBatchNormReLU(nn.BatchNorm2d(8, track_running_stats=False), min_bytes=0)
    assert not untracked.takes(x)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not impl.PersistentBatchNormReLU(nn.BatchNorm2d(8), min_bytes=0).takes(x)


def test_pairs_it_cannot_take_stay_as_they_are() -> None:
    class Shared(nn.Module):
        """A batch norm called twice, and one whose output a ReLU and a sum both read."""

        def __init__(self) -> None:
            super().__init__()
            self.twice, self.read_twice = nn.BatchNorm2d(4), nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.twice(torch.relu(self.twice(x))))
            z = self.read_twice(y)
            return torch.relu(z) + z

    model, replaced = impl.replace(Shared(), 0)
    assert replaced == []
    assert all(type(m) is nn.BatchNorm2d for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def test_apply_rewrites_the_model_and_says_so_and_skips_with_the_reason() -> None:
    step = resnet_step()
    step = TECHNIQUE.apply(step, OPTIONS(min_mb=1.5, num_warps=8))
    # the stem, and bn1 of 8 basic blocks
    assert step.notes["persistent_batch_norm"] == {"modules": 9, "min_mb": 1.5, "num_warps": 8}
    assert step.model is not None
    stem = step.model.get_submodule("bn1")
    assert isinstance(stem, impl.PersistentBatchNormReLU) and stem.min_bytes == 1_500_000 and stem.num_warps == 8

    bare = resnet_step()
    bare.model = None
    with pytest.raises(SkipCell, match="needs a workload with a model"):
        TECHNIQUE.apply(bare, OPTIONS())
    plain = resnet_step()
    plain.model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with pytest.raises(SkipCell, match="found no BatchNorm2d followed by a ReLU"):
        TECHNIQUE.apply(plain, OPTIONS())

    class Untraceable(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x  # control flow on a value: torch.fx cannot trace it

    odd = resnet_step()
    odd.model = Untraceable()
    with pytest.raises(SkipCell, match=r"torch\.fx cannot trace this model: TraceError"):
        TECHNIQUE.apply(odd, OPTIONS())


# The kernels under Triton's interpreter, in a process of their own: triton.jit reads TRITON_INTERPRET when a
# kernel is defined, and this process may have imported Triton already.
KERNEL_CHECK = """
import copy
import torch, torchvision
from torch import nn
import torch.nn.functional as F
from ampsuite_resnet_kernels import _persistent_batch_norm as impl
from ampsuite_resnet_kernels import _persistent_bn_kernels as kernels

torch.manual_seed(0)
calls = []
bn_relu = kernels.bn_relu
kernels.bn_relu = lambda *a: calls.append(a[7]) or bn_relu(*a)

# shapes: one tile, several splits, channels past a tile and not a multiple of it, a last split short of rows
for shape in [(2, 8, 5, 3), (4, 64, 7, 7), (3, 70, 4, 4), (8, 16, 12, 12), (2, 130, 3, 5)]:
    c = shape[1]
    ref = nn.BatchNorm2d(c)
    nn.init.normal_(ref.weight, 1.0, 0.2); nn.init.normal_(ref.bias, 0.0, 0.2)
    module = impl.PersistentBatchNormReLU(copy.deepcopy(ref), min_bytes=0)
    # a mean far from zero against the spread: sums of x and x^2 in float32 would lose the variance here
    x = (1000 + torch.randn(shape, dtype=torch.float64)).float().contiguous(memory_format=torch.channels_last)
    grad = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    a, b = x.clone().requires_grad_(), x.double().requires_grad_()
    out = module(a)
    z = F.batch_norm(b, ref.running_mean.double(), ref.running_var.double(), ref.weight.double(),
                     ref.bias.double(), training=True, momentum=0.1, eps=ref.eps)
    exact = F.relu(z)
    out.backward(grad)
    # the ReLU's mask is the kernel's: where z is 0 within float32 rounding the two masks may differ, and there
    # the gradient by a whole dy, which is rounding, not the batch norm's arithmetic this holds to float64
    z.backward(grad.double() * (out.detach() > 0))
    assert out.is_contiguous(memory_format=torch.channels_last)
    for name, got, want in [("y", out, exact), ("dx", a.grad, b.grad)]:
        err = float((got.double() - want).abs().max() / want.abs().max())
        assert err < 1e-4, (shape, name, err)
    assert int(module.num_batches_tracked) == 1

# a ResNet's gradients and running statistics are the original's, its batch norm + ReLU pairs through the kernels
ref = torchvision.models.resnet18(num_classes=10).to(memory_format=torch.channels_last)
model, replaced = impl.replace(copy.deepcopy(ref), 0, 8)
calls.clear()
x = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)
for model_ in (ref, model):
    (model_(x) ** 2).mean().backward()
assert calls == [8] * len(replaced) and len(replaced) == 9, calls  # the stem and bn1 of 8 basic blocks, 8 warps
# relative in the norm: an element at z = 0 within float32 rounding may take the other side of a ReLU in either
for (name, p), q in zip(ref.named_parameters(), model.parameters(), strict=True):
    assert float((q.grad - p.grad).norm() / p.grad.norm()) < 1e-3, name
for (name, p), q in zip(ref.named_buffers(), model.buffers(), strict=True):
    torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-4, msg=name)
print("ok")
"""


@pytest.mark.slow
def test_the_kernels_compute_batch_norm_and_relu_and_train_a_resnet_like_pytorch() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    script = textwrap.dedent(KERNEL_CHECK)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_under_torch_compile_the_kernels_run_outside_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launched by Triton, whose compile of the kernel sizes the grid, never by inductor's copy of it: inside the
    graph ResNet-50's cell with the stem through the kernels gave no step within 422 s on an H200, outside it ran."""
    pytest.importorskip("triton")
    from ampsuite_resnet_kernels import _persistent_bn_kernels as kernels

    # the kernels' operator as an opaque one with a fake: Triton's interpreter cannot run on dynamo's fake tensors
    @torch.library.custom_op("ampsuite_test::bn_relu", mutates_args=())
    def bn_relu(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, num_warps: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        mean = x.mean((0, 2, 3))
        var = x.var((0, 2, 3), unbiased=False)
        return torch.relu(x), mean, (var + eps).rsqrt(), var

    @bn_relu.register_fake
    def _(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, num_warps: int
    ) -> tuple[torch.Tensor, ...]:
        stats = x.new_empty(x.shape[1], dtype=torch.float32)
        return torch.empty_like(x), stats, stats.clone(), stats.clone()

    monkeypatch.setattr(kernels, "persistent_bn_relu", bn_relu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the CPU takes the kernels' path, as the tests' interpreter runs do
    layers = [m for _ in range(3) for m in (nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())]
    model, replaced = impl.replace(nn.Sequential(*layers).to(memory_format=torch.channels_last), 0)
    assert len(replaced) == 3
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    assert all(m.takes(x) for m in model.modules() if isinstance(m, impl.PersistentBatchNormReLU))
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 3, [b.reason for b in explained.break_reasons]  # one a call, no more
    assert all("disable" in b.reason for b in explained.break_reasons), [b.reason for b in explained.break_reasons]
    assert not any("ampsuite_test" in str(g.code) for g in explained.graphs)
    # and the compiled model computes what the eager one does, the calls run between its graphs
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="aot_eager")(x), model(x))


# An H200's SM: 65,536 registers, 228 KB of shared memory, 2,048 threads.
H200_SM = {"regs_per_sm": 65536, "shared_per_sm": 233472, "threads_per_sm": 2048}


@pytest.mark.parametrize(
    ("n_regs", "shared", "num_warps", "blocks", "from_raw_figures"),
    [
        (170, 1024, 4, 2, 3),  # 5,440 registers a warp are 5,632 as allocated
        (255, 1024, 4, 2, 2),  # the 128 x 64 tile (255 registers, Triton 3.8 for sm_90)
        (32, 1024, 4, 16, 16),  # threads bound
        (16, 0, 1, 32, 64),  # at most 32 blocks an SM
        (32, 57600, 4, 3, 4),  # 1 KB a block the driver keeps
    ],
)
def test_programs_resident_at_once_are_counted_as_cuda_allocates(
    n_regs: int, shared: int, num_warps: int, blocks: int, from_raw_figures: int
) -> None:
    """One program more than the GPU holds at once and the grid barrier waits forever."""
    pytest.importorskip("triton")
    from ampsuite_resnet_kernels import _persistent_bn_kernels as kernels

    assert kernels.blocks_per_sm(n_regs, shared, num_warps, **H200_SM) == blocks
    raw = min(
        H200_SM["regs_per_sm"] // (n_regs * 32 * num_warps),
        H200_SM["shared_per_sm"] // shared if shared else 64,
        H200_SM["threads_per_sm"] // (32 * num_warps),
    )
    assert raw == from_raw_figures


@pytest.mark.parametrize("rewrite", ["persistent", "cudnn-fuse"])
def test_other_techniques_modules_stay_whole_calls(rewrite: str) -> None:
    """maxpool-offsets' pool iterates over its window, which torch.fx cannot trace; it holds no batch norm, so the
    rewrites leave it one call (traced whole, every ResNet-50 cell with both techniques would be a skip)."""
    from ampsuite_resnet_kernels import _cudnn_fused, _maxpool_offsets

    torch.manual_seed(0)
    ref = torchvision.models.resnet18(num_classes=10)
    _maxpool_offsets.replace(ref, "inline")
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(ref)
    if rewrite == "persistent":
        model, replaced = impl.replace(copy.deepcopy(ref), 0)
        assert len(replaced) == 9
    else:
        model, kinds = _cudnn_fused.fuse_model(copy.deepcopy(ref))
        assert len(kinds) == 20
    assert type(model.get_submodule("maxpool")) is _maxpool_offsets.OffsetMaxPool2d
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x), ref(x), atol=1e-5, rtol=1e-5)
