"""How long each page's first screen takes in Chromium, against the Inspector on the same server.

    .venv/bin/python benchmarks/first_screen.py [--repeats 3] [--json out.json]

Starts the app on the shipped runs (127.0.0.1, a fresh disk cache), then for each page: the
first visit (cold: nothing cached in the server) and `--repeats` later visits in fresh browser
contexts (warm: the server's caches hold the models and results). Times from navigation: "title"
until the page's title and controls are drawn (what a user first sees), "content" until its first
chart or table (for the data table its progress bar while it computes), "complete" until its main
content is drawn and no progress bar is left. Home (its training-curve chart) is the floor of a
chart in a fresh browser context: loading plotly.js alone takes about two seconds here. Printed as
medians, with the ratio of "content" to the Inspector's (the page users know); then the warm
median of a tab switch on an open page (click until the tab's content is drawn and the rerun done).
Run it when nothing else runs: it measures this machine, so it is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from damcha.views.token_view import TOKEN_VIEW_TITLE  # noqa: E402

# (name, address, what "first screen" waits for, what "complete" waits for)
PAGES = [
    ("inspector (digit; the baseline)", "inspector?run=digits-damcha", ".js-plotly-plot", ".js-plotly-plot"),
    ("home (the floor: one chart)", "?run=digits-damcha", ".js-plotly-plot", ".js-plotly-plot"),
    ("compare mechanisms (13 digit runs)", "compare?run=digits-damcha", "[data-testid='stDataFrame']", ".js-plotly-plot"),
    ("compare mechanisms (text runs)", "compare?run=text-damcha", "[data-testid='stDataFrame']", ".js-plotly-plot"),
    ("data table (359 digits)", "table?run=digits-damcha", "[data-testid='stProgress'], [data-testid='stDataFrame']",
     "[data-testid='stDataFrame']"),
    ("inspector (digit, MHA)", "inspector?run=digits-mha", ".js-plotly-plot", ".js-plotly-plot"),
    ("inspector (digit, DCMHA)", "inspector?run=digits-dcmha", ".js-plotly-plot", ".js-plotly-plot"),
    ("inspector (digit, MoA)", "inspector?run=digits-moa", ".js-plotly-plot", ".js-plotly-plot"),
    ("inspector (text, DAMCHA)", "inspector?run=text-damcha", ".js-plotly-plot", ".js-plotly-plot"),
    ("training dynamics (digit)", "dynamics?run=digits-damcha", ".js-plotly-plot", ".js-plotly-plot"),
    ("gradient contributions (digit)", "gradients?run=digits-damcha", ".js-plotly-plot", ".js-plotly-plot"),
    ("interventions (digit, DAMCHA)", "interventions?run=digits-damcha", ".js-plotly-plot", ".js-plotly-plot"),
    ("interventions (digit, MHA)", "interventions?run=digits-mha", ".js-plotly-plot", ".js-plotly-plot"),
    ("ablation, Table 3 (digit)", "ablation?run=digits-damcha", "[data-testid='stDataFrame']",
     "[data-testid='stDataFrame']"),
    ("evidence", "evidence?run=digits-damcha", "[data-testid='stDataFrame'], .js-plotly-plot",
     "[data-testid='stDataFrame'], .js-plotly-plot"),
    ("inspector, attention as text", "inspector?run=text-damcha&source=Validation+sample&tab=Attention+as+text",
     f"iframe[title='{TOKEN_VIEW_TITLE}']", f"iframe[title='{TOKEN_VIEW_TITLE}']"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cache: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "DAMCHA_CACHE": cache}
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app"), "--server.port", str(port),
                             "--server.headless", "true"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise SystemExit("the app did not start within 60 s")


def visit(browser, url: str, first: str, complete: str) -> tuple[float, float, float]:
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    t0 = time.perf_counter()
    page.goto(url)
    page.locator("h1").first.wait_for(timeout=300_000)
    t_title = time.perf_counter() - t0
    page.locator(first).first.wait_for(timeout=300_000)
    t_first = time.perf_counter() - t0
    page.locator(complete).first.wait_for(timeout=300_000)
    while page.locator("[data-testid='stProgress']").count():  # computing with progress shown
        page.wait_for_timeout(100)
    t_done = time.perf_counter() - t0
    errors = page.locator("[data-testid='stException']").count()
    context.close()
    if errors:
        raise SystemExit(f"{url}: {errors} exception(s) on the page")
    return t_title, t_first, t_done


# (name, address, the tab clicked, what the opened tab draws): a change inside a page already open
SWITCHES = [
    ("inspector (digit): to Contour & 3D", "inspector?run=digits-damcha", "Contour & 3D", ".js-plotly-plot"),
    ("inspector (digit): to Structures", "inspector?run=digits-damcha", "Structures", ".js-plotly-plot"),
    ("inspector (text): to Attention as text", "inspector?run=text-damcha", "Attention as text",
     f"iframe[title='{TOKEN_VIEW_TITLE}']"),
]


def wait_idle(page) -> None:
    """Until the script's rerun (if one started) has finished."""
    try:
        page.wait_for_selector("[data-test-script-state='running']", timeout=1500)
    except Exception:  # noqa: BLE001 (a rerun too quick to be seen running)
        pass
    page.wait_for_selector("[data-testid='stApp']:not([data-test-script-state='running'])", timeout=300_000)


def switch(browser, url: str, tab: str, drawn: str) -> float:
    """Seconds from clicking `tab` on a loaded page until the tab's content is drawn and the rerun done."""
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    page.goto(url)
    page.locator(".js-plotly-plot").first.wait_for(timeout=300_000)
    wait_idle(page)
    t0 = time.perf_counter()
    page.get_by_role("tab", name=tab, exact=True).click()
    wait_idle(page)
    page.locator(f"[role='tabpanel']:not([hidden]) {drawn}").first.wait_for(timeout=300_000)
    elapsed = time.perf_counter() - t0
    context.close()
    return elapsed


def main(argv=None) -> int:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="warm visits per page")
    ap.add_argument("--json", help="write the measurements here")
    args = ap.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("needs the system Chromium (apt-get install chromium)")
    cache = tempfile.mkdtemp(prefix="damcha-bench-cache-")
    proc, server = start_server(cache)
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            for name, address, first, complete in PAGES:
                url = f"{server}/{address}"
                cold = visit(browser, url, first, complete)
                warm = [visit(browser, url, first, complete) for _ in range(args.repeats)]
                row = {"page": name}
                for i, what in enumerate(("title", "content", "complete")):
                    row[f"cold_{what}_s"] = cold[i]
                    row[f"warm_{what}_s"] = statistics.median(w[i] for w in warm)
                rows.append(row)
            switches = []
            for name, address, tab, drawn in SWITCHES:
                times = [switch(browser, f"{server}/{address}", tab, drawn) for _ in range(args.repeats)]
                switches.append({"change": name, "warm_s": statistics.median(times)})
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(cache, ignore_errors=True)
    base = rows[0]
    print(f"{'page':38s} {'cold: title':>11s} {'content':>8s} {'complete':>9s}  {'warm: title':>11s} {'content':>8s} "
          f"{'complete':>9s}  {'content ÷ inspector':>19s}")
    for r in rows:
        print(f"{r['page']:38s} {r['cold_title_s']:10.2f}s {r['cold_content_s']:7.2f}s {r['cold_complete_s']:8.2f}s "
              f" {r['warm_title_s']:10.2f}s {r['warm_content_s']:7.2f}s {r['warm_complete_s']:8.2f}s "
              f" {r['warm_content_s'] / base['warm_content_s']:18.2f}x")
    print(f"\n{'change on an open page (warm)':50s} {'seconds':>8s}")
    for r in switches:
        print(f"{r['change']:50s} {r['warm_s']:7.2f}s")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows, "switches": switches}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
