"""Load a page in headless Chromium and report every request it made and every error it logged.

This is how ampsuite checks that a published site (its own report, or asv's)
works offline and draws: Chromium
runs with every host name except 127.0.0.1 resolving to nothing
(``--host-resolver-rules``), and the page is driven over the DevTools
protocol on a pipe (``--remote-debugging-pipe``: no port, no extra Python
package), which reports each request (``Network``), console message
(``Runtime``, ``Log``) and uncaught exception. :func:`serve` is a static file
server on 127.0.0.1 for the site.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import http.server
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BLOCK_OTHER_HOSTS", "BrowserError", "PageReport", "find_chromium", "load_page", "serve"]

BLOCK_OTHER_HOSTS = "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
"""Chromium's ``--host-resolver-rules``: no host name but 127.0.0.1 resolves."""

CHROMIUM_ENV = "AMPSUITE_CHROMIUM"
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(RuntimeError):
    """Chromium could not be started or stopped answering."""


@dataclass
class PageReport:
    """What one page load did.

    Attributes:
        requests: every URL the page requested, in order.
        failed: ``"URL: reason"`` for requests that failed or got an HTTP error status.
        console: ``"LEVEL: text"`` for console messages and log entries of level error or warning.
        exceptions: uncaught JavaScript exceptions.
        values: the result of each expression given to :func:`load_page`, by name.
    """

    url: str
    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)

    def errors(self) -> list[str]:
        """Failed requests, console errors and exceptions: all empty on a page that works."""
        return self.failed + [c for c in self.console if c.startswith("error:")] + self.exceptions

    def offsite(self, origin: str) -> list[str]:
        """Requests that went anywhere but ``origin`` (``data:`` and ``blob:`` URLs stay in the page)."""
        return [u for u in self.requests if not (u.startswith(origin) or u.startswith(("data:", "blob:", "about:")))]


def find_chromium() -> str | None:
    """``$AMPSUITE_CHROMIUM``, else the first Chromium or Chrome on PATH."""
    explicit = os.environ.get(CHROMIUM_ENV)
    if explicit:
        return explicit
    return next((p for p in map(shutil.which, _CANDIDATES) if p), None)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(directory: str | Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) for the duration; yields the origin URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Devtools:
    """The DevTools protocol over Chromium's pipe: JSON messages ended by NUL bytes."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self._write = os.fdopen(write_fd, "wb", buffering=0)
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        self._next_id = 0
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        buffer = b""
        while True:
            chunk = self._read.read(65536)
            if not chunk:
                with self._cond:
                    self._replies[-1] = {"closed": True}
                    self._cond.notify_all()
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._replies[message["id"]] = message
                        self._cond.notify_all()
                else:
                    self.events.put(message)

    def call(
        self, method: str, params: Mapping[str, Any] | None = None, session: str | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": dict(params or {})}
        if session is not None:
            message["sessionId"] = session
        self._write.write(json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                if -1 in self._replies:
                    raise BrowserError(f"Chromium closed the DevTools pipe during {method}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"no answer to {method} within {timeout} s")
                self._cond.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def close_input(self) -> None:
        """Close Chromium's command pipe (it exits when asked to, or when this closes)."""
        with contextlib.suppress(OSError):
            self._write.close()

    def close_output(self) -> None:
        """After Chromium exited: let the reader see the end of its pipe, then close it."""
        self._reader.join(timeout=10)
        with contextlib.suppress(OSError):
            self._read.close()


def _record(event: dict[str, Any], report: PageReport, urls: dict[str, str]) -> bool:
    """Fold one DevTools event into ``report``; True when it is the page's load event."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Network.requestWillBeSent":
        urls[params["requestId"]] = params["request"]["url"]
        report.requests.append(params["request"]["url"])
    elif method == "Network.loadingFailed":
        report.failed.append(f"{urls.get(params['requestId'], '?')}: {params.get('errorText')}")
    elif method == "Network.responseReceived" and int(params["response"].get("status", 0)) >= 400:
        report.failed.append(f"{params['response']['url']}: HTTP {params['response']['status']}")
    elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
        level = "warning" if params["type"] == "warning" else "error"
        report.console.append(f"{level}: {text}")
    elif method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        report.exceptions.append(str(details.get("exception", {}).get("description") or details.get("text")))
    elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
        entry = params["entry"]
        report.console.append(f"{entry['level']}: {entry.get('text')} {entry.get('url', '')}".rstrip())
    return method == "Page.loadEventFired"


def load_page(
    url: str,
    *,
    expressions: Mapping[str, str] | None = None,
    hashes: Sequence[str] = (),
    ready: Mapping[str, str] | None = None,
    settle: float = 1.0,
    timeout: float = 60.0,
    chromium: str | None = None,
    screenshots: str | Path | None = None,
    width: int | None = None,
) -> PageReport:
    """Open ``url`` in headless Chromium that can reach no host but 127.0.0.1.

    :param expressions: JavaScript expressions evaluated after the page (and each
        of ``hashes``) settled; their JSON values land in ``PageReport.values``
        under their name, suffixed ``@HASH`` for those evaluated after a hash.
    :param hashes: location hashes visited in turn after the load (asv's pages
        are hash routes).
    :param ready: JavaScript conditions, by hash (``""`` for the first load),
        polled until true (within ``timeout``) before the page counts as drawn:
        pages fetch and draw their data after the load event.
    :param settle: seconds to keep collecting events once the page is ready
        (late requests, errors after drawing).
    :param screenshots: a folder for a PNG of the page after the load and after
        each hash (``page.png``, ``page-1.png``, ...), to look at what it shows.
    :param width: viewport width in CSS pixels (height 900), e.g. to check for horizontal overflow.
    :raises BrowserError: no Chromium, or it did not load the page in ``timeout``.
    """
    exe = chromium or find_chromium()
    if exe is None:
        raise BrowserError(f"no Chromium found (install the chromium package, or set ${CHROMIUM_ENV})")
    report = PageReport(url)
    urls: dict[str, str] = {}
    to_chrome_r, to_chrome_w = _pipe_end_above(os.pipe(), 0)
    from_chrome_r, from_chrome_w = _pipe_end_above(os.pipe(), 1)
    with tempfile.TemporaryDirectory(prefix="ampsuite-chromium-") as profile:
        flags = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            f"--host-resolver-rules={BLOCK_OTHER_HOSTS}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # Chromium reads commands on fd 3 and writes replies on fd 4; bash moves the pipe ends
        # there (they are numbered 10 and up, so no move overwrites the other end).
        shell = f'exec 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-; exec "$@"'
        log = open(Path(profile) / "chromium.log", "wb")  # noqa: SIM115  # closed below, after Chromium exits
        proc = subprocess.Popen(
            [_bash(), "-c", shell, "bash", exe, *flags],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        tools = _Devtools(to_chrome_w, from_chrome_r)
        try:
            target = tools.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
            session = tools.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Network", "Runtime", "Log", "Page"):
                tools.call(f"{domain}.enable", session=session)
            if width is not None:
                metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
                tools.call("Emulation.setDeviceMetricsOverride", metrics, session=session)
            tools.call("Page.navigate", {"url": url}, session=session)
            deadline = time.monotonic() + timeout
            loaded = False
            while not loaded:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"{url} did not finish loading within {timeout} s")
                with contextlib.suppress(queue.Empty):
                    event = tools.events.get(timeout=min(left, 0.5))
                    loaded = _record(event, report, urls) and event.get("sessionId") == session

            def evaluate(expression: str) -> Any:
                reply = tools.call(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
                )
                return reply.get("result", {}).get("value")

            def drain(seconds: float) -> None:
                end = time.monotonic() + seconds
                while (left := end - time.monotonic()) > 0:
                    with contextlib.suppress(queue.Empty):
                        _record(tools.events.get(timeout=min(left, 0.2)), report, urls)

            def settle_and_evaluate(location_hash: str, shot: str) -> None:
                condition = (ready or {}).get(location_hash)
                give_up = time.monotonic() + timeout
                while condition and not evaluate(condition):
                    if time.monotonic() > give_up:
                        raise BrowserError(f"{url}{location_hash}: {condition} still false after {timeout} s")
                    drain(0.2)
                drain(settle)
                suffix = f"@{location_hash}" if location_hash else ""
                for name, expression in (expressions or {}).items():
                    report.values[name + suffix] = evaluate(expression)
                if screenshots is not None:
                    png = tools.call("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
                    Path(screenshots).mkdir(parents=True, exist_ok=True)
                    (Path(screenshots) / shot).write_bytes(base64.b64decode(png))

            settle_and_evaluate("", "page.png")
            for i, location_hash in enumerate(hashes, 1):
                tools.call(
                    "Runtime.evaluate", {"expression": f"location.hash = {json.dumps(location_hash)}"}, session=session
                )
                settle_and_evaluate(location_hash, f"page-{i}.png")
            with contextlib.suppress(BrowserError):
                tools.call("Browser.close", timeout=10)
        except BrowserError as exc:
            raise BrowserError(f"{exc}; Chromium's log: {_tail(Path(profile) / 'chromium.log')}") from exc
        finally:
            tools.close_input()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            tools.close_output()
            log.close()
    return report


def _pipe_end_above(ends: tuple[int, int], which: int, lowest: int = 10) -> tuple[int, int]:
    """The pipe ``ends`` with end ``which`` (the one Chromium gets) moved to a descriptor >= ``lowest``."""
    moved = fcntl.fcntl(ends[which], fcntl.F_DUPFD_CLOEXEC, lowest)
    os.close(ends[which])
    return (moved, ends[1]) if which == 0 else (ends[0], moved)


def _bash() -> str:
    found = shutil.which("bash")
    if found is None:
        raise BrowserError("bash is needed to hand Chromium its DevTools pipe")
    return found


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(none)"
