"""Layer 3, the results file: versioned strict JSON, validated on load, written atomically after every cell,
locked for the whole run.

The public names are re-exported here; the modules behind them are private.
"""

from suite.results import lock as _lock
from suite.results import store as _store
from suite.results.lock import *  # noqa: F403
from suite.results.store import *  # noqa: F403

__all__ = [*_store.__all__, *_lock.__all__]
