"""The app in the system Chromium: a server started as a user starts it, a page, and the waits the
browser tests share (health endpoint, figures drawn and the status widget gone)."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def require_chromium():
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("CI must run the browser tests: install Debian's chromium package (.ci/run does)")
    print("skipping browser test: no chromium on PATH (apt-get install chromium)")
    pytest.skip("no system Chromium (apt-get install chromium); browser tests run in CI")


def require_static_export() -> None:
    """PNG/SVG/PDF export works here (kaleido with a system Chromium); skip with the reason elsewhere,
    fail in CI."""
    from damcha.views.export import static_export_status

    ok, message = static_export_status()
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail("CI must run the static export tests: install Debian's chromium (.ci/run does)")
    print(f"skipping static export: {message}")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(url: str, seconds: float = 60) -> None:
    """Wait for a Streamlit server's health endpoint to answer ok (a test failure after `seconds`)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the streamlit server at {url} did not answer within {seconds:g} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app as a user starts it, from another folder than the repository, with no settings on the
    command line but the port: the safe ones (loopback, 5 MB uploads) must hold by themselves."""
    require_chromium()
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit-server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app"), "--server.port", str(port)],
        cwd=tmp_path_factory.mktemp("elsewhere"), stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    exe = require_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 2400})
        yield pg
        browser.close()


def wait_for_figures(pg, n: int, timeout_s: float = 90) -> int:
    deadline = time.time() + timeout_s
    count = 0
    while time.time() < deadline:
        count = pg.locator(".js-plotly-plot").count()
        running = pg.locator("[data-testid='stStatusWidget']").count()
        if count >= n and not running:
            return count
        pg.wait_for_timeout(500)
    return count


SCRIPT_STATE = "document.querySelector(\"[data-testid='stApp']\")?.getAttribute('data-test-script-state')"


def settled(pg, timeout_s: float = 90) -> None:
    """Wait for the rerun an action asked for to end (Streamlit marks its app root with the script's
    state): first for it to start, a moment at most (it may have run already, or need no rerun), then
    for it to finish. An event, not a fixed pause."""
    try:
        pg.wait_for_function(f"{SCRIPT_STATE} === 'running'", timeout=2_000)
    except Exception:  # noqa: BLE001 — playwright's TimeoutError: the run ended before we looked, or none began
        pass
    pg.wait_for_function(f"{SCRIPT_STATE} === 'notRunning'", timeout=timeout_s * 1000)
