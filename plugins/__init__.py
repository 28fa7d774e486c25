"""ampsuite's built-in plugins.

The core reaches this package only through :data:`BUILTIN_PLUGINS`, and loads
each module exactly like a third-party plugin. Nothing outside ampsuite should
import it.

Two built-ins are opt-in, loaded only with ``-p MODULE`` or ``AMPSUITE_PLUGINS``
(as pytest keeps its pytester plugin opt-in): ``plugins.probes.kernels``, whose
profiler taxes the launches it sees, and ``plugins.faults``, whose fault-injection
techniques exist to test ampsuite and are not offered to its users.
"""

BUILTIN_PLUGINS: tuple[str, ...] = (
    "plugins.workloads.toy",
    "plugins.workloads.cnn",
    "plugins.workloads.transformer",
    "plugins.workloads.vit",
    "plugins.workloads.gemm",
    "plugins.techniques.noop",
    "plugins.techniques.amp",
    "plugins.techniques.islands",
    "plugins.techniques.cuda_graphs",
    "plugins.techniques.loading",
    "plugins.techniques.channels_last",
    "plugins.techniques.patch_gemm",
    "plugins.techniques.precision_flags",
    "plugins.techniques.compile",
    "plugins.techniques.fused_optimizer",
    "plugins.techniques.fp8",
    "plugins.techniques.grad_accumulation",
    "plugins.techniques.half_weights",
    "plugins.techniques.inference",
    "plugins.techniques.int8",
    "plugins.techniques.tensorrt",
    "plugins.probes.memory",
    "plugins.probes.flops",
    "plugins.probes.tensorcores",
    "plugins.probes.clocks",
    "plugins.probes.graphs",
    "plugins.executors.local",
    "plugins.executors.slurm",
)

BUILTIN_IMPLEMENTATIONS: tuple[str, ...] = (
    "plugins.workloads._toy",
    "plugins.workloads._cnn",
    "plugins.workloads._transformer",
    "plugins.workloads._vit",
    "plugins.workloads._gemm",
    "plugins.workloads._optim",
    "plugins.techniques._amp",
    "plugins.techniques._islands",
    "plugins.techniques._cuda_graphs",
    "plugins.techniques._loading",
    "plugins.techniques._channels_last",
    "plugins.techniques._patch_gemm",
    "plugins.techniques._precision_flags",
    "plugins.techniques._compile",
    "plugins.techniques._fp8",
    "plugins.techniques._grad_accumulation",
    "plugins.techniques._half_weights",
    "plugins.techniques._inference",
    "plugins.techniques._int8",
    "plugins.techniques._tensorrt",
    "plugins.probes._flops",
    "plugins.probes._tensorcores",
    "plugins._faults",
)
"""The torch-dependent halves of the built-ins (each registration module imports its own on first
use, so that registering them, as ``ampsuite list`` does, imports no torch). The runner's fork
server preloads them: a worker is a fork that has them already, and a cell's memory limit is
room above them."""

CUDA_ONLY_IMPLEMENTATIONS: tuple[str, ...] = ()
"""Halves that only a CUDA cell imports, and so are not preloaded: a module that imports Triton (about a second,
and CPU-only builds of torch may lack it) for kernels no CPU cell runs belongs here. A CUDA cell has no memory
limit for an import in the worker to eat into. No built-in has one."""
