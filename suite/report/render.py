"""Render the static report site with Jinja2: overview, workload pages, history, compare, machines, CSV, Markdown.

Templates and the stylesheet ship inside this package (``templates/``,
``static/``); the environment autoescapes everything and uses
StrictUndefined, so a template that reaches for a missing value fails the
render instead of printing an empty cell. Pages use relative links only and
load nothing from the network, so the site works from file:// and from any
static host.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ampsuite import ReportSection, __version__, analysis, results
from ampsuite.analysis import AnyDocument as Doc
from ampsuite.analysis import HistoryPoint
from ampsuite.contract.errors import ResultsFileError
from ampsuite.contract.tunerecords import TuneSummary
from ampsuite.report import fmt, tune_page
from ampsuite.report.artifacts import copy_artifacts
from ampsuite.report.compare import compare_context
from ampsuite.report.compare import summary as compare_summary
from ampsuite.report.csv_export import write_csv, write_machines_csv
from ampsuite.report.history import history_context
from ampsuite.report.machines import machines_context
from ampsuite.report.markdown import markdown_summary
from ampsuite.report.pages import index_context, speedup_summary, workload_contexts
from ampsuite.report.provenance import provenance_lines
from ampsuite.report.quality_page import quality_context
from ampsuite.report.views import load_runs, run_label
from ampsuite.results import outputs

Note = Callable[[str], None] | None

__all__ = [
    "CSV_NAME",
    "JSON_NAME",
    "MACHINES_CSV_NAME",
    "MARKDOWN_NAME",
    "environment",
    "render_site",
    "render_tune_page",
]

CSV_NAME = "results.csv"
MACHINES_CSV_NAME = "machines.csv"
JSON_NAME = "results.json"
MARKDOWN_NAME = "summary.md"
STATIC_DIR = "static"


def environment() -> jinja2.Environment:
    """The Jinja2 environment of the report: package templates, autoescape, StrictUndefined."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ampsuite.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=fmt.num, pct=fmt.pct, ratio=fmt.ratio, secs=fmt.secs, bytes=fmt.bytes_)
    env.globals.update(version=__version__, speedup_summary=speedup_summary)
    return env


def _static_files() -> list[Any]:
    source = importlib.resources.files("ampsuite.report") / STATIC_DIR
    return [item for item in source.iterdir() if item.is_file()]


def _copy_static(out_dir: Path) -> None:
    target = out_dir / STATIC_DIR
    target.mkdir(parents=True, exist_ok=True)
    for item in _static_files():
        with importlib.resources.as_file(item) as path:
            shutil.copyfile(path, target / item.name)


def _section_views(sections: Iterable[ReportSection]) -> list[dict[str, Any]]:
    """Plugin sections with unique anchors; their HTML is trusted markup (see ReportSection)."""
    out, used = [], set()
    for section in sections:
        base = section.anchor or re.sub(r"[^a-z0-9]+", "-", section.title.lower()).strip("-") or "section"
        anchor = "plugin-" + re.sub(r"[^A-Za-z0-9_-]+", "-", base)
        if anchor in used:
            anchor += "-" + hashlib.sha1(section.title.encode()).hexdigest()[:6]
        used.add(anchor)
        out.append({"title": section.title, "anchor": anchor, "html": Markup(section.html)})
    return out


def _results_json(
    out: Path, items: Sequence[Doc], files: Sequence[str | Path], inputs: Sequence[str | Path], note: Note
) -> list[str]:
    """Put each run's results file in the site (results.json, results-2.json, ...); their names.

    A given file is copied under :mod:`ampsuite.results.outputs`' rules (never over itself, as when ``ampsuite
    run`` writes its results where its report goes; never over another input; an earlier run there is kept aside
    and named through ``note``); a document given without a file is written out, unless the name is taken.
    """
    names = [JSON_NAME if i == 0 else f"results-{i + 1}.json" for i in range(len(items))]
    copies = [(Path(f), out / name) for f, name in zip(files, names, strict=False)]
    for source, target in copies:  # every copy checked before the first is made
        outputs.check_copy(source, target, inputs, "the report's copy of a results file")
    for source, target in copies:
        backup = outputs.copy_into(source, target, inputs, "the report's copy of a results file")
        if backup is not None and note is not None:
            note(f"{target}: an earlier run's results file, kept as {backup}")
    for doc, name in list(zip(items, names, strict=True))[len(copies) :]:
        if not (out / name).exists():
            (out / name).write_text(json.dumps(doc, indent=1, allow_nan=False), encoding="utf-8")
    return names


def _default_title(docs: Sequence[Doc]) -> str:
    names = []
    for doc in docs:
        suite = (doc.get("run") or {}).get("suite") or {}
        name = suite.get("name") if isinstance(suite, Mapping) else None
        if name and name not in names:
            names.append(str(name))
    return "ampsuite report" + (f": {', '.join(names)}" if names else "")


def render_site(
    docs: Doc | Sequence[Doc],
    out_dir: str | Path,
    *,
    compare_with: Doc | None = None,
    history: Mapping[str, Sequence[HistoryPoint]] | None = None,
    extra_sections: Iterable[ReportSection] = (),
    title: str | None = None,
    results_files: Sequence[str | Path] = (),
    inputs: Sequence[str | Path] = (),
    note: Note = None,
) -> Path:
    """Write the report site for ``docs`` (loaded results documents) into ``out_dir``.

    :param compare_with: a reference run; adds compare.html (each doc against it).
    :param history: :func:`ampsuite.analysis.history` output; adds history.html.
    :param results_files: the files ``docs`` were loaded from, copied into the site as
        results.json (results-2.json, ...) and linked from every page; their names tell
        machines apart on machines.html where GPU and host do not.
    :param inputs: files the command read besides ``results_files`` (a ``--compare`` file): no page or copy
        may replace one of them or of ``results_files`` (:mod:`ampsuite.results.outputs`).
    :param note: told (one line) where an earlier run's results file in ``out_dir`` was kept.
    :param extra_sections: plugin sections (``ampsuite_report_sections``), shown on
        the index after the built-in ones and in summary.md when they carry Markdown.
    :return: the path of index.html.

    Files written: index.html, one workload-*.html per workload id, quality.html when a run holds quality
    runs (:mod:`ampsuite.report.quality_page`), tune.html (tune-2.html, ...) per tune search's file
    (:mod:`ampsuite.report.tune_page`), history.html
    and compare.html when asked, machines.html and machines.csv when ``docs`` come from
    more than one machine (:func:`ampsuite.analysis.group_machines`: GPU card, else CPU
    and host), results.json (one per run), results.csv, summary.md and static/style.css.
    Other files in ``out_dir`` are left alone.
    """
    items = [docs] if isinstance(docs, Mapping) else list(docs)
    if not items:
        raise ValueError("render_site: no results documents given")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = list(extra_sections)
    runs = load_runs(items, copy_artifacts(out, items, results_files))
    env = environment()
    workloads = workload_contexts(runs)
    across = analysis.across_machines(items, results_files) if len(items) > 1 else None
    several = across is not None and len(across.machines) > 1
    every_input = [*results_files, *inputs]
    pages = [
        "index.html",
        CSV_NAME,
        MARKDOWN_NAME,
        *(f"{STATIC_DIR}/{f.name}" for f in _static_files()),
        *(p["file"] for p in workloads.values()),
    ]
    pages += ["history.html"] * (history is not None) + ["compare.html"] * (compare_with is not None)
    pages += ["machines.html", MACHINES_CSV_NAME] * several
    tunes = tune_page.site_pages(items)
    pages += [t.file for t in tunes]
    outputs.refuse_inputs([out / p for p in pages], every_input, "the report")
    json_names = _results_json(out, items, results_files, every_input, note)
    quality = quality_context(runs)
    nav = {
        "quality": quality is not None,
        "tune": [{"file": t.file, "label": t.label} for t in tunes],
        "workloads": [{"name": w, "file": page["file"]} for w, page in workloads.items()],
        "history": history is not None,
        "compare": compare_with is not None,
        "machines": several,
        "csv": CSV_NAME,
        "markdown": MARKDOWN_NAME,
        "json": json_names,
    }
    base = {"site_title": title or _default_title(items), "nav": nav, "provenance": provenance_lines(items)}

    def write(name: str, template: str, **context: Any) -> Path:
        path = out / name
        html = env.get_template(template).render(**base, page=name, **context)
        path.write_text(html, encoding="utf-8")
        return path

    compared = None
    if compare_with is not None:
        compared = {"reference": run_label(compare_with), "runs": compare_summary(runs, compare_with)}
    machines = None
    if across is not None and several:
        machines = machines_context(items, results_files, json_names, across)
    index = write(
        "index.html",
        "index.html",
        sections=_section_views(sections),
        compared=compared,
        machines=machines,
        **index_context(runs),
    )
    for page in workloads.values():
        write(page["file"], "workload.html", **page)
    if quality is not None:
        write("quality.html", "quality.html", **quality)
    for t in tunes:
        tune = tune_page.tune_context(items[t.index], links=[("results", json_names[t.index])])
        write(t.file, "tune_site.html", label=t.label, searched=t.searched, **tune)
    if history is not None:
        write("history.html", "history.html", **history_context(history))
    if compare_with is not None:
        write("compare.html", "compare.html", **compare_context(runs, compare_with))
    if machines is not None and across is not None:
        write("machines.html", "machines.html", csv_name=MACHINES_CSV_NAME, **machines)
        write_machines_csv(across, items, out / MACHINES_CSV_NAME, results_files)
    write_csv(items, out / CSV_NAME)
    (out / MARKDOWN_NAME).write_text(markdown_summary(items, compare_with, extra_sections=sections), encoding="utf-8")
    _copy_static(out)
    return index


def render_tune_page(
    summary: TuneSummary | Mapping[str, Any], out_dir: str | Path, doc: Mapping[str, Any] | None = None
) -> Path:
    """Write tune.html (and the report's stylesheet) into ``out_dir``, as ``ampsuite tune`` does beside its
    results file and recipe; returns the page's path. (A report site renders a tune file's page as one of its
    own, :func:`render_site`.)

    ``summary`` is the record, its JSON or the whole results document; without a document (``doc``, or
    ``summary`` itself) the page reads the results file beside it, as ``ampsuite tune`` writes it, for the
    machine it names.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = TuneSummary.with_document(summary, doc)[1]
    if doc is None:
        doc = _beside(out / tune_page.RESULTS)
    provenance = [] if doc is None else provenance_lines([doc])  # a site's pages get theirs from base.html
    html = (
        environment().get_template(tune_page.PAGE).render(provenance=provenance, **tune_page.tune_context(summary, doc))
    )
    path = out / tune_page.PAGE
    path.write_text(html, encoding="utf-8")
    _copy_static(out)
    return path


def _beside(path: Path) -> Mapping[str, Any] | None:
    """The results file ``ampsuite tune`` writes beside its page, or None when there is none it can read."""
    if not path.is_file():
        return None
    try:
        return results.load(path)
    except ResultsFileError:
        return None
