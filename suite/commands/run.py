"""``ampsuite run``: expand a suite into cells, run each in its own worker, write results and the report."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from ampsuite.analysis.estimate import Estimate, earlier_walls
from ampsuite.commands import again
from ampsuite.commands.common import Command, add_cell_args, cell_settings, plugin_settings, render, report_sections
from ampsuite.contract.errors import ExitCode, UsageError
from ampsuite.contract.wire import FAILURES

SWITCHES = {
    "--dry-run": "list the cells and why any would be skipped",
    "--resume": "keep finished records of OUTPUT, run the rest",
    "--retry-failed": "with --resume: run again the cells whose record ended failed, oom, timeout or crashed",
    "--in-process": "run cells in this process (debugging; no isolation)",
    "--no-report": "do not render the HTML report",
    "--no-peaks": "do not measure the device's peak rates first",
    "--refresh-peaks": "measure the peaks again instead of using the cache",
    "--wait-lock": "wait for another run on OUTPUT to end instead of refusing",
    "--no-again": "do not measure a workload's untrusted fastest cell (and its FP32 reference) again in more processes",
    "--allow-large": "run a matrix of more than 5,000 cells",
}
"""``run``'s on/off flags and what each turns on."""


def add_arguments(run: argparse.ArgumentParser) -> None:
    add_cell_args(run, "only cells whose id matches EXPR (and, or, not)")
    run.add_argument("-o", "--output", help="results file (default reports/SUITE-NAME/results.json)")
    run.add_argument("--report-dir", help="where the HTML report goes (default reports/SUITE-NAME)")
    for flag, meaning in SWITCHES.items():
        run.add_argument(flag, action="store_true", help=meaning)
    run.add_argument(
        "--as-device",
        metavar="DEVICE",
        help="with --dry-run: preview the cells as on DEVICE (cpu, cuda or cuda:N for N GPUs), whatever this "
        "machine has",
    )
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


def _earlier(output: Path) -> dict[str, Any] | None:
    """The results file a run would write, as it stands: the wall times of its cells estimate this run."""
    from ampsuite import results
    from ampsuite.contract.errors import AmpsuiteError

    if not output.is_file():
        return None
    try:
        return results.load(output)
    except AmpsuiteError:  # unreadable or of another version: the run says so itself; no estimate
        return None


def execute(args: argparse.Namespace) -> ExitCode:
    from ampsuite import results
    from ampsuite.display import Display
    from ampsuite.host import executors, session
    from ampsuite.results.outputs import file_target, folder_target, same_file
    from ampsuite.run import runner
    from ampsuite.run.signals import deferred
    from ampsuite.summary import print_summary
    from ampsuite.terminal import plain

    if args.retry_failed and not args.resume:
        raise UsageError("run: --retry-failed goes with --resume (it names which finished records run again)")
    # Before the suite is even read: a path of the wrong kind must cost nothing, not a whole run.
    if args.output is not None:
        file_target(args.output, "-o", "the results file")
    if args.report_dir is not None:
        folder_target(args.report_dir, "--report-dir", "the report's folder")
        if args.output is not None and same_file(args.output, args.report_dir):
            raise UsageError(f"{args.output}: -o and --report-dir name the same path; -o names the results file")
    executor_options = dict(executors.parse_option(o) for o in args.executor_option or [])
    preview = _preview(args)
    p = session.plan(
        args.suite,
        device=args.device,
        keyword=args.keyword,
        settings=plugin_settings(args),
        allow_large=args.allow_large,
        preview=preview,
    )
    chosen = executors.resolve(p.spec, p.registry.executors, args.executor, executor_options)
    # The device's peaks are measured where the cells run: by the local executor only.
    peaks = not args.no_peaks and not args.in_process and chosen.executor.name == executors.DEFAULT
    out_dir = Path(args.report_dir or Path("reports") / p.spec.dir_name)
    output = Path(args.output) if args.output else out_dir / "results.json"
    earlier = _earlier(output)
    if preview is not None and earlier is not None and earlier["environment"].get("device") != preview[0]:
        earlier = None  # wall times of another device say nothing of the previewed one
    estimate = Estimate(p.cells, earlier_walls(earlier), str(output))
    display = Display(noise_target=p.spec.measure.noise_target, measures_peaks=peaks, estimate=estimate)
    if not p.cells:
        display.console.print(f"{p.spec.path}: no cells selected", markup=False)
        return ExitCode.NO_CELLS
    if args.dry_run:
        before, after = _preview_lines(*preview) if preview is not None else (None, None)
        if before:
            display.console.print(before, markup=False, soft_wrap=True)
        display.dry_run(p.cells)
        if after:
            display.console.print(after, markup=False, soft_wrap=True)
        return ExitCode.OK
    if all(c.skip_reason for c in p.cells):
        # As pytest exits 5 when it collects nothing: a run that can measure nothing is no success.
        reason = Counter(str(c.skip_reason) for c in p.cells).most_common(1)[0][0]
        display.console.print(
            plain(
                f"{p.spec.path}: all {len(p.cells)} cells would be skipped, nothing to measure (most often: {reason}); "
                "--dry-run lists each reason"
            ),
            markup=False,
        )
        return ExitCode.NO_CELLS
    config = runner.RunConfig(
        output=output,
        resume=args.resume,
        retry_failed=args.retry_failed,
        in_process=args.in_process,
        measure_peaks=not args.no_peaks,
        refresh_peaks=args.refresh_peaks,
        **cell_settings(args, p),
        executor=args.executor,
        executor_options=executor_options,
    )
    try:
        with results.locked(output, wait=args.wait_lock):  # one run per results file (--resume included)
            doc, interrupted = runner.run_plan(p, config, display)
            if not (interrupted or args.no_again or args.in_process):
                doc, interrupted = again.measure_again(p, config, display, doc)
            doc = _with_verdicts(doc, output)
    finally:
        display.stop()
    with deferred():  # a signal now ends the command once the summary and the report are written
        print_summary(doc, display.console)
        display.console.print(f"results: {output}", markup=False)
        if not args.no_report:
            index = render(report_sections(p.registry, [doc]), [doc], out_dir, files=[output], inputs=[p.spec.path])
            display.console.print(f"report: {index}", markup=False)
    if interrupted:
        return ExitCode.INTERRUPTED
    if any(r["status"] in FAILURES for r in doc["cells"]):
        return ExitCode.CELLS_FAILED
    return ExitCode.OK


def _with_verdicts(doc: dict[str, Any], output: Path) -> dict[str, Any]:
    """A quality suite's verdicts written into the results file as ``run.quality`` (docs/quality.md)."""
    from ampsuite import analysis, results

    summary = analysis.quality_summary(doc)
    if summary is None:
        return doc
    writer = results.ResultsWriter(output, doc)
    writer.doc["run"]["quality"] = summary
    writer.flush()
    return writer.doc


def _preview(args: argparse.Namespace) -> tuple[str, int] | None:
    """``--as-device``: only with ``--dry-run`` (nothing can run on a device that is not there), never with
    ``--device`` (one device per plan)."""
    from ampsuite.host.session import parse_device

    if args.as_device is None:
        return None
    if not args.dry_run:
        raise UsageError("run: --as-device previews the cells of another device; use it with --dry-run")
    if args.device is not None:
        raise UsageError("run: give --device (run here) or --as-device (preview), not both")
    return parse_device(args.as_device)


def _preview_lines(device: str, gpus: int) -> tuple[str, str]:
    """What a preview says before its cells, and after them."""
    machine = f"{gpus} CUDA GPU{'s' * (gpus != 1)}" if device == "cuda" else "a CPU and no GPU"
    return (
        f"preview (--as-device): the cells as on a machine with {machine}, not this machine's",
        "preview only: nothing ran; what only a worker on that device can tell (compute capability, memory, "
        "a technique's SkipCell) is not known",
    )


COMMAND = Command("run", "run a suite (the default one for this device without SUITE)", add_arguments, execute)
