"""Layer 5, analysis: figures derived from results documents (pure functions; no torch)."""

from suite.analysis.derived import *  # noqa: F403
from suite.analysis.derived import __all__ as __all__
