"""The app in the system Chromium: start the server on 127.0.0.1, upload an image and a text,
wait for the figures, check no exception box, save screenshots under test-artifacts/."""

import os
import time
import urllib.request

from tests.support.browser import ARTIFACTS, ROOT, settled, wait_for_figures
from tests.support.images import handwritten_digit


def _upload(page, url: str, source: str, path) -> None:
    """Open the inspector at url, choose the upload source and give it the file."""
    page.goto(url)
    page.get_by_text(source).click()
    page.locator("input[type=file]").set_input_files(str(path))


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on `port` (IPv4 and IPv6), from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if int(hex_port, 16) == port and state == "0A":  # LISTEN
                found.add(address)
    return found


def test_a_server_started_from_another_folder_keeps_the_safe_settings(server, page):
    port = int(server.rsplit(":", 1)[1])
    assert listening_addresses(port) == {"0100007F"}, "listens on 127.0.0.1 only"
    page.goto(f"{server}/inspector?run=digits-damcha&source=Upload+an+image")
    page.get_by_text("5MB per file").wait_for(timeout=60_000)
    assert page.get_by_text("This server listens on").count() == 0
    assert page.locator(".stException").count() == 0


def test_inspector_with_an_uploaded_digit_photo(server, page, tmp_path):
    photo = tmp_path / "digit-photo.jpg"
    photo.write_bytes(handwritten_digit("0", fmt="JPEG"))
    _upload(page, f"{server}/inspector?run=digits-damcha", "Upload an image", photo)
    assert wait_for_figures(page, 2) >= 2  # the input and the open tab's figure (hidden tabs build nothing)
    page.get_by_text("image digit-photo.jpg").wait_for(timeout=60_000)
    page.get_by_role("tab", name="Decomposition").click()
    settled(page)
    assert page.locator(".stException").count() == 0
    page.screenshot(path=str(ARTIFACTS / "inspector-digit-upload.png"), full_page=True)


def test_inspector_with_an_uploaded_text(server, page, tmp_path):
    text = tmp_path / "paragraph.txt"
    text.write_text("A transformer head compares a query with every key. DAMCHA makes that comparison "
                    "depend on the input itself, through a metric computed from the context.\n", encoding="utf-8")
    _upload(page, f"{server}/inspector?run=text-damcha", "Upload a text file", text)
    page.get_by_text("file paragraph.txt").wait_for(timeout=60_000)
    assert wait_for_figures(page, 1) >= 1  # the open tab's figure (a text is shown as text)
    page.get_by_role("tab", name="Attention", exact=True).click()
    settled(page)
    assert page.locator(".stException").count() == 0
    page.screenshot(path=str(ARTIFACTS / "inspector-text-upload.png"), full_page=True)


def test_inspector_with_an_uploaded_colour_photo(server, page, tmp_path):
    from PIL import Image

    from damcha.inputs.datasets.sample_images import sample_image_crops

    photo = tmp_path / "holiday.jpg"
    Image.fromarray(sample_image_crops(0)["val"][5]).resize((400, 300)).save(photo, quality=92)
    _upload(page, f"{server}/inspector?run=images-damcha&position=30", "Upload a colour photo", photo)
    page.get_by_text("photo holiday.jpg").wait_for(timeout=120_000)  # the upload is processed while the other worker loads the cores
    assert wait_for_figures(page, 2) >= 2
    page.get_by_role("tab", name="Loss & prediction").click()
    assert wait_for_figures(page, 2) >= 2
    page.get_by_text("Completion from the top half").first.wait_for(timeout=60_000)
    assert page.locator(".stException").count() == 0
    page.screenshot(path=str(ARTIFACTS / "inspector-colour-photo.png"), full_page=True)


def test_export_a_pdf_and_the_zip_from_the_app(server, page, tmp_path):
    page.goto(f"{server}/inspector?run=digits-damcha&sample=4")
    assert wait_for_figures(page, 2) >= 2
    page.get_by_role("button", name="Export", exact=True).first.click()
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name="PDF", exact=True).first.click()
    pdf = tmp_path / "figure.pdf"
    dl.value.save_as(pdf)
    assert pdf.read_bytes().startswith(b"%PDF")
    page.keyboard.press("Escape")
    page.get_by_role("button", name="Export all").click()  # made with its progress shown, then offered
    with page.expect_download(timeout=180_000) as dl:
        page.get_by_role("button", name="Download the ZIP").click(timeout=180_000)
    page.screenshot(path=str(ARTIFACTS / "export-all.png"), full_page=True)
    bundle = tmp_path / "all.zip"
    dl.value.save_as(bundle)
    import zipfile

    names = zipfile.ZipFile(bundle).namelist()
    assert "manifest.json" in names and any(n.endswith(".pdf") for n in names)
    assert page.locator(".stException").count() == 0


# What each exported file must begin with: a file is what its name says.
MAGIC = {".png": (b"\x89PNG\r\n\x1a\n",), ".svg": (b"<svg",), ".pdf": (b"%PDF",), ".html": (b"<html", b"<!doctype html"),
         ".csv": (b"array,row,col,value",), ".npz": (b"PK\x03\x04",), ".provenance.json": (b"{",)}


def test_downloads_clicked_in_quick_succession_are_each_what_their_name_says(server, page, tmp_path):
    """Every export button of one figure clicked 150 ms apart (the race that handed a PDF over as input.png):
    each file arrives, begins as its format does, and the SVG and PDF are this figure's."""
    page.goto(f"{server}/inspector?run=digits-damcha&sample=4")
    assert wait_for_figures(page, 2) >= 2
    page.get_by_role("button", name="Export", exact=True).first.click()
    downloads = []
    page.on("download", lambda download: downloads.append(download))
    for label in ("PNG", "SVG", "PDF", "HTML", "CSV", "NPZ", "Provenance JSON"):
        page.get_by_role("button", name=label, exact=True).first.click()
        page.wait_for_timeout(150)
    deadline = time.time() + 180
    while len(downloads) < 7 and time.time() < deadline:
        page.wait_for_timeout(500)
    saved = {}
    for download in downloads:
        path = tmp_path / download.suggested_filename
        download.save_as(path)
        saved[download.suggested_filename] = path.read_bytes()
    assert len(saved) == 7, sorted(saved)
    stems = {name.split(".")[0] for name in saved}
    assert len(stems) == 1, stems  # one figure's files
    for name, raw in saved.items():
        suffix = ".provenance.json" if name.endswith(".provenance.json") else "." + name.rsplit(".", 1)[1]
        head = raw.lstrip()[:40].lower() if suffix == ".html" else raw
        assert head.startswith(MAGIC[suffix]), (name, raw[:20])
    stem = stems.pop()
    assert f'"figure": "{stem}"'.encode() in saved[f"{stem}.provenance.json"]
    assert page.locator(".stException").count() == 0


def test_server_keeps_answering_under_a_bounded_load(server, page):
    """Four concurrent browser pages on the inspector (bounded in number and time), while the
    health endpoint is polled: every page renders its figures and the server never stops answering."""
    import threading

    health_failures, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            try:
                # 4 sessions share the cores with the other test worker (pytest-xdist): 30 s to answer
                urllib.request.urlopen(f"{server}/_stcore/health", timeout=30).read()
            except OSError as e:
                health_failures.append(str(e))
            time.sleep(0.5)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        browser = page.context.browser
        runs = ["digits-damcha", "text-damcha", "digits-cls-damcha", "images-damcha"]  # each modality, a classifier
        pages = [browser.new_page(viewport={"width": 1200, "height": 1600}) for _ in runs]
        for pg, run in zip(pages, runs):
            pg.goto(f"{server}/inspector?run={run}", wait_until="commit")
        counts = [wait_for_figures(pg, 1, timeout_s=120) for pg in pages]  # a text run's first screen: one
        errors = [pg.locator(".stException").count() for pg in pages]
        for pg in pages:
            pg.close()
    finally:
        stop.set()
        poller.join()
    assert all(c >= 1 for c in counts), counts
    assert not any(errors) and not health_failures


def _shown_view(pg, with_tab: bool) -> tuple[str, str, str]:
    """(run, epoch, active inspector tab or '') as the page shows them."""
    thumb = pg.locator("[data-testid='stSidebar'] [data-testid='stSliderThumbValue']").first
    if with_tab:
        pg.get_by_role("tab", selected=True).first.wait_for(timeout=90_000)
    epoch = ""
    for _ in range(120):  # the slider's value is drawn a moment after the rest
        epoch = thumb.inner_text() if thumb.count() else ""
        if epoch.strip():
            break
        pg.wait_for_timeout(250)
    run = pg.locator("[data-testid='stSidebar'] input[aria-label='Run']").input_value()
    tab = pg.get_by_role("tab", selected=True).first.inner_text() if with_tab else ""
    return run.strip(), epoch.strip(), tab.strip()


def test_a_copied_link_reopens_the_same_view_for_each_data_sets_default_and_last_run(server, page):
    """Regression: the run was dropped from the address when it was its data set's default, so a
    copied link opened another run. For each data set's default run, and the last run of one data set
    (the address is built the same way for every other run): open a non-default view (its first
    epoch; on the inspector, for a default run, the Attention tab), take the address the browser
    shows, open it in a fresh context and find the same run, epoch and tab."""
    from damcha.runs.checkpoints import list_runs

    browser = page.context.browser
    shipped = list_runs(ROOT / "checkpoints")[0]
    datasets = {r.dataset for r in shipped}
    with_tab = {next(r.name for r in shipped if r.dataset == d) for d in datasets}
    last = {[r.name for r in shipped if r.dataset == d][-1] for d in sorted(datasets)[:1]}
    runs = [r for r in shipped if r.name in with_tab | last]
    fresh = browser.new_context(viewport={"width": 1400, "height": 1600})
    other = fresh.new_page()
    try:
        for run in runs:
            tab = run.name in with_tab
            view = f"inspector?run={run.name}&epoch={run.epochs[0]}&tab=Attention" if tab else \
                f"?run={run.name}&epoch={run.epochs[0]}"
            expected = (run.name, str(run.epochs[0]), "Attention" if tab else "")
            page.goto(f"{server}/{view}")
            assert _shown_view(page, tab) == expected
            # the app writes the kept values into the address a moment after drawing them
            page.wait_for_function("([run, epoch]) => location.href.includes(run) && location.href.includes(epoch)",
                                   arg=[f"run={run.name}", f"epoch={run.epochs[0]}"], timeout=30_000)
            copied = page.url
            assert f"run={run.name}" in copied and f"epoch={run.epochs[0]}" in copied, copied
            other.goto(copied)  # another browser context: no session, no cookies, only the address
            assert _shown_view(other, tab) == expected, (run.name, copied)
            assert other.locator(".stException").count() == 0
    finally:
        fresh.close()


def test_a_text_over_the_upload_limit_is_refused_in_words_within_seconds(server, page, tmp_path):
    from damcha.inputs.uploads import MAX_UPLOAD_BYTES

    huge = tmp_path / "huge.txt"
    huge.write_bytes((b"The quick brown fox jumps over the lazy dog. " * 120_000)[:MAX_UPLOAD_BYTES + 100_000])
    _upload(page, f"{server}/inspector?run=text-damcha", "Upload a text file", huge)
    page.get_by_text("the uploader refuses a larger one itself").wait_for(timeout=30_000)
    page.get_by_text("Files up to 5 MB (5,000,000 bytes)").wait_for(timeout=5_000)
    assert page.locator(".stException").count() == 0
    page.screenshot(path=str(ARTIFACTS / "inspector-text-over-the-limit.png"), full_page=True)


def test_an_uploaded_files_name_never_becomes_a_link(server, page, tmp_path):
    for name in ("www.evil.example.txt", "write to me@evil.example.txt", "[click](evil.example).txt"):
        path = tmp_path / name
        path.write_text("Some text for the model to read. " * 4, encoding="utf-8")
        _upload(page, f"{server}/inspector?run=text-damcha", "Upload a text file", path)
        page.get_by_text("bytes; the model reads").first.wait_for(timeout=60_000)
        hrefs = page.locator("[data-testid=stMain] a").evaluate_all("links => links.map(a => a.href)")
        assert not [h for h in hrefs if "evil" in h], (name, hrefs)


def test_several_downloads_clicked_in_a_row_all_arrive(server, page, tmp_path):
    page.goto(f"{server}/inspector?run=digits-damcha&sample=4")
    assert wait_for_figures(page, 2) >= 2
    page.get_by_role("button", name="Export", exact=True).first.click()
    downloads = []
    page.on("download", lambda download: downloads.append(download))
    for fmt in ("CSV", "HTML", "NPZ", "Provenance JSON", "CSV"):  # quickly, each before the last has settled
        page.get_by_role("button", name=fmt, exact=True).first.click()
        page.wait_for_timeout(300)
    deadline = time.time() + 60
    while len(downloads) < 5 and time.time() < deadline:
        page.wait_for_timeout(250)
    names = [d.suggested_filename for d in downloads]
    assert len(names) == 5, names
    assert sorted({n.rsplit(".", 1)[-1] for n in names}) == ["csv", "html", "json", "npz"], names
    for i, d in enumerate(downloads):
        d.save_as(tmp_path / f"{i}-{d.suggested_filename}")
        assert (tmp_path / f"{i}-{d.suggested_filename}").stat().st_size > 0
    assert page.locator(".stException").count() == 0
