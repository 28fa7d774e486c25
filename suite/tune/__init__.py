"""Layer 5½, ``ampsuite tune``: search the technique space a suite declares for the fastest trustworthy recipe.

Every candidate is an ordinary cell measured by :func:`ampsuite.run.runner.run_record`
in its own worker; nothing here measures anything. Only the CLI imports this package.
See docs/tune.md for the search, the budget and the outputs.
"""

from ampsuite.tune.budget import Budget
from ampsuite.tune.outputs import recipe_toml, tune_markdown
from ampsuite.tune.search import TuneConfig, tune
from ampsuite.tune.trust import numerics_reason, untrusted_reason

__all__ = ["Budget", "TuneConfig", "numerics_reason", "recipe_toml", "tune", "tune_markdown", "untrusted_reason"]
