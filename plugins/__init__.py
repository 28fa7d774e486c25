"""ampsuite's built-in plugins.

The core reaches this package only through :data:`BUILTIN_PLUGINS`, and loads
each module exactly like a third-party plugin. Nothing outside ampsuite should
import it.
"""

BUILTIN_PLUGINS: tuple[str, ...] = (
    "plugins.workloads.toy",
    "plugins.techniques.noop",
    "plugins.probes.memory",
    "plugins.faults",
)
