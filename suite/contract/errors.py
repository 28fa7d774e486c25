"""Errors that reach the user as one line, and the exit codes of the command."""

from __future__ import annotations

import enum
import errno


class ExitCode(enum.IntEnum):
    """Exit codes of ``ampsuite``; stable, documented in the README."""

    OK = 0
    """Every cell passed or was skipped with a reason."""
    CELLS_FAILED = 1
    """At least one cell ended failed, oom, timeout or crashed; or, with ``report --fail-on-regression``, a cell
    regressed against the run it is compared with (as pytest exits 1 when a test fails)."""
    INTERRUPTED = 2
    """The run was interrupted (Ctrl-C or SIGTERM); finished records were kept."""
    INTERNAL_ERROR = 3
    """A bug in ampsuite itself; the traceback is printed."""
    USAGE_ERROR = 4
    """Bad command line, suite file, results file or plugin."""
    NO_CELLS = 5
    """The suite expanded (or ``-k`` narrowed it) to no cell at all."""
    OUTPUT_ERROR = 6
    """The results file or the report could not be written (read-only folder, full disk, ...);
    the last results file written stays intact."""


class AmpsuiteError(Exception):
    """Base of the errors that are shown to the user as one line."""

    exit_code = ExitCode.USAGE_ERROR


class UsageError(AmpsuiteError):
    """Bad command-line usage."""


class SuiteFileError(AmpsuiteError):
    """A suite file that cannot be read or does not validate.

    The message always names the file and the key path, like
    ``suite.toml: workloads.resnet.batch_size: expected an integer > 0, got 'x'``.
    """

    def __init__(self, path: str, key: str, message: str) -> None:
        self.path = path
        self.key = key
        self.message = message
        where = f"{path}: {key}: " if key else f"{path}: "
        super().__init__(where + message)


class PluginError(AmpsuiteError):
    """A plugin that cannot be loaded or that breaks a hook contract.

    The message names the plugin and the fault.
    """

    def __init__(self, plugin: str, message: str) -> None:
        self.plugin = plugin
        self.message = message
        super().__init__(f"plugin {plugin!r}: {message}")


class PluginContractError(PluginError):
    """A plugin's hook or step returned something its contract does not allow (raised inside a worker).

    The message names the plugin, the hook or phase, what was expected and what came, like
    ``plugin 'toy': build returned a tuple, expected a TrainStep``.
    """

    def __init__(self, plugin: str, hook: str, expected: str, got: object) -> None:
        self.hook = hook
        super().__init__(plugin, f"{hook} returned {_kind(got)}, expected {expected}")


def _kind(value: object) -> str:
    if value is None:
        return "None"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


class ResultsFileError(AmpsuiteError):
    """A results file that is missing, corrupt, of an unknown version or incomparable."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


class OutputError(AmpsuiteError):
    """The operating system refused to write a results file, a lock file or a report.

    One line naming the path and the error, like
    ``reports/x/results.json: cannot write: No space left on device (errno ENOSPC)``.
    """

    exit_code = ExitCode.OUTPUT_ERROR

    def __init__(self, path: str, exc: OSError) -> None:
        self.path = path
        self.errno = exc.errno
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        reason = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(f"{path}: cannot write: {reason} (errno {name})")


class ResultsLockedError(AmpsuiteError):
    """Another ``ampsuite run`` holds the results file; the message names the holder."""

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(
            f"{path}: in use by another run ({holder}); wait for it, pass --wait-lock, or choose another -o"
        )


class SkipCell(Exception):
    """Raised by a workload or technique inside a worker to skip its cell.

    The message is recorded as the cell's skip reason.
    """


class CaptureFailed(Exception):
    """A technique could not capture or compile the step; the cause is chained."""
