"""A minimal headless Chromium driver over the DevTools protocol, for the dashboard browser test.

Starts Debian's ``chromium`` with no network, opens a page, collects console errors and uncaught
exceptions, returns element boxes and a full-page PNG screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def find_browser() -> str | None:
    """Path of a Chromium binary, or None."""
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


class Page:
    """One DevTools page session: ``call`` sends a command and returns its result, collecting events."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for ev in self.events:
            if ev["method"] == method:
                return ev
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        out = []
        for ev in self.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + json.dumps(p.get("args", []))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", "")[:500])
            elif m == "Network.loadingFailed":
                out.append("load failed: " + json.dumps(p)[:500])
        return out

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path, width: int) -> bytes:
        """A full-page PNG (the viewport resized to the page's height), also written to ``path``."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
        path.write_bytes(png)
        return png


@contextlib.contextmanager
def open_page(url: str, width: int = 1400, height: int = 900, timeout: float = 60.0) -> Iterator[Page]:
    """Start headless Chromium, open ``url`` and yield a :class:`Page` once it has loaded.

    :param url: the page (``file://`` URLs work; the network is not needed)
    :param width: viewport width
    :param height: initial viewport height
    :param timeout: seconds to wait for the browser and the page
    """
    from websockets.sync.client import connect

    browser = find_browser()
    if browser is None:
        raise FileNotFoundError("no chromium binary on PATH")
    profile = tempfile.mkdtemp(prefix="mg-chromium-")
    log = open(Path(profile).parent / f"{Path(profile).name}.log", "w")  # a file, so a chatty browser never blocks on a pipe
    proc = subprocess.Popen(
        [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env={**os.environ, "HOME": profile},
    )
    try:
        port = _devtools_port(proc, Path(profile), Path(log.name), timeout)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as resp:
            targets = json.load(resp)
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        with connect(ws_url, max_size=None, open_timeout=timeout) as ws:
            page = Page(ws)
            for domain in ("Page", "Runtime", "Log", "Network"):
                page.call(f"{domain}.enable")
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
            page.call("Page.navigate", url=url)
            page.wait_event("Page.loadEventFired", timeout=timeout)
            yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        Path(log.name).unlink(missing_ok=True)
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(proc: subprocess.Popen, profile: Path, log: Path, timeout: float) -> int:
    """The DevTools port Chromium chose (it writes ``DevToolsActivePort`` into the profile)."""
    deadline = time.monotonic() + timeout
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = log.read_text(errors="replace")
            raise RuntimeError(f"chromium exited with status {proc.returncode}: {err[-2000:]}")
        if marker.exists():
            text = marker.read_text().split()
            if text and re.fullmatch(r"\d+", text[0]):
                return int(text[0])
        time.sleep(0.1)
    raise TimeoutError(f"chromium did not open its DevTools port within {timeout} s")
