"""One tune run's machinery: every candidate measured as an ordinary cell, within the budget, written at once.

:class:`Tuner.run` is the only place a candidate becomes a measurement: the
cell from :meth:`ampsuite.tune.space.Candidate.cell`, measured by
:func:`ampsuite.run.runner.run_record` in its own worker (or a test's stand-in),
its record added to the tune results file before anything else happens.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from ampsuite import analysis, results
from ampsuite.analysis.machines import beside
from ampsuite.contract.cell import Cell
from ampsuite.contract.tunerecords import TuneSummary
from ampsuite.contract.tunesteps import Verdict
from ampsuite.contract.wire import Status
from ampsuite.host import environment
from ampsuite.host.manager import PluginSettings
from ampsuite.host.session import Plan
from ampsuite.results import definition
from ampsuite.run import runner
from ampsuite.run.forkserver import worker_context
from ampsuite.spec.screens import screen_id, screened_cell
from ampsuite.spec.suitespec import SuiteSpec
from ampsuite.tune import space
from ampsuite.tune.budget import Budget
from ampsuite.tune.space import Candidate, WorkloadConfig
from ampsuite.tune.trust import as_record, disturbed_reason, numerics_reason, untrusted_reason

__all__ = ["FULL", "SCREEN", "Measure", "Progress", "TuneConfig", "Tuner"]

SCREEN, FULL = "screen", "full"

Measure = Callable[[Cell, SuiteSpec, float], dict[str, Any]]
"""Runs one cell with a timeout and returns its record: :func:`ampsuite.run.runner.run_record` in a worker."""
Progress = Callable[[str], None]


@dataclass
class TuneConfig:
    """What ``ampsuite tune`` was given."""

    output: Path
    budget_seconds: float = 900.0
    resume: bool = False
    plugins: PluginSettings = field(default_factory=PluginSettings)
    data_dir: Path = Path("reports/data")
    timeout: float | None = None
    argv: Sequence[str] = ()
    finalists: int = 3
    reserve_share: float = 0.2
    """Share of the budget the search phases leave for the ablation."""
    clock: Callable[[], float] = time.monotonic


class Tuner:
    """One tune run: the results writer, the budget, the worker context and the progress lines."""

    def __init__(self, plan: Plan, config: TuneConfig, progress: Progress, measure: Measure | None = None) -> None:
        self.plan, self.config, self.progress = plan, config, progress
        self.spec = plan.spec
        self.screen_spec = dataclasses.replace(plan.spec, measure=space.screen_measure(plan.spec.measure))
        self.budget = Budget(config.budget_seconds, config.clock)
        self.reserve = config.budget_seconds * config.reserve_share
        self.cell_timeout = config.timeout or plan.spec.timeout
        self.run_config = runner.RunConfig(
            output=config.output, plugins=config.plugins, data_dir=config.data_dir, argv=config.argv, resume=True
        )
        previous = results.load(config.output) if config.resume and config.output.exists() else None
        old_ids = {r["id"] for r in previous["cells"]} if previous is not None else set()
        self.run_config.resume = config.resume
        self.writer = results.open_results(plan.spec, self.run_config, plan.device, plan.registry, old_ids)
        self.kept = {r["id"]: r for r in self.writer.doc["cells"]}
        self.from_file = set(self.kept)  # records taken from the file and not measured again in this run
        self.backup: Path | None = None
        self.logdir = Path(tempfile.mkdtemp(prefix="ampsuite-tune-"))
        self._ctx: BaseContext | None = None
        self.measure = measure or self._run_record
        self.started = 0
        self.runs = 1
        """This tune run and those before it that wrote the file (:attr:`TuneSummary.runs`)."""
        # Per workload configuration, per cell name: a trusted full figure and the name progress shows it under.
        self._figures: dict[str, dict[str, tuple[float, str]]] = {}
        self._file_winners: dict[str, Candidate] = {}
        self.verdicts: dict[tuple[str, str, str], Verdict] = {}
        """Near misses screened again beside what they would replace (confirm._confirm), this run's and, on
        --resume, the file's: (workload configuration, incumbent name, near miss name) -> the verdict."""
        if previous is not None:
            # The loader checked run.tune's shape; a damaged verdict is left out by from_json: the pair is tested again.
            summary = TuneSummary.from_json(previous["run"].get("tune") or {})
            self.runs += summary.runs_of(previous) if "tune" in previous["run"] else 0
            self._best_from(summary)
            self._prices_from(previous)
            self.verdicts = {verdict.pair: verdict for verdict in summary.confirmations}

    def decide(self, verdict: Verdict) -> None:
        """Keep a near miss's ``verdict`` (confirm._confirm), in the results file at once: a run ended without its
        summary (the machine taken back, a SIGKILL) keeps the verdicts it reached, and ``--resume`` takes them."""
        self.verdicts[verdict.pair] = verdict
        confirmations = [v.to_json() for v in self.verdicts.values()]
        self.writer.doc["run"].setdefault("tune", {})["confirmations"] = confirmations
        self.writer.flush()

    def confirmed(self, key: str) -> set[tuple[str, str]]:
        """(incumbent, near miss) names of workload configuration ``key`` whose near miss was confirmed faster."""
        return {(i, n) for (k, i, n), v in self.verdicts.items() if k == key and v.confirmed}

    def file_winner(self, key: str) -> Candidate | None:
        """--resume: the winner the file's last run chose for the workload configuration ``key``, while its record
        is kept and trusted; None on a fresh run."""
        return self._file_winners.get(key)

    def _best_from(self, previous: TuneSummary) -> None:
        """--resume: each workload's best so far starts at the winner the file's last run chose, while its record
        is kept and trusted; the search may not visit it in full until its finalists, and its screens would
        otherwise be reported against the FP32 cell alone."""
        for workload in previous.workloads:
            winner = workload.winner
            record = None if winner is None else self.kept.get(winner.cell_id)
            if winner is not None and record is not None:
                label = f"{winner.name} (the file's last winner)"
                self._offer(workload.key, winner.name, FULL, record, label)
                self._file_winners[workload.key] = Candidate(
                    winner.techniques, winner.batch_size, {t: dict(o) for t, o in winner.overrides.items()}
                )

    def _prices_from(self, previous: dict[str, Any]) -> None:
        """--resume: the first steps of the file's records price this run's candidates (:meth:`Budget.learn`), as
        candidate techniques: without the suite's base techniques, which every candidate has."""
        base = set(self.spec.base_techniques)
        for record in previous["cells"]:
            first = (record.get("metrics") or {}).get("first_step_seconds")
            if isinstance(first, int | float):
                names = [str(t.get("name")) for t in record.get("techniques") or [] if t.get("name") not in base]
                self.budget.learn(str(record["id"]).split("/", 1)[0], names, float(first))

    def close(self) -> None:
        """Remove the folder of the workers' logs (each cell's log is read into its record)."""
        shutil.rmtree(self.logdir, ignore_errors=True)

    def _run_record(self, cell: Cell, spec: SuiteSpec, timeout: float) -> dict[str, Any]:
        if self._ctx is None:
            self._ctx = worker_context(self.plan.registry)
        log = self.logdir / f"cell-{self.started}.log"
        return runner.run_record(
            runner.CellJob(self._ctx, spec, cell, self.run_config, log, timeout, self.plan.registry)
        )

    # -- one candidate -------------------------------------------------------------------------

    def _cell(self, config: WorkloadConfig, candidate: Candidate, phase: str, repeat: int = 1) -> Cell:
        """The cell measuring ``candidate`` in ``phase``: a screen has its own id, ``.../screen``, and a repeated
        screen (``repeat`` > 1) its own again, ``.../screen-N``."""
        cell = candidate.cell(self.spec, self.plan.registry, self.plan.device, config)
        return dataclasses.replace(cell, id=screen_id(cell.id, repeat)) if phase == SCREEN else cell

    def pruned(self, config: WorkloadConfig, candidate: Candidate) -> bool:
        """Whether matrix expansion prunes ``candidate`` (a conflict, a requirement, a check's reason): free to ask."""
        return self._cell(config, candidate, SCREEN).skip_reason is not None

    def known(self, config: WorkloadConfig, candidate: Candidate, phase: str, repeat: int = 1) -> bool:
        """Whether :meth:`run` would return a record already at hand (``--resume``) without measuring: free."""
        cell = self._cell(config, candidate, phase, repeat)
        return cell.id in self.kept and self._stale(cell, phase) is None

    def here(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` was measured in this run, not taken from the file by ``--resume`` (for what progress
        and the outputs say; the search holds any two records it keeps against each other: both are this
        machine's)."""
        return record["id"] not in self.from_file

    def run(self, config: WorkloadConfig, candidate: Candidate, phase: str, repeat: int = 1) -> dict[str, Any] | None:
        """Measure ``candidate`` (``phase`` SCREEN or FULL; ``repeat`` > 1: that screen's repeat, a cell of its own):
        its record, or None when the budget does not allow it.

        A record already in the file (``--resume``) is returned as it is, unless it was measured on another
        machine (:func:`ampsuite.analysis.machines.beside`), measured another definition or its clocks were
        throttled: then it is measured again, and the file keeps it when that measurement is cut short or the
        budget refuses it (the search then gets None for another machine's record: it holds no figure of two
        machines against each other). A pruned candidate gets a skipped record without a worker.

        :raises KeyboardInterrupt: after writing the record, when Ctrl-C or SIGTERM interrupted the cell.
        """
        cell = self._cell(config, candidate, phase, repeat)
        label = phase if repeat == 1 else f"{phase} {repeat}"  # how progress names the measurement
        spec = self.screen_spec if phase == SCREEN else self.spec
        previous = self.kept.get(cell.id)
        stale = self._stale(cell, phase)
        if previous is not None and stale is None:
            self._consider(config, candidate, phase, previous)  # --resume: still the best so far
            return previous
        if stale is not None:
            self.note(f"{config.key}: {candidate.name} ({label}) measured again, {stale}")
            self._back_up()
        if cell.skip_reason:
            record = results.base_record(cell, self.plan.registry)
            record.update(status=Status.SKIPPED, evidence={"reason": cell.skip_reason})
            return self._keep(record)
        measure = spec.measure
        graph = screened_cell(cell.id) or cell.id  # a cell's screens and full measurement compile one graph
        nominal = (measure.warmup_seconds + measure.max_seconds) * measure.processes  # before any cell of it ran
        estimate = self.budget.estimate((config.key, phase), nominal, candidate.techniques, graph)
        # The search phases leave a share of the budget for the ablation, which explains the recipe.
        reserve = 0.0 if phase == "ablation" else self.reserve
        if not self.budget.fits(estimate, reserve):
            self.budget.refused += 1
            priced = self.budget.priced_by((config.key, phase), candidate.techniques, graph)
            why = f" (its first step priced as that of {priced[0]}, {priced[1]:.1f} s)" if priced else ""
            self.note(f"{config.key}: {candidate.combination} not started: needs ~{estimate:.1f} s{why}")
            if previous is not None and not self._beside(previous):
                return None  # the file keeps it; the search cannot hold it against this machine's figures
            return previous  # a stale record stays what the file has
        timeout = self.budget.timeout(self.cell_timeout)
        capped = timeout < self.cell_timeout
        self.started += 1
        record = self.measure(cell, spec, timeout)
        cut = record["status"] == Status.INTERRUPTED or (record["status"] == Status.TIMEOUT and capped)
        if cut and previous is not None:
            # A measurement cut short does not replace the one it was to repeat: nothing measured is lost.
            self._keep(previous)
            if record["status"] == Status.INTERRUPTED:
                raise KeyboardInterrupt(cell.id)
            return previous
        if record["status"] == Status.TIMEOUT and capped:
            # Ended by the budget, not by the cell: --resume with more budget must run it again.
            record.update(status=Status.INTERRUPTED, evidence={"reason": f"budget spent after {timeout:.1f} s"})
        elif record["status"] == Status.INTERRUPTED:
            self._keep(record)
            raise KeyboardInterrupt(cell.id)
        first = (record.get("metrics") or {}).get("first_step_seconds")
        self.budget.record(
            (config.key, phase),
            float(record.get("wall_seconds") or 0.0),
            candidate.techniques,
            float(first or 0.0),
            graph,
        )
        self._keep(record)
        if stale is not None and phase != SCREEN:  # the figure measured again replaces the file's in the best so far
            self._figures.get(config.key, {}).pop(candidate.name, None)
        self._report(config, candidate, phase, record, label)
        return record

    def _keep(self, record: dict[str, Any]) -> dict[str, Any]:
        self.writer.add(record)
        self.kept[record["id"]] = record
        self.from_file.discard(record["id"])
        return record

    def _stale(self, cell: Cell, phase: str) -> str | None:
        """Why the record taken from the file (``--resume``) under ``cell``'s id is measured again: another machine
        measured it, it measured another definition (the suite file changed), or, for a full record, a disturbed
        timing (throttled clocks, a compile in the timed steps), which measures something besides the recipe
        (screens count for their numerics only and are kept)."""
        if cell.id not in self.from_file:
            return None
        if not self._beside(self.kept[cell.id]):
            machine = (self.kept[cell.id].get("machine") or {}).get("host")
            return (
                f"the file's record was measured on another machine ({machine})"
                if machine
                else ("the file's record names no machine")
            )
        changed = definition.difference(self.kept[cell.id], cell, self.plan.registry)
        if changed is not None:
            return f"the file's record measured other {changed}"
        if phase == SCREEN:
            return None
        reason = disturbed_reason(self.kept[cell.id])
        return None if reason is None else f"the file's record says {reason}"

    def _beside(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` was measured on the machine this run measures on: the one rule for holding figures
        against each other."""
        return beside(record, {"machine": environment.identity(self.plan.device)})

    def _back_up(self) -> None:
        """Before the first record from the file is replaced, a copy of the file as it was: nothing measured is
        lost, even a record this run measures again."""
        if self.backup is None and self.config.output.exists():
            self.backup = results.copy_aside(self.config.output)
            self.note(f"the results file as it was: {self.backup}")

    def untrusted(self, record: dict[str, Any], phase: str) -> str | None:
        """Screening figures are too short to meet the noise target: only their numerics count."""
        if phase == SCREEN:
            return numerics_reason(record, self.writer.doc)
        return untrusted_reason(record, self.writer.doc)

    def best(self, key: str) -> tuple[str, float] | None:
        """The fastest trusted full figure of workload configuration ``key`` so far: (name, throughput)."""
        figures = self._figures.get(key)
        if not figures:
            return None
        value, label = max(figures.values(), key=lambda item: item[0])
        return label, value

    def _consider(
        self, config: WorkloadConfig, candidate: Candidate, phase: str, record: dict[str, Any]
    ) -> tuple[float | None, str | None]:
        """Remember ``record`` as the best so far when it is a trusted full measurement faster than the last;
        its (throughput, why it is not trusted)."""
        return self._offer(config.key, candidate.name, phase, record)

    def _offer(
        self, key: str, name: str, phase: str, record: dict[str, Any], label: str | None = None
    ) -> tuple[float | None, str | None]:
        """:meth:`_consider` for the workload configuration ``key``, the record of cell ``name`` (shown as
        ``label``, else ``name``)."""
        value = analysis.throughput(as_record(record))
        why = self.untrusted(record, phase)
        if value is not None and phase != SCREEN and why is None:
            # A record of an earlier run (of this machine: the tuner keeps no other) says so.
            label = label or (name if self.here(record) else f"{name} (an earlier run)")
            self._figures.setdefault(key, {})[name] = (value, label)
        return value, why

    def _report(
        self, config: WorkloadConfig, candidate: Candidate, phase: str, record: dict[str, Any], label: str
    ) -> None:
        """One progress line for ``record``; ``label``: its phase, with the repeat of a repeated screen."""
        value, why = self._consider(config, candidate, phase, record)
        figure = f"{value:,.0f} {config.unit}/s" if value is not None else str(record["status"])
        best = self.best(config.key)
        best_text = f"best so far {best[0]} {best[1]:,.0f} {config.unit}/s" if best else "no trusted figure yet"
        self.note(f"{config.key}: {candidate.name} ({label}) {figure}{'' if why is None else f' [{why}]'}; {best_text}")

    def note(self, text: str) -> None:
        """A progress line, with the budget's elapsed and remaining seconds."""
        b = self.budget
        self.progress(f"[tune {b.elapsed():6.1f} s, {b.remaining():6.1f} s left] {text}")
