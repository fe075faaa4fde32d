"""Figures with export buttons, their provenance, the sidebar's export settings and the page's ZIP."""

from __future__ import annotations

import json
from dataclasses import asdict

import streamlit as st

from app.roots import checkpoint_root
from app.sharing import failure_text, is_local_server
from damcha.inputs.model_inputs import ModelInput
from damcha.runs.checkpoints import Run
from damcha.views.export import (
    STATIC_FORMATS,
    ExportItem,
    ExportSettings,
    Provenance,
    data_csv,
    data_npz,
    figure_bytes,
    figure_data,
    static_export_status,
    zip_bundle,
)
from damcha.views.figures import display_copy
from damcha.views.regeneration import python_to_rebuild
from damcha.views.typesetting import COLUMN_WIDTHS


def export_settings_widget() -> None:
    """Sidebar: size, scale and style of exported figures (kept for the session)."""
    with st.sidebar.expander("Export settings", expanded=False):
        layout = st.radio("Layout", [*COLUMN_WIDTHS, "custom width"], key="exp_layout", horizontal=True,
                          help="A single journal column (≈ 3.3 in) or a double column (≈ 7 in), text ≈ 7.5 pt "
                               "printed; titles wrap to the width.")
        w = st.number_input("Width (px)", 200, 4000, 460, step=20, key="exp_w") if layout == "custom width" \
            else COLUMN_WIDTHS[layout]
        h = st.number_input("Height (px, 0 = the figure's own)", 0, 4000, 0, step=50, key="exp_h")
        s = st.select_slider("PNG scale", [1.0, 2.0, 3.0, 4.0], value=2.0, key="exp_s")
        paper = st.toggle("Paper style", value=True, key="exp_paper",
                          help="White background, one sans-serif font sized for a single column, RdBu centred at 0.")
        vector = st.toggle("Vector heatmaps (SVG, PDF)", value=False, key="exp_vector",
                           help="One rectangle per cell instead of an embedded image, for figures of up to 128 × 128 "
                                "cells: sharp at any zoom, larger files.")
    st.session_state["export_settings"] = ExportSettings(int(w), int(h) or None, float(s), bool(paper),
                                                         vector_heatmaps=bool(vector))


def provenance(figure: str, run: Run | None, epoch: int | None = None, inp: ModelInput | None = None,
               params: dict | None = None, regenerable: bool = False) -> Provenance:
    """The provenance of a figure on this page. regenerable: a named figure of damcha.views.figure_sets
    (`python -m damcha figures --from-provenance` rebuilds it)."""
    return Provenance.of(figure, run, epoch, None if inp is None else inp.tokens, None if inp is None else inp.targets,
                         "" if inp is None else inp.source, params, regenerable, root=checkpoint_root())


def show(fig, name: str, prov: Provenance, width: str = "stretch") -> None:
    """Draw a figure (large heatmaps as block means) and give it export buttons at full resolution
    (PNG/SVG/PDF, offline HTML, CSV/NPZ, provenance); it is also registered for this page's "Export all" ZIP."""
    st.plotly_chart(display_copy(fig), width=width, key=f"chart_{name}")
    st.session_state.setdefault("export_registry", {})[name] = (fig, prov)
    settings = st.session_state.get("export_settings")
    ok, why = static_export_status()
    with st.popover("Export", icon=":material/download:"):
        # Bytes are made only when a button is clicked (a callable), so unexported figures cost nothing.
        mimes = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
                 "csv": "text/csv", "npz": "application/octet-stream"}
        makers = {fmt: (lambda f=fmt: figure_bytes(fig, f, settings, name)) for fmt in ("png", "svg", "pdf", "html")}
        makers["csv"] = lambda: data_csv(figure_data(fig))
        makers["npz"] = lambda: data_npz(figure_data(fig))
        for row in (("png", "svg", "pdf"), ("html", "csv", "npz")):
            for col, fmt in zip(st.columns(3), row):
                col.download_button(fmt.upper(), makers[fmt], f"{name}.{fmt}", mimes[fmt], key=f"dl_{name}_{fmt}",
                                    disabled=fmt in ("png", "svg", "pdf") and not ok, on_click="ignore")
        st.download_button("Provenance JSON", json.dumps(prov.to_dict(settings), indent=2),
                           f"{name}.provenance.json", "application/json", key=f"dl_{name}_prov",
                           help="Run, epoch, checkpoint and input hashes, settings; "
                                "`python -m damcha figures --from-provenance` rebuilds named figures", on_click="ignore")
        if not ok:
            st.caption(why)

        st.caption("Python that rebuilds this figure, beside its provenance file (copy button at the top right):")
        # The folder in use, by its full path on one's own machine; a visitor of a shared server sees its name only
        folder = checkpoint_root() if is_local_server() else checkpoint_root().name
        st.code(python_to_rebuild(prov, f"{name}.provenance.json", folder, settings), language="python")


def export_all_widget() -> None:
    """A ZIP of every figure shown on this page, with data and provenance: made on a click with its progress shown
    (a failure is said on the page, naming the figure), then offered for download while the page shows the same
    figures in the same formats."""
    registry = st.session_state.get("export_registry", {})
    if not registry:
        return
    st.divider()
    ok, why = static_export_status()
    formats = st.multiselect("Formats for “Export all”", ["png", "svg", "pdf", "html", "csv", "npz"],
                             default=(["pdf", "svg"] if ok else []) + ["html", "csv"], key="exp_all_formats")
    if not ok and set(formats) & set(STATIC_FORMATS):
        st.warning(why)
        formats = [f for f in formats if f not in STATIC_FORMATS]
    items = [ExportItem(name, fig, prov) for name, (fig, prov) in registry.items()]
    settings = st.session_state.get("export_settings")
    count = f"{len(items)} figure{'s' if len(items) != 1 else ''}"
    if st.button(f"Export all {count} (ZIP)", key="make_all", icon=":material/folder_zip:", disabled=not formats):
        st.session_state.pop("export_all_zip", None)
        with st.status(f"Exporting {count} as {', '.join(formats)}…", expanded=True) as status:
            bar = st.progress(0.0)

            def advance(done: int, name: str) -> None:
                bar.progress(done / len(items), text=f"{done}/{len(items)}: {name}")
            try:
                raw = zip_bundle(items, formats, settings, progress=advance)
            except Exception as e:  # noqa: BLE001 - whatever failed is said on the page, never a silent non-download
                status.update(label="The ZIP could not be made", state="error")
                st.error(f"The ZIP could not be made: {failure_text(e, checkpoint_root())}. The figures on this "
                         "page still export one by one.")
            else:
                status.update(label=f"{count} exported: {len(raw) / 1e6:.2f} MB", state="complete", expanded=False)
                st.session_state["export_all_zip"] = (_bundle_contents(items, formats, settings), raw)
    ready = st.session_state.get("export_all_zip")  # (described only while a ZIP is held: reruns stay cheap)
    if ready is not None and ready[0] == _bundle_contents(items, formats, settings):
        st.download_button(f"Download the ZIP of {count}", ready[1], "damcha-figures.zip", "application/zip",
                           key="dl_all", icon=":material/download:", on_click="ignore")


def _bundle_contents(items: list[ExportItem], formats: list[str], settings: ExportSettings | None) -> str:
    """What a ZIP of these figures holds, by their names and provenance (run, epoch, input, parameters), the
    formats and the export settings: a ZIP made for other figures is never offered for these."""
    described = [[item.name, asdict(item.provenance)] for item in items]
    return json.dumps([described, formats, asdict(settings or ExportSettings())], sort_keys=True, default=str)
