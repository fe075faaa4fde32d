"""An "Export all" ZIP opened and every member checked: the manifest lists exactly what the archive holds, each
file begins as its format does, the data files hold the arrays the figure shows and each provenance file names
its figure."""

import io
import json
import zipfile

import numpy as np

from damcha.views.export import ExportItem, figure_data, read_data_csv, zip_bundle

MAGIC = {"png": (b"\x89PNG\r\n\x1a\n",), "svg": (b"<svg",), "pdf": (b"%PDF",), "html": (b"<html", b"<!doctype html")}


def checked_bundle(items: list[ExportItem], formats: list[str]) -> dict[str, bytes]:
    """The ZIP of `items` in `formats`, opened and checked member by member; its members."""
    return checked_archive(zip_bundle(items, formats), items, formats)


def checked_archive(raw: bytes, items: list[ExportItem], formats: list[str]) -> dict[str, bytes]:
    """A ZIP made of `items` in `formats` (by the app or zip_bundle), opened and checked member by member."""
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(members.pop("manifest.json"))
    assert [entry["figure"] for entry in manifest] == [item.name for item in items]
    listed = {name for entry in manifest for name in entry["files"]}
    assert listed == set(members), sorted(listed ^ set(members))
    for item in items:
        expected = {f"{item.name}.{fmt}" for fmt in formats} | {f"{item.name}.provenance.json"}
        assert {n for n in members if n.startswith(f"{item.name}.")} >= expected, item.name
        provenance = json.loads(members[f"{item.name}.provenance.json"])
        assert provenance["figure"] == item.provenance.figure and set(provenance["files"]) == expected - {
            f"{item.name}.provenance.json"}
        shown = figure_data(item.figure) if {"csv", "npz"} & set(formats) else {}
        for fmt in formats:
            raw = members[f"{item.name}.{fmt}"]
            if fmt in MAGIC:
                head = raw.lstrip()[:20].lower() if fmt == "html" else raw
                assert head.startswith(MAGIC[fmt]), (item.name, fmt, raw[:20])
            elif fmt == "csv":
                back = read_data_csv(raw)
                assert set(back) == set(shown), item.name
                for name, values in shown.items():
                    np.testing.assert_array_equal(back[name], np.atleast_2d(values).reshape(back[name].shape), name)
            elif fmt == "npz":
                with np.load(io.BytesIO(raw)) as npz:
                    assert set(npz.files) == set(shown), item.name
                    for name, values in shown.items():
                        np.testing.assert_array_equal(npz[name], values, name)
    return members


def page_items(view) -> list[ExportItem]:
    """What a rendered page registered for its "Export all" (its figures as the page holds them)."""
    registry = view.session_state["export_registry"] if "export_registry" in view.session_state else {}
    return [ExportItem(name, figure, provenance) for name, (figure, provenance) in registry.items()]
