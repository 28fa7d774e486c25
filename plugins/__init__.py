"""ampsuite's built-in plugins.

The core reaches this package only through :data:`BUILTIN_PLUGINS`, and loads
each module exactly like a third-party plugin. Nothing outside ampsuite should
import it.
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
    "plugins.techniques.precision_flags",
    "plugins.techniques.compile",
    "plugins.techniques.fused_optimizer",
    "plugins.probes.memory",
    "plugins.probes.flops",
    "plugins.probes.tensorcores",
    "plugins.probes.clocks",
    "plugins.faults",
)
