"""Layer 3, the results file: versioned strict JSON, validated on load, written atomically after every cell,
locked for the whole run.

The public names are re-exported here; the modules behind them are private.
"""

from ampsuite.results import document as _document
from ampsuite.results import lock as _lock
from ampsuite.results import outputs as _outputs
from ampsuite.results import store as _store
from ampsuite.results.document import *  # noqa: F403
from ampsuite.results.lock import *  # noqa: F403
from ampsuite.results.outputs import *  # noqa: F403
from ampsuite.results.store import *  # noqa: F403

__all__ = [*_store.__all__, *_lock.__all__, *_document.__all__, *_outputs.__all__]
