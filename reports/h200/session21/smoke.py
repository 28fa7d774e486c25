"""persistent-batch-norm under torch.compile (reduce-overhead) on a GPU, against the eager model: a minute's check
before the ResNet-50 cells spend their compiles on it."""

import copy
import sys

import torch
from torch import nn

sys.path.insert(0, ".")
from plugins.techniques import _persistent_batch_norm as impl

torch.manual_seed(0)
ref = nn.Sequential(
    nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
    nn.Conv2d(64, 128, 3, 1, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
).cuda().to(memory_format=torch.channels_last)  # fmt: skip
model, replaced = impl.replace(copy.deepcopy(ref), 0)
compiled = torch.compile(model, mode="reduce-overhead")
x = torch.randn(32, 3, 112, 112, device="cuda").contiguous(memory_format=torch.channels_last)
for step in range(4):
    for m in (ref, compiled):
        m.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.float16):
            out = m(x)
        (out.float() ** 2).mean().backward()
    worst = max(
        float((q.grad - p.grad).norm() / p.grad.norm())
        for p, q in zip(ref.parameters(), model.parameters(), strict=True)
    )
    stats = max(float((q - p).abs().max()) for p, q in zip(ref.buffers(), model.buffers(), strict=True))
    print(f"step {step}: gradients {worst:.1e} from eager, running statistics {stats:.1e}", flush=True)
assert worst < 2e-2 and stats < 1e-2, (worst, stats)
print("smoke ok", replaced)
