"""The hook specifications of ampsuite: the whole contract between core and plugins.

A plugin is a module (or any object) with functions decorated by
``ampsuite.hookimpl`` whose names are among the hooks below. Hooks are called by
the core; a plugin never calls another plugin. Every hook states where it runs:
*parent* is the ``ampsuite`` process, *worker* the spawned process of one cell
(the worker loads the same plugins as the parent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ampsuite.contract.cell import Cell
    from ampsuite.contract.plugin import Executor, Probe, ReportSection, Technique, Workload

hookspec = pluggy.HookspecMarker("ampsuite")

# ---------------------------------------------------------------------------
# registration: each plugin contributes typed records
# ---------------------------------------------------------------------------


@hookspec
def ampsuite_workloads() -> Iterable[Workload]:
    """Return the workloads this plugin provides.

    :return: workload records; names must be unique across all plugins
        (a duplicate is a load error that names both plugins).

    Called once per process (parent and worker); all results are collected.
    """
    raise NotImplementedError


@hookspec
def ampsuite_techniques() -> Iterable[Technique]:
    """Return the techniques this plugin provides.

    :return: technique records; names unique across all plugins.

    Called once per process (parent and worker); all results are collected.
    """
    raise NotImplementedError


@hookspec
def ampsuite_probes() -> Iterable[Probe]:
    """Return the probes this plugin provides.

    :return: probe records; every registered probe runs in every cell that
        executes, in ``Probe.order``.

    Called once per process (parent and worker); all results are collected.
    """
    raise NotImplementedError


@hookspec
def ampsuite_executors() -> Iterable[Executor]:
    """Return the executors this plugin provides.

    :return: executor records; names unique across all plugins. ``ampsuite run
        --executor NAME`` (or the suite file's ``[executor] name``) picks one;
        ``local``, the built-in default, runs the cells one after another on
        this machine.

    Called once per process (parent and worker); all results are collected.
    """
    raise NotImplementedError


# ---------------------------------------------------------------------------
# the matrix
# ---------------------------------------------------------------------------


@hookspec
def ampsuite_modify_cells(suite: Mapping[str, Any], cells: list[Cell]) -> None:
    """Filter or reorder the expanded cells in place.

    :param suite: the validated suite as plain data (``SuiteSpec.as_dict()``).
    :param cells: the expanded cells (frozen :class:`ampsuite.Cell` objects); mutate
        the list (remove, reorder, replace). Removing a cell drops it from the
        run entirely (it gets no record); to keep a record, replace it by
        ``cell.skipped("why")`` instead.

    Runs in the parent, after expansion and ``-k`` selection. All
    implementations are called.
    """


# ---------------------------------------------------------------------------
# observing a run
# ---------------------------------------------------------------------------


@hookspec
def ampsuite_cell_finished(record: Mapping[str, Any]) -> None:
    """Observe one cell's terminal record, right after it was written to disk.

    :param record: the record as written (read-only by convention).

    Runs in the parent. All implementations are called; an exception in one
    is reported as a warning and does not stop the run.
    """


# ---------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------


@hookspec
def ampsuite_report_sections(results: Sequence[Mapping[str, Any]]) -> Iterable[ReportSection]:
    """Add sections to the HTML report and the Markdown summary.

    :param results: the loaded results documents being reported.
    :return: report sections, shown after the built-in ones.

    Runs in the process that renders the report. All results are collected.
    """
    raise NotImplementedError
