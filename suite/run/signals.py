"""A run's signals: SIGTERM (a scheduler's, scancel's) ends a run as Ctrl-C does."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

__all__ = ["RunSignals", "sigterm_interrupts"]


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM raises KeyboardInterrupt like Ctrl-C, so both end a run the same way."""
    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class RunSignals:
    """The signal handling of one run: SIGTERM acts as Ctrl-C; after the first
    interruption both are ignored, so that an impatient second Ctrl-C cannot stop
    the records of the remaining cells (and the run's end) from being written."""

    def __init__(self) -> None:
        self.previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        signal.signal(signal.SIGTERM, _sigterm)

    def defer(self) -> None:
        for sig in self.previous:
            signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
