"""Export for papers: every format checked for what a journal would need. Static formats need
the system Chromium: in CI they must run, elsewhere they skip with a reason when it is absent."""

import io
import json
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

from damcha.views import figures
from damcha.views.export import (
    ExportItem,
    ExportSettings,
    Provenance,
    data_csv,
    data_npz,
    figure_bytes,
    figure_data,
    read_data_csv,
    write_item,
    zip_bundle,
)
from tests.support.browser import require_static_export

ROOT = Path(__file__).resolve().parents[2]
M = np.random.default_rng(0).normal(size=(8, 8))
FIG = figures.metric_heatmap_figure(M, 4, "Unique title 7319")


def test_png_has_signature_and_requested_pixel_size():
    require_static_export()
    raw = figure_bytes(FIG, "png", ExportSettings(width=500, height=400, scale=2))
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", raw[16:24]) == (1000, 800)


def test_svg_parses_and_contains_the_text():
    require_static_export()
    raw = figure_bytes(FIG, "svg")
    root = ET.fromstring(raw)
    assert root.tag.endswith("svg")
    text = " ".join(t for t in root.itertext())
    assert "Unique title 7319" in text and "head 1" in text


def test_pdf_has_one_page():
    require_static_export()
    raw = figure_bytes(FIG, "pdf")
    assert raw.startswith(b"%PDF")
    assert len(re.findall(rb"/Type\s*/Page(?!s)", raw)) == 1


def test_html_is_standalone_and_offline():
    raw = figure_bytes(FIG, "html").decode()
    assert "Unique title 7319" in raw and "Plotly.newPlot" in raw
    tags = re.findall(r"<(?:script|link)[^>]*>", raw)
    assert tags and not any("src=" in t or "href=" in t for t in tags)  # plotly.js is inline; nothing is fetched


def test_csv_and_npz_round_trip_to_the_arrays_shown():
    fig = figures.metric_panels_figure({"a": M, "b": -M.T}, 4)
    data = figure_data(fig)
    assert len(data) == 2
    np.testing.assert_array_equal(list(data.values())[0], M)
    back = read_data_csv(data_csv(data))
    for k in data:
        np.testing.assert_array_equal(back[k], data[k])
    npz = np.load(io.BytesIO(data_npz(data)))
    for k in data:
        np.testing.assert_array_equal(npz[k], data[k])
    curves = figure_data(figures.training_curves_figure([{"epoch": 0, "val_nll": 2.5}, {"epoch": 3, "val_nll": 1.5}],
                                                        ["val_nll"]))
    np.testing.assert_array_equal(curves["trace0_val_nll_x"], [0, 3])
    np.testing.assert_array_equal(curves["trace0_val_nll_y"], [2.5, 1.5])


def test_without_chromium_static_formats_say_how_to_enable_them(monkeypatch):
    import damcha.views.export as export

    monkeypatch.setattr(export, "chromium_path", lambda: None)
    ok, message = export.static_export_status()
    assert not ok and "apt-get install chromium" in message
    with pytest.raises(RuntimeError, match="apt-get install chromium"):
        export.figure_bytes(FIG, "png")
    assert export.figure_bytes(FIG, "html")  # HTML and data still work
    assert export.data_csv(export.figure_data(FIG))


def test_zip_holds_what_it_lists_and_interrupted_writes_leave_nothing(tmp_path, monkeypatch):
    items = [ExportItem("one", FIG, Provenance.of("metric")),
             ExportItem("two", figures.head_by_head_figure(np.ones((2, 2))), Provenance("two"))]
    raw = zip_bundle(items, ["html", "csv", "npz"])
    z = zipfile.ZipFile(io.BytesIO(raw))
    manifest = json.loads(z.read("manifest.json"))
    listed = {f for entry in manifest for f in entry["files"]}
    assert listed | {"manifest.json"} == set(z.namelist())
    assert {"one.html", "one.csv", "one.npz", "one.provenance.json", "two.html"} <= listed
    import damcha.views.export as export

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "data_npz", boom)
    with pytest.raises(KeyboardInterrupt):
        write_item(items[0], tmp_path / "out", ["npz"])
    assert not list((tmp_path / "out").glob("*"))  # no half-written file under any name


def test_cli_figure_set_on_a_shipped_run_and_regeneration_from_provenance(tmp_path):
    require_static_export()
    out = tmp_path / "figs"
    cmd = [sys.executable, "-m", "damcha", "figures", "--run", str(ROOT / "checkpoints" / "digits-damcha"),
           "--epochs", "0,40", "--val-index", "2", "--figures", "metric,decomposition,block_norms_residue",
           "--formats", "png,svg,pdf,html,csv,npz", "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    names = {p.name for p in out.iterdir()}
    for epoch in ("0000", "0040"):
        for fig in ("metric", "decomposition", "block_norms_residue"):
            for ext in ("png", "svg", "pdf", "html", "csv", "npz", "provenance.json"):
                assert f"digits-damcha_e{epoch}_{fig}.{ext}" in names
    prov_path = out / "digits-damcha_e0040_metric.provenance.json"
    prov = json.loads(prov_path.read_text())
    assert prov["epoch"] == 40 and prov["checkpoint_sha256"] and prov["input_tokens"] and prov["package_version"]
    again = tmp_path / "again"
    result = subprocess.run([sys.executable, "-m", "damcha", "figures", "--from-provenance", str(prov_path),
                             "--formats", "csv", "--out", str(again)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    first = read_data_csv((out / "digits-damcha_e0040_metric.csv").read_bytes())
    second = read_data_csv((again / "digits-damcha_e0040_metric.csv").read_bytes())
    for k in first:
        np.testing.assert_array_equal(first[k], second[k])


def test_cli_reports_bad_input_clearly(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    result = subprocess.run([sys.executable, "-m", "damcha", "figures", "--run", str(ROOT / "checkpoints" / "digits-damcha"),
                             "--image", str(bad), "--formats", "csv", "--out", str(tmp_path / "o")],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2 and "not a readable image" in result.stderr and "Traceback" not in result.stderr


def test_cli_writes_the_papers_metric_figures_from_two_runs(tmp_path):
    out = tmp_path / "paper"
    runs = f"{ROOT / 'checkpoints' / 'digits-damcha-static'},{ROOT / 'checkpoints' / 'digits-damcha'}"
    result = subprocess.run([sys.executable, "-m", "damcha", "figures", "--paper", runs, "--val-index", "1",
                             "--formats", "csv,html", "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    names = {p.name for p in out.iterdir()}
    for fig in ("fig8_first_vs_last", "fig10_contours", "fig11_surfaces"):
        assert {f"{fig}.csv", f"{fig}.html", f"{fig}.provenance.json"} <= names
    contours = read_data_csv((out / "fig10_contours.csv").read_bytes())
    assert len(contours) == 10  # 5 snapshots x 2 runs
    bad = subprocess.run([sys.executable, "-m", "damcha", "figures", "--paper", str(ROOT / "checkpoints" / "digits-mha"),
                          "--formats", "csv", "--out", str(tmp_path / "bad")], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert bad.returncode == 2 and "no metric M(x)" in bad.stderr


def test_provenance_counts_layers_and_heads_from_one_as_the_app_does():
    from damcha.views.export import library_params, numbered_from_one

    written = numbered_from_one({"layer": 0, "head": 3, "position": 5, "mode": "full"})
    assert written == {"layer": 1, "head": 4, "position": 5, "mode": "full", "counted_from": 1}
    assert library_params(written) == {"layer": 0, "head": 3, "position": 5, "mode": "full"}
    assert library_params({"layer": 1}) == {"layer": 1}  # an older file, counted from 0


def test_concurrent_exports_each_get_their_own_figure_in_their_own_format():
    """Eighteen renders at once from as many threads (two download clicks, two visitors): each gets its own
    figure in its own format. kaleido's one return queue handed a PNG to an SVG request, and a PDF to a PNG."""
    import threading

    from pypdf import PdfReader

    require_static_export()
    figs = [figures.metric_heatmap_figure(np.random.default_rng(k).normal(size=(8, 8)), 4, f"Concurrent figure {k}")
            for k in range(3)]
    settings = [ExportSettings(width=300 + 40 * k, height=300, scale=1) for k in range(3)]
    figure_bytes(figs[0], "png", settings[0])  # the renderer started, as after a first export
    jobs = [(k, fmt) for _ in range(2) for k in range(3) for fmt in ("png", "svg", "pdf")]
    got: dict[int, bytes] = {}
    start = threading.Barrier(len(jobs))

    def render(index: int, k: int, fmt: str) -> None:
        start.wait()
        got[index] = figure_bytes(figs[k], fmt, settings[k])

    threads = [threading.Thread(target=render, args=(i, k, fmt)) for i, (k, fmt) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(got) == len(jobs)
    for i, (k, fmt) in enumerate(jobs):
        raw = got[i]
        if fmt == "png":
            assert raw[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", raw[16:24]) == (300 + 40 * k, 300), (k, raw[:8])
        elif fmt == "svg":
            assert raw.startswith(b"<svg"), (k, raw[:8])
            assert f"Concurrent figure {k}" in " ".join(ET.fromstring(raw).itertext())
        else:
            assert raw.startswith(b"%PDF"), (k, raw[:8])
            assert PdfReader(io.BytesIO(raw)).metadata.title == f"Concurrent figure {k}"


def test_export_all_in_every_combination_of_formats_holds_each_file_as_named():
    """Every non-empty combination of the formats that need no browser, and with a browser at hand (CI) each
    static format alone and all six together (a format's files do not depend on the others chosen)."""
    from itertools import combinations

    from damcha.views.export import STATIC_FORMATS, static_export_status
    from tests.support.exports import checked_bundle

    plain = ("html", "csv", "npz")
    chosen = [list(c) for size in range(1, 4) for c in combinations(plain, size)]
    if static_export_status()[0]:
        chosen += [[fmt] for fmt in STATIC_FORMATS] + [[*STATIC_FORMATS, *plain]]
    item = ExportItem("metric", FIG, Provenance("metric"))
    for formats in chosen:
        members = checked_bundle([item], formats)
        assert set(members) == {f"metric.{f}" for f in formats} | {"metric.provenance.json"}
