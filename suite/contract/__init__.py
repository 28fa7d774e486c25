"""Layer 0, the contract: what the core and plugins agree on.

Errors, the plugin records (workloads, techniques, probes and their contexts),
the train step, and the wire format (cells, payloads, outcomes, records,
statuses). Imports nothing of ``suite`` outside this package.
"""
