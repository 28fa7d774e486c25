"""The rendered site in a real browser: headless Chromium over the DevTools protocol, from file://.

Checks per page: no console error, no uncaught exception, no failed load, no
request that leaves file://, the stylesheet applied, every chart drawn with
marks; and a screenshot of the overview that is not blank.

The DevTools client is a few dozen lines of stdlib (HTTP upgrade + WebSocket
frames) so the test needs no new dependency. Skipped only when Chromium is
missing and $CI is unset; under CI a missing Chromium fails the test.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite import ReportSection, analysis
from suite.report import render_site

FIXTURES = Path(__file__).parent / "fixtures"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT = 30.0


def find_chromium() -> str | None:
    explicit = os.environ.get("AMPSUITE_CHROMIUM")
    if explicit:
        return explicit
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


CHROMIUM = find_chromium()
if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip(
        "chromium is not installed (apt-get install chromium); required when CI is set", allow_module_level=True
    )


# ---------------------------------------------------------------------------
# a minimal DevTools (CDP) client over a WebSocket
# ---------------------------------------------------------------------------


class WebSocket:
    """Just enough RFC 6455 for the DevTools endpoint: masked text frames out, text frames in."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise ConnectionError(f"WebSocket handshake refused: {status!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                raise ConnectionError("DevTools connection closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])
        if len(payload) < 126:
            header.append(0x80 | len(payload))
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        mask = os.urandom(4)
        self.sock.sendall(bytes(header) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _send_control(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        frame = bytes([0x80 | opcode, 0x80 | len(payload)]) + mask
        self.sock.sendall(frame + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read(8))
            mask = self._read(4) if second & 0x80 else b""
            payload = self._read(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode == 0x9:
                self._send_control(0xA, payload)
                continue
            if opcode in (0x1, 0x2, 0x0):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


class DevTools:
    """Commands with ids; events are kept in order for the test to read."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        wanted = self.next_id
        self.ws.send(json.dumps({"id": wanted, "method": method, "params": params}))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(method)

    def wait_for(self, event: str) -> dict[str, Any]:
        for message in self.events:
            if message["method"] == event:
                self.events.remove(message)
                return message
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            received: dict[str, Any] = json.loads(self.ws.recv())
            if received.get("method") == event:
                return received
            if "method" in received:
                self.events.append(received)
        raise TimeoutError(event)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")


def _http_json(port: int, path: str) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += sock.recv(65536)
    return json.loads(body[:length])


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    if CHROMIUM is None:
        pytest.fail("CI is set but chromium is missing: install Debian's chromium package")
    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--mute-audio",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ws: WebSocket | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start (exit code {process.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        target = next(t for t in _http_json(port, "/json/list") if t.get("type") == "page")
        ws = WebSocket("127.0.0.1", port, "/devtools/page/" + target["id"])
        tools = DevTools(ws)
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.call(f"{domain}.enable")
        tools.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        yield tools
    finally:
        if ws is not None:
            ws.close()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    a = json.loads((FIXTURES / "results_a.json").read_text())
    b = json.loads((FIXTURES / "results_b.json").read_text())
    out = tmp_path_factory.mktemp("site")
    section = ReportSection("Plugin section", "<p>static plugin markup</p>", anchor="plugin")
    render_site([b], out, compare_with=a, history=analysis.history([a, b]), extra_sections=[section])
    return out


def problems(events: list[dict[str, Any]]) -> list[str]:
    """Console errors, exceptions, failed loads and any request that is not file: or data:."""
    found = []
    for event in events:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            found.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed":
            found.append(f"load failed: {params.get('errorText')}")
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:")):
                found.append(f"network request: {url}")
    return found


CHART_MARKS = """
Array.from(document.querySelectorAll('svg.chart')).map(svg => ({
  marks: svg.querySelectorAll('rect, path, circle').length,
  titled: Array.from(svg.querySelectorAll('rect, path, circle')).filter(m => m.querySelector('title')).length,
  width: svg.getBoundingClientRect().width,
}))
"""


def load_page(tools: DevTools, url: str) -> list[str]:
    tools.events.clear()
    tools.call("Page.navigate", url=url)
    tools.wait_for("Page.loadEventFired")
    tools.evaluate("document.readyState")  # drain the events the load produced
    return problems(tools.events)


def test_every_page_loads_cleanly_with_styles_and_drawn_charts(browser: DevTools, site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert len(pages) >= 5
    charts_seen = 0
    for page in pages:
        found = load_page(browser, page.as_uri())
        assert found == [], f"{page.name}: {found}"
        css = browser.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--ampsuite-css').trim()")
        assert css == "1", f"{page.name}: stylesheet not applied"
        assert browser.evaluate("document.querySelector('a[href=\"index.html\"]') !== null"), page.name
        assert browser.evaluate("document.querySelectorAll('script').length") == 0, page.name
        for chart in browser.evaluate(CHART_MARKS):
            charts_seen += 1
            assert chart["marks"] > 0 and chart["titled"] == chart["marks"], f"{page.name}: {chart}"
            assert chart["width"] > 100, f"{page.name}: chart not laid out: {chart}"
    assert charts_seen >= 12


def test_escaped_script_is_text_in_the_dom(browser: DevTools, site: Path) -> None:
    load_page(browser, (site / "index.html").as_uri())
    assert "<script>alert(1)</script>" in browser.evaluate("document.body.innerText")
    assert browser.evaluate("document.querySelectorAll('script').length") == 0


def test_overview_screenshot_is_not_blank(browser: DevTools, site: Path) -> None:
    from PIL import Image

    load_page(browser, (site / "index.html").as_uri())
    shot = browser.call("Page.captureScreenshot", format="png")
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    assert image.size == (1280, 900)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "screenshot is (nearly) a single colour"
    share = max(colours)[0] / (image.size[0] * image.size[1])
    assert share < 0.95, f"one colour covers {share:.0%} of the screenshot"
