"""ampsuite's built-in plugins.

Each is registered in ampsuite's own ``pyproject.toml`` under the entry-point
group ``ampsuite``, exactly as a third-party plugin is, and its records name
their torch-dependent implementation with :func:`ampsuite.lazy`. Nothing
outside ampsuite should import this package.

Two built-ins are opt-in, loaded only with ``-p MODULE`` or ``AMPSUITE_PLUGINS``
(as pytest keeps its pytester plugin opt-in): ``ampsuite.plugins.probes.kernels``,
whose profiler taxes the launches it sees, and ``ampsuite.plugins.faults``, whose
fault-injection techniques exist to test ampsuite and are not offered to its users.
"""
