"""Bounds on what a suite may ask for: counts that multiply work are capped so that a typo
(``processes = 1000000``) is refused in one line instead of running for a year.

Every bound is far above any sensible suite; the matrix bound alone can be lifted
(``ampsuite run --allow-large``), because a large matrix is a legitimate, if rare, wish.
"""

from __future__ import annotations

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_CELLS",
    "MAX_CPU_THREADS",
    "MAX_GPUS",
    "MAX_NESTING",
    "MAX_PROCESSES",
    "MAX_SEED",
    "MAX_SPEC_STEPS",
    "MAX_TIMEOUT",
]

MAX_PROCESSES = 64
"""``measure.processes``: fresh worker processes per cell, one after another."""
MAX_SPEC_STEPS = 100_000
"""``measure.warmup_steps``, ``min_steps``, ``max_steps`` and ``numerics_steps``."""
MAX_TIMEOUT = 7 * 24 * 3600.0
"""``suite.timeout`` and ``measure.max_seconds``: a week, in seconds."""
MAX_BATCH_SIZE = 2**31 - 1
"""Batch sizes: tensors index samples with 32-bit counts in places."""
MAX_GPUS = 1024
"""World sizes of a data-parallel cell (``gpus``)."""
MAX_CPU_THREADS = 4096
"""``suite.cpu_threads``."""
MAX_SEED = 2**63 - 1
"""``suite.seed`` (torch takes a 64-bit seed)."""
MAX_CELLS = 5_000
"""Cells one suite may expand to without ``--allow-large``; the default suites have under a hundred."""
MAX_NESTING = 32
"""Arrays and tables inside each other in a suite file; the deepest a suite needs (a list-of-lists axis of a
table option) is under ten."""

WORK_BOUND = "ampsuite's bound on the work one suite asks for"
"""Why most upper bounds exist, said in their errors: no suite needs more, and a typo's 10**9 steps would run
for weeks."""
FRACTION = "a fraction: 1 is 100%"
"""Why a fraction's upper bound exists, said in its error."""
