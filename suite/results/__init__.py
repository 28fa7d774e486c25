"""Layer 3, the results file: versioned strict JSON, validated on load, written atomically after every cell.

The public names are re-exported here; the modules behind them are private.
"""

from suite.results.store import *  # noqa: F403
from suite.results.store import __all__ as __all__
