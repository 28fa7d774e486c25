"""Fault injection: techniques that make their cell fail in a chosen way.

Used by ampsuite's own tests and by anyone checking that a harness keeps every
other cell's record intact. ``inject-fault`` takes the fault as its ``kind``
option; because technique options hold for a whole suite, every kind is also
registered as its own technique, ``fault-KIND`` (``fault-nan``, ``fault-oom``,
...), so one suite can interleave many faults with healthy cells.

A fault fires at a chosen place: while the technique is applied (``at =
"apply"``) or in every call of the step after ``after_steps`` healthy ones
(``at = "step"``). Most kinds wrap the composed step; three act inside the
step's phases, where a wrapper cannot reach:

* ``graph-capture`` wraps ``forward_backward``, which is what ``cuda-graphs``
  captures (``fault-graph-capture`` has order 80, before cuda-graphs' 90);
* ``scale-collapse`` wraps the loss function, so the overflow happens inside
  the backward pass that the GradScaler checks;
* ``corrupt`` leaves the step healthy and puts values that are not JSON data
  into the cell's notes, so the worker sends back a malformed result that the
  runner must refuse.

What each kind should end as (the contract the tests check):

    raise           failed (InjectedFault, with traceback)
    abort, segfault crashed (SIGABRT, SIGSEGV)
    exit            crashed (exit code 3, no result)
    kill-launcher   crashed (the rank's launcher SIGKILLed: the worker, or one node of a multi-node cell)
    hang            timeout
    delay           passed (sleeps ``seconds`` once, then the cell goes on: a slow cell, for a parent
                    to be killed while the cell runs)
    oom             oom (allocates 256 MiB chunks at once until it runs out)
    leak            oom (leaks 64 MiB in the first faulty step, twice as much in each next one)
    nan             passed; numerics record the step of the non-finite loss
    corrupt         failed: "malformed result from worker: ..."
    scale-collapse  passed; numerics record the step where the loss scale collapsed
    cuda-assert     failed (device-side assert; CUDA only for fault-cuda-assert)
    illegal-address failed on CUDA (illegal memory access, a sticky error); crashed (SIGSEGV) on a CPU
    graph-capture   failed (cuda-graphs' capture refuses the host sync)

In a data-parallel cell (suite-file ``gpus`` > 1) every rank applies the
fault; the ``fault-KIND`` techniques take ``rank`` to fire in that rank alone
(read from the ``RANK`` variable the launcher sets; a single-process cell is
rank 0), so the other ranks are left waiting in a collective, as when one GPU
of a real job fails.

On a CPU, ``oom`` and ``leak`` need ``suite.memory_limit_gb`` so that the
worker's address-space limit, not the host's OOM killer, ends them. ``leak``
reserves address space without touching it, so a CPU run without a limit ends
at ``oom_limit_gb`` with a failed cell rather than exhausting the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ampsuite import Technique, hookimpl, lazy

KINDS: dict[str, str] = {
    "raise": "raises InjectedFault",
    "abort": "the worker aborts (SIGABRT)",
    "segfault": "the worker gets SIGSEGV",
    "exit": "the worker exits with code 3 without a result",
    "kill-launcher": (
        "a data-parallel rank SIGKILLs the process that launched it (the worker, or its node's process in a "
        "multi-node cell); in a one-process cell the worker SIGKILLs itself"
    ),
    "hang": "the step sleeps forever",
    "delay": "sleeps `seconds` once (while applying, or in the first faulty step), then the cell passes",
    "launch-hang": "the step launches small kernels forever, syncing now and then (a hang inside a launch loop)",
    "oom": "allocates memory at once until it runs out",
    "leak": "leaks more memory in every step until it runs out",
    "nan": "NaN parameters and loss",
    "corrupt": "the worker sends back a result that is not JSON data",
    "scale-collapse": "gradients overflow in every step, so the GradScaler's scale collapses (needs amp-fp16)",
    "cuda-assert": "a device-side assert: a sticky CUDA error",
    "illegal-address": "a kernel reads an unmapped address (CUDA: illegal memory access; CPU: SIGSEGV)",
    "graph-capture": "a host sync inside the step, which a CUDA graph capture refuses (needs cuda-graphs)",
}


STEP_ONLY = frozenset({"nan", "leak", "scale-collapse", "graph-capture"})
"""Kinds that only make sense inside a step."""


OOM_CHUNK_BYTES = 256 * 2**20


LEAK_FIRST_BYTES = 64 * 2**20
"""What ``leak`` keeps in its first faulty step; each later step keeps twice as much as the one before,
so any device runs out within a dozen or so steps, while several steps are still seen to grow."""


OVERFLOW_FACTOR = 2.0**120
"""What ``scale-collapse`` multiplies the loss gradient by: past float32's range at the initial scale and
past float16's at any scale above 2**-104, so every step overflows while the GradScaler halves its scale."""


BAD_ADDRESS = 0x1000
"""An address below any mapping (Linux's mmap_min_addr, CUDA's reserved low range)."""


CORRUPTION: dict[str, Any] = {"not_json": {1, 2, 3}, "not_finite": float("inf")}
"""What ``corrupt`` puts into the cell's notes: a set (not JSON) and an infinity (not allowed in results)."""


def _check_at(kind: str, at: str) -> None:
    if at == "apply" and kind in STEP_ONLY:
        raise ValueError(f"at='apply' is not possible with kind={kind!r}: that fault happens inside a step")


@dataclass(frozen=True)
class _Firing:
    """When a fault fires and how far it goes: the options every fault technique takes."""

    at: Literal["apply", "step"] = field(default="step", metadata={"help": "when: while applying, or in a step"})
    after_steps: int = field(default=0, metadata={"help": "with at='step': healthy steps before the fault", "ge": 0})
    oom_limit_gb: float = field(
        default=64.0, metadata={"help": "for oom and leak: give up (a failed cell) past this many GiB", "gt": 0}
    )
    seconds: float = field(default=5.0, metadata={"help": "for delay: how long it sleeps, once", "ge": 0})


@dataclass(frozen=True)
class FaultOptions(_Firing):
    """Options of ``inject-fault``."""

    kind: str = field(default="raise", metadata={"help": "what goes wrong", "choices": tuple(KINDS)})

    def __post_init__(self) -> None:
        _check_at(self.kind, self.at)


@dataclass(frozen=True)
class KindOptions(_Firing):
    """Options of the ``fault-KIND`` techniques: those of ``inject-fault`` with the kind fixed."""

    kind: ClassVar[str] = "raise"
    rank: int = field(
        default=-1,
        metadata={"help": "data-parallel cells: fire in this rank only (RANK); -1: in every rank", "ge": -1},
    )

    def __post_init__(self) -> None:
        _check_at(self.kind, self.at)


class InjectedFault(RuntimeError):
    """The error raised by kind='raise' (and by oom/leak that never ran out of memory)."""


def _kind_technique(kind: str) -> Technique:
    options = type(f"{kind.title().replace('-', '')}FaultOptions", (KindOptions,), {"kind": kind, "__doc__": None})
    requires = {
        "cuda-assert": frozenset({"cuda"}),
        "graph-capture": frozenset({"cuda", "cuda-graphs"}),
        "scale-collapse": frozenset({"amp-fp16"}),
    }.get(kind, frozenset())
    return Technique(
        name=f"fault-{kind}",
        summary=f"inject-fault with kind={kind!r}: {KINDS[kind]}",
        apply=lazy("ampsuite.plugins._faults:apply"),
        options=options,
        # graph-capture must be inside what cuda-graphs (order 90) captures.
        order=80 if kind == "graph-capture" else 99,
        requires=requires,
    )


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="inject-fault",
            summary="makes the cell fail on purpose (" + ", ".join(KINDS) + ")",
            apply=lazy("ampsuite.plugins._faults:apply"),
            options=FaultOptions,
            order=99,
        ),
        *(_kind_technique(kind) for kind in KINDS),
    ]
