"""The fence of a shared server, in Chromium, as a hostile visitor tries it: the server is started
as a user shares it (`python -m damcha app --host … --allow-root DIR`, on a loopback address other
than 127.0.0.1, so the app treats it as shared), and the visitor types folders outside the fence,
`/`, a traversal, and follows a link to a run outside. Nothing outside is ever listed or drawn."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM_ARGS, free_port, require_chromium, settled, wait_until_healthy

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints"
HOST = "127.0.0.2"  # loopback, but not the address the app calls local: it behaves as a shared server


@pytest.fixture(scope="module")
def fenced_server(tmp_path_factory):
    exe = require_chromium()
    base = tmp_path_factory.mktemp("fence")
    allowed, outside = base / "allowed", base / "outside"
    shutil.copytree(SHIPPED / "digits-mha", allowed / "runs" / "digits-mha")
    noted = Path(shutil.copytree(SHIPPED / "digits-mha", allowed / "runs" / "noted"))
    config = json.loads((noted / "config.json").read_text())
    config["notes"] = [f"{NOTE} https://example.invalid/steal www.example.invalid me@example.invalid"]
    (noted / "config.json").write_text(json.dumps(config))
    shutil.copytree(SHIPPED / "digits-damcha", outside / "secret-run")
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "fenced-server.log", "w")
    env = {**os.environ, "DAMCHA_CHECKPOINTS": str(allowed / "runs")}
    proc = subprocess.Popen([sys.executable, "-m", "damcha", "app", "--host", HOST, "--port", str(port),
                             "--allow-root", str(allowed)], cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{HOST}:{port}"
    try:
        wait_until_healthy(url)
        yield url, exe, outside
    finally:
        proc.terminate()  # `damcha app` is the server itself (it execs streamlit): nothing outlives it
        proc.wait(timeout=20)
        log.close()
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)


REFUSED = "outside the folders this server allows"
NOTE = "Written by whoever made the run:"


def type_folder(page, folder: str) -> None:
    field = page.get_by_role("textbox", name="Run root")
    if not field.is_visible():
        page.get_by_text("Checkpoint folder").click()
    field.fill(folder)
    field.press("Enter")
    settled(page)
    page.wait_for_function("!document.querySelector(\"[data-testid='stStatusWidget']\")", timeout=60_000)


def refused_after_typing(page, folder: str, folder_in_use: str) -> None:
    """Type the folder in use first, so the last refusal goes away, then the hostile one, and wait
    for its refusal to appear: each folder is judged on the page its own rerun drew (events, not a
    pause that a slow machine outruns)."""
    type_folder(page, folder_in_use)
    page.get_by_text(REFUSED).wait_for(state="detached", timeout=60_000)
    type_folder(page, folder)
    page.get_by_text(REFUSED).wait_for(timeout=60_000)


def test_a_visitor_cannot_reach_outside_the_fence(fenced_server):
    from playwright.sync_api import sync_playwright

    url, exe, outside = fenced_server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(url)
        page.get_by_text("Runs in runs").wait_for(timeout=60_000)
        page.get_by_text("Checkpoint folder").click()
        folder_in_use = page.get_by_role("textbox", name="Run root").input_value()
        for folder in ("/", "/etc", str(outside), str(outside.parent / "allowed" / ".." / "outside"), "/proc/self"):
            refused_after_typing(page, folder, folder_in_use)
            text = page.inner_text("body")
            assert REFUSED in text, folder
            assert "secret-run" not in text and "Runs in /" not in text and "Runs in outside" not in text, folder
            assert "Runs in runs" in text and "digits-mha" in text, folder  # the folder in use stays
            assert page.locator(".stException").count() == 0, folder
            if folder == "/":
                page.screenshot(path=str(ARTIFACTS / "fenced-home-after-typing-root.png"), full_page=True)
        page.goto(f"{url}/inspector?run=secret-run")
        page.get_by_text("is not in this folder").wait_for(timeout=60_000)
        assert "secret-run" not in page.inner_text("[data-testid='stMain']")
        assert page.locator(".stException").count() == 0
        browser.close()


def test_a_link_in_a_runs_notes_is_shown_as_text_never_as_a_link(fenced_server):
    """A run's notes are the run's author's words: a bare https:// address, www. name or e-mail address in them
    reads as written and is not a link a visitor could follow."""
    from playwright.sync_api import sync_playwright

    url, exe, _ = fenced_server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(f"{url}/inspector?run=noted")
        note = page.get_by_text(NOTE)
        note.wait_for(timeout=60_000)
        shown = note.inner_text().replace("\u2060", "")
        assert "https://example.invalid/steal" in shown and "me@example.invalid" in shown, shown
        assert page.locator("a[href*='example.invalid']").count() == 0, "a note's address became a link"
        browser.close()
