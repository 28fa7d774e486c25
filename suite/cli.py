"""The ``ampsuite`` command. Every user error is one line on stderr and an :class:`ExitCode`."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ampsuite import __version__
from ampsuite.cliargs import plugin_settings as _plugin_settings
from ampsuite.contract.errors import AmpsuiteError, ExitCode, UsageError
from ampsuite.contract.wire import FAILURES
from ampsuite.searches import _duration, cmd_max_batch, cmd_selfcheck, cmd_tune

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit 2, which means INTERRUPTED here
        raise UsageError(f"{self.prog}: {message}")


def _registry(args: argparse.Namespace) -> Any:
    from ampsuite.host.manager import load_registry

    return load_registry(_plugin_settings(args))


def cmd_run(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results
    from ampsuite.display import Display, print_summary
    from ampsuite.host import executors, session
    from ampsuite.run import runner

    executor_options = dict(executors.parse_option(o) for o in args.executor_option or [])

    p = session.plan(
        args.suite,
        device=args.device,
        keyword=args.keyword,
        settings=_plugin_settings(args),
        allow_large=args.allow_large,
    )
    chosen = executors.resolve(p.spec, p.registry.executors, args.executor, executor_options)
    # The device's peaks are measured where the cells run: by the local executor only.
    peaks = not args.no_peaks and not args.in_process and chosen.executor.name == executors.DEFAULT
    display = Display(noise_target=p.spec.measure.noise_target, measures_peaks=peaks)
    if not p.cells:
        display.console.print(f"{p.spec.path}: no cells selected", markup=False)
        return ExitCode.NO_CELLS
    if args.dry_run:
        display.dry_run(p.cells)
        return ExitCode.OK
    if all(c.skip_reason for c in p.cells):
        # As pytest exits 5 when it collects nothing: a run that can measure nothing is no success.
        reason = Counter(str(c.skip_reason) for c in p.cells).most_common(1)[0][0]
        display.console.print(
            f"{p.spec.path}: all {len(p.cells)} cells would be skipped, nothing to measure (most often: {reason}); "
            "--dry-run lists each reason",
            markup=False,
        )
        return ExitCode.NO_CELLS
    out_dir = Path(args.report_dir or Path("reports") / p.spec.dir_name)
    output = Path(args.output) if args.output else out_dir / "results.json"
    config = runner.RunConfig(
        output=output,
        resume=args.resume,
        in_process=args.in_process,
        data_dir=Path(args.data_dir),
        timeout=args.timeout,
        measure_peaks=not args.no_peaks,
        refresh_peaks=args.refresh_peaks,
        argv=sys.argv,
        executor=args.executor,
        executor_options=executor_options,
    )
    try:
        with results.locked(output, wait=args.wait_lock):  # one run per results file (--resume included)
            doc, interrupted = runner.run_plan(p, config, display)
    finally:
        display.stop()
    print_summary(doc, display.console)
    display.console.print(f"results: {output}", markup=False)
    if not args.no_report:
        index = _render(_sections(p.registry, [doc]), [doc], out_dir, files=[output])
        display.console.print(f"report: {index}", markup=False)
    if interrupted:
        return ExitCode.INTERRUPTED
    if any(r["status"] in FAILURES for r in doc["cells"]):
        return ExitCode.CELLS_FAILED
    return ExitCode.OK


def _sections(registry: Any, docs: list[dict[str, Any]]) -> list[Any]:
    """What plugins add to the report, collected once per rendering."""
    return [s for group in registry.hook.ampsuite_report_sections(results=docs) for s in group]


def _render(
    sections: list[Any],
    docs: list[dict[str, Any]],
    out_dir: Path,
    compare_with: Any = None,
    history: Any = None,
    files: Sequence[str | Path] = (),
) -> Path:
    from ampsuite.contract.errors import OutputError
    from ampsuite.report import render_site

    try:
        return Path(
            render_site(
                docs, out_dir, compare_with=compare_with, history=history, extra_sections=sections, results_files=files
            )
        )
    except OSError as exc:  # read-only folder, full disk: one line, exit OUTPUT_ERROR
        raise OutputError(exc.filename or str(out_dir), exc) from None


def cmd_list(args: argparse.Namespace) -> ExitCode:
    from rich.table import Table

    from ampsuite.display import make_console
    from ampsuite.spec.options import describe

    registry = _registry(args)
    console = make_console()  # piped output must not wrap at rich's assumed 80 columns
    plugins = Table(title="plugins")
    for col in ("name", "version", "source", "module"):
        plugins.add_column(col)
    for p in registry.plugins:
        plugins.add_row(p.name, p.version, p.source, p.module)
    console.print(plugins)
    kinds = (
        ("workload", registry.workloads),
        ("technique", registry.techniques),
        ("probe", registry.probes),
        ("executor", registry.executors),
    )
    for kind, records in kinds:
        for name in sorted(records):
            rec = records[name]
            extra = ""
            if kind == "workload":
                extra = f" [unit: {rec.unit}]"
            elif kind == "technique":
                bits = [f"order {rec.order}"]
                if rec.requires:
                    bits.append("requires " + ", ".join(sorted(rec.requires)))
                if rec.conflicts:
                    bits.append("conflicts with " + ", ".join(sorted(rec.conflicts)))
                extra = f" [{'; '.join(bits)}]"
            console.print(f"{kind} {name} (plugin {registry.owner[(kind, name)]}){extra}: {rec.summary}", markup=False)
            options = getattr(rec, "options", None)
            for o in describe(options) if options is not None else []:
                console.print(f"    {o.name} ({o.type}, default {o.default!r}): {o.help}", markup=False)
    return ExitCode.OK


def cmd_show(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results
    from ampsuite.display import print_summary

    for path in args.results:
        print_summary(results.load(path))
    return ExitCode.OK


def cmd_report(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results

    docs = [results.load(p) for p in args.results]
    compare_with = results.load(args.compare) if args.compare else None
    for path, doc in zip(args.results, docs, strict=True):  # docs/architecture.md: such reports are refused
        if compare_with is not None:
            results.check_comparable(path, compare_with["environment"], doc["environment"], action="compare")
    from ampsuite import analysis

    # Files of one machine (GPU, else CPU, and host) are its history; files of several machines
    # are also compared side by side on machines.html (render_site decides that from the same rule).
    machines = analysis.group_machines(docs, args.results)
    if len(machines) > 1:
        print("machines: " + "; ".join(f"{m.label} ({len(m.docs)} file{'s' * (len(m.docs) > 1)})" for m in machines))
    own_history = [docs[i] for m in machines if len(m.docs) > 1 for i in m.docs]
    history = None
    if args.asv_results or own_history:
        from ampsuite.report.history import git_commit_order, in_commit_order

        history = analysis.history(own_history if not args.asv_results else Path(args.asv_results))
        if args.asv_results:  # asv tracks whatever suite it was given: keep the cells of these results
            ids = {str(r["id"]) for doc in docs for r in doc["cells"]}
            tracked = len(history)
            history = {k: v for k, v in history.items() if k.split(" @ ", 1)[0] in ids}
            if not history:
                print(f"history: {args.asv_results} tracks none of these cells ({tracked} others); no history page")
        history = in_commit_order(history, git_commit_order()) if history else None
    sections = _sections(_registry(args), docs)
    index = _render(sections, docs, Path(args.output), compare_with=compare_with, history=history, files=args.results)
    print(f"report: {index}")
    if args.markdown:
        from ampsuite.report import markdown_summary

        text = markdown_summary(docs, compare_with=compare_with, extra_sections=sections)
        Path(args.markdown).write_text(text, encoding="utf-8")
    return ExitCode.OK


def cmd_make_data(args: argparse.Namespace) -> ExitCode:
    from ampsuite.host import session
    from ampsuite.spec.options import build_options

    p = session.plan(args.suite, device=args.device, settings=_plugin_settings(args))
    registry = p.registry
    done = set()
    for cell in p.cells:
        record = registry.workloads[cell.workload]
        key = (cell.workload, repr(sorted(cell.options.items())))
        if record.prepare is None or key in done:
            continue
        done.add(key)
        where = record.prepare(build_options(record.options, cell.options), args.data_dir)
        print(f"{cell.workload_id}: {where or 'synthetic data, nothing written'}")
    return ExitCode.OK


def cmd_new_plugin(args: argparse.Namespace) -> ExitCode:
    from ampsuite import scaffold

    target = scaffold.create(args.name, args.output)
    names = scaffold.plugin_names(args.name)
    print(f"created {target}: workload {names.workload!r}, technique {names.technique!r}")
    where = target if target.is_absolute() else f"./{target}"  # pip reads a bare name as a PyPI project
    print(f"next: pip install -e '{where}[test]' && ampsuite list && pytest {where}")
    return ExitCode.OK


def cmd_asv_machine(args: argparse.Namespace) -> ExitCode:
    from ampsuite.asvtools.machine import write_machine_file

    try:
        path = write_machine_file(args.file, args.machine)
    except ValueError as exc:
        raise UsageError(f"asv-machine: {exc}") from exc
    print(f"asv machine file: {path}")
    return ExitCode.OK


def _add_plugin_args(p: argparse.ArgumentParser, dest: str = "plugin") -> None:
    p.add_argument(
        "-p",
        dest=dest,
        action="append",
        metavar="MODULE",
        help="load plugin MODULE; -p no:NAME blocks the plugin registered as NAME",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ampsuite", description="Benchmark mixed-precision training techniques.")
    parser.add_argument("--version", action="version", version=f"ampsuite {__version__}")
    _add_plugin_args(parser, dest="global_plugin")  # -p anywhere: `ampsuite -p no:NAME list` as well
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, fn: Callable[[argparse.Namespace], ExitCode], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _add_plugin_args(p)
        p.set_defaults(func=fn)
        return p

    run = command("run", cmd_run, "run a suite (the default one for this device without SUITE)")
    run.add_argument("suite", nargs="?", help="suite file (TOML)")
    run.add_argument("-o", "--output", help="results file (default reports/SUITE-NAME/results.json)")
    run.add_argument("--report-dir", help="where the HTML report goes (default reports/SUITE-NAME)")
    run.add_argument("--device", choices=("cpu", "cuda"), help="override the suite's device")
    run.add_argument("-k", dest="keyword", metavar="EXPR", help="only cells whose id matches EXPR (and, or, not)")
    run.add_argument("--dry-run", action="store_true", help="list the cells and why any would be skipped")
    run.add_argument("--resume", action="store_true", help="keep finished records of OUTPUT, run the rest")
    run.add_argument("--in-process", action="store_true", help="run cells in this process (debugging; no isolation)")
    run.add_argument("--timeout", type=float, help="seconds per cell (overrides suite.timeout)")
    run.add_argument("--data-dir", default="reports/data", help="where generated data sets live")
    run.add_argument("--no-report", action="store_true", help="do not render the HTML report")
    run.add_argument("--no-peaks", action="store_true", help="do not measure the device's peak rates first")
    run.add_argument("--refresh-peaks", action="store_true", help="measure the peaks again instead of using the cache")
    run.add_argument(
        "--wait-lock", action="store_true", help="wait for another run on OUTPUT to end instead of refusing"
    )
    run.add_argument("--allow-large", action="store_true", help="run a matrix of more than 5,000 cells")

    run.add_argument(
        "--executor",
        metavar="NAME",
        help="where the cells run: local (default), slurm, or a plugin's (overrides the suite's [executor] name)",
    )
    run.add_argument(
        "--executor-option",
        action="append",
        metavar="KEY=VALUE",
        help="an executor option, overriding the suite's [executor] table (repeatable; VALUE is read as TOML)",
    )

    command("list", cmd_list, "show plugins, workloads, techniques, probes and executors with their options")

    show = command("show", cmd_show, "print the table of a results file")
    show.add_argument("results", nargs="+")

    report = command("report", cmd_report, "render the HTML report of results files")
    report.add_argument(
        "results",
        nargs="+",
        help="results files: several of one machine (GPU and host) are its history; "
        "of several machines, also compared side by side (machines.html)",
    )
    report.add_argument("-o", "--output", required=True, help="output directory")
    report.add_argument("--compare", metavar="RESULTS", help="compare against this earlier results file")
    report.add_argument("--asv-results", metavar="DIR", help="asv results directory for the history page")
    report.add_argument("--markdown", metavar="FILE", help="also write a Markdown summary")

    data = command("make-data", cmd_make_data, "generate the on-disk data sets a suite's workloads read")
    data.add_argument("suite", nargs="?")
    data.add_argument("--device", choices=("cpu", "cuda"))
    data.add_argument("--data-dir", default="reports/data")
    new_plugin = command("new-plugin", cmd_new_plugin, "write a plugin package: one workload, one technique, a test")
    new_plugin.add_argument("name", help="distribution name of the package, e.g. ampsuite-myplugin")
    new_plugin.add_argument(
        "-o",
        "--output",
        default=".",
        help="directory in which the package's own folder NAME/ is created (default .: ./NAME)",
    )
    mb = command("max-batch", cmd_max_batch, "find the largest batch size that runs, per workload and combination")
    mb.add_argument("suite", nargs="?", help="suite file (TOML)")
    mb.add_argument("-k", dest="keyword", metavar="EXPR", help="only cells whose id matches EXPR (and, or, not)")
    mb.add_argument("--start", type=int, help="first batch size (default: the suite's smallest for that workload)")
    mb.add_argument("--limit", type=int, default=65536, help="largest batch size to try (default 65536)")
    mb.add_argument("-o", "--output", help="results file (default reports/SUITE-NAME/max-batch.json)")
    mb.add_argument("--device", choices=("cpu", "cuda"), help="override the suite's device")
    mb.add_argument("--timeout", type=float, help="seconds per attempt (overrides suite.timeout)")
    mb.add_argument("--data-dir", default="reports/data", help="where generated data sets live")
    machine = command("asv-machine", cmd_asv_machine, "write asv's machine file (GPU, driver, CUDA) without prompts")
    machine.add_argument("--machine", help="entry name (default: the host name, as asv uses)")
    machine.add_argument("--file", help="machine file (default ~/.asv-machine.json)")

    check = command("selfcheck", cmd_selfcheck, "time the harness against a plain hand-written loop, same process")
    check.add_argument("--device", choices=("cpu", "cuda"))
    check.add_argument("-k", dest="keyword", metavar="EXPR", help="only checks whose name matches EXPR")
    check.add_argument("--rounds", type=int, default=3, help="alternating harness/plain rounds")
    check.add_argument("--min-ratio", type=float, default=0.97, help="flag checks below this plain/harness ratio")
    check.add_argument("-o", "--output", help="write the figures as JSON")
    source = check.add_mutually_exclusive_group()
    source.add_argument(
        "--tuned", metavar="RESULTS", help="check the winners of this tune results file instead of the built-in checks"
    )
    source.add_argument(
        "--cells",
        metavar="RESULTS",
        help="check every passed cell of this results file (-k matches 'cell ID') instead of the built-in checks",
    )
    tn = command("tune", cmd_tune, "search the suite's techniques for the fastest trustworthy recipe per workload")
    tn.add_argument("suite", nargs="?", help="suite file (TOML)")
    tn.add_argument("-k", dest="keyword", metavar="EXPR", help="only workloads of cells whose id matches EXPR")
    tn.add_argument("--budget", type=_duration, default=900.0, help="wall-clock budget: 90s, 15m, 1h (default 15m)")
    tn.add_argument("--resume", action="store_true", help="keep candidates already measured in the tune results")
    tn.add_argument("--report-dir", help="output directory (default reports/SUITE-NAME-tune)")
    tn.add_argument("--device", choices=("cpu", "cuda"), help="override the suite's device")
    tn.add_argument("--timeout", type=float, help="seconds per cell (overrides suite.timeout)")
    tn.add_argument("--data-dir", default="reports/data", help="where generated data sets live")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except AmpsuiteError as exc:
        print(f"ampsuite: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("ampsuite: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except Exception:
        traceback.print_exc()
        print(
            "ampsuite: internal error (a bug in ampsuite; please report it with the traceback above)", file=sys.stderr
        )
        return int(ExitCode.INTERNAL_ERROR)
