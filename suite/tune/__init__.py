"""Layer 5, ``ampsuite tune``: search the technique space a suite declares for the fastest trustworthy recipe.

Every candidate is an ordinary cell measured by :func:`ampsuite.run.runner.run_record`
in its own worker; nothing here measures anything. Only the CLI imports this package.
The search's records (steps and their decisions, winners, ablation rows, the summary) are
:mod:`ampsuite.contract.tunerecords` and :mod:`ampsuite.contract.tunesteps`, re-exported here.
See docs/tune.md for the search, the budget and the outputs.
"""

from ampsuite.contract.tunerecords import AblationRow, RowKind, TuneSummary, Winner, WorkloadTune
from ampsuite.contract.tunesteps import Decision, Phase, Step, Verdict
from ampsuite.tune.budget import Budget
from ampsuite.tune.outputs import recipe_toml, tune_markdown
from ampsuite.tune.search import TuneConfig, tune, tune_summary
from ampsuite.tune.trust import numerics_reason, untrusted_reason

__all__ = [
    "AblationRow",
    "Budget",
    "Decision",
    "Phase",
    "RowKind",
    "Step",
    "TuneConfig",
    "TuneSummary",
    "Verdict",
    "Winner",
    "WorkloadTune",
    "numerics_reason",
    "recipe_toml",
    "tune",
    "tune_markdown",
    "tune_summary",
    "untrusted_reason",
]
