"""UI support shared by every page: the checkpoint root, cached loaders, the run picker and the input picker.

Models are cached with st.cache_resource and shared by every browser session: nothing
here or in a page mutates one (metric mode, dropout and the like are call arguments).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import streamlit as st

from damcha.checkpoints import CheckpointError, Run, list_runs, load_model, load_run
from damcha.inspection import InspectionRecord, inspect_input
from damcha.preprocess import InputError
from damcha.samples import (
    ModelInput,
    input_from_image,
    input_from_text,
    is_digit_run,
    validation_count,
    validation_input,
)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_ROOT = ROOT / "checkpoints"
IMAGE_TYPES = ["png", "jpg", "jpeg", "gif", "bmp", "webp"]
TEXT_TYPES = ["txt", "md", "py", "csv", "json", "text"]


def checkpoint_root() -> Path:
    """The run folder: the in-app setting, else $DAMCHA_CHECKPOINTS, else the shipped checkpoints/."""
    default = os.environ.get("DAMCHA_CHECKPOINTS") or str(SHIPPED_ROOT)
    return Path(st.session_state.get("checkpoint_root", default))


@st.cache_data(ttl=60, show_spinner=False)
def cached_runs(root: str) -> tuple[list[Run], list[tuple[Path, str]]]:
    return list_runs(root)


@st.cache_resource(show_spinner=False, max_entries=64)
def cached_model(run_path: str, epoch: int, mtime: float):
    """One model per (run, epoch); mtime makes a rewritten snapshot load afresh."""
    return load_model(load_run(run_path), epoch)


def model_for(run: Run, epoch: int):
    return cached_model(str(run.path), epoch, run.snapshot_path(epoch).stat().st_mtime)


@st.cache_data(show_spinner=False, max_entries=256)
def cached_inspection(run_path: str, epoch: int, mtime: float, input_key: str, _inp: ModelInput, mode: str) -> InspectionRecord:
    """Inspection of one input; keyed by the input's hash (the input itself is not hashed)."""
    return inspect_input(cached_model(run_path, epoch, mtime), _inp.tokens, _inp.targets, metric_mode=mode)


def inspect_cached(run: Run, epoch: int, inp: ModelInput, mode: str) -> InspectionRecord:
    mtime = run.snapshot_path(epoch).stat().st_mtime
    return cached_inspection(str(run.path), epoch, mtime, inp.key(), inp, mode)


# ----------------------------------------------------------------------------- run picker

def _query_int(name: str, default: int, upper: int) -> int:
    value = st.query_params.get(name)
    return int(value) if value and value.isdigit() and int(value) < upper else default


def _sync_query(**params) -> None:
    for k, v in params.items():
        if v is None:
            st.query_params.pop(k, None)
        elif st.query_params.get(k) != str(v):
            st.query_params[k] = str(v)


def run_picker() -> tuple[Run | None, int | None]:
    """Sidebar: checkpoint root, data set, run, epoch; kept in session state and mirrored in the URL."""
    sb = st.sidebar
    with sb.expander("Checkpoint folder", expanded=False):
        root_text = st.text_input("Run root", value=str(checkpoint_root()), key="root_input",
                                  help="A folder of run directories. Set DAMCHA_CHECKPOINTS to change the default.")
        if root_text != str(checkpoint_root()):
            st.session_state["checkpoint_root"] = root_text
    try:
        runs, bad = cached_runs(str(checkpoint_root()))
    except CheckpointError as e:
        sb.error(f"{e}. Pick another folder above.")
        return None, None
    for path, why in bad:
        sb.warning(f"Skipped {path.name}: {why}")
    if not runs:
        sb.info("No runs in this folder. Train one with `python -m damcha train --out DIR`.")
        return None, None

    datasets = sorted({r.dataset for r in runs})
    q = st.query_params
    wanted_run = q.get("run")
    by_name = {r.name: r for r in runs}
    if "dataset" not in st.session_state:
        st.session_state["dataset"] = by_name[wanted_run].dataset if wanted_run in by_name else datasets[0]
    if st.session_state["dataset"] not in datasets:
        st.session_state["dataset"] = datasets[0]
    dataset = sb.selectbox("Data set", datasets, key="dataset")
    names = [r.name for r in runs if r.dataset == dataset]
    if st.session_state.get("run") not in names:
        st.session_state["run"] = wanted_run if wanted_run in names else names[0]
    name = sb.selectbox("Run", names, key="run", format_func=lambda n: f"{n} ({by_name[n].variant})")
    run = by_name[name]
    epoch_key = f"epoch::{run.path}"
    if epoch_key not in st.session_state:
        want = _query_int("epoch", run.epochs[-1], run.epochs[-1] + 1)
        st.session_state[epoch_key] = want if want in run.epochs else run.epochs[-1]
    epoch = sb.select_slider("Epoch (snapshot)", options=list(run.epochs), key=epoch_key)
    _sync_query(run=run.name, epoch=epoch)
    return run, epoch


def selected_run() -> tuple[Run, int]:
    """The sidebar's (run, epoch); stops the page with a message when there is none."""
    run, epoch = st.session_state.get("selection", (None, None))
    if run is None:
        st.warning("No run selected: pick a checkpoint folder with runs in the sidebar.")
        st.stop()
    return run, epoch


# ----------------------------------------------------------------------------- input picker

def input_picker(run: Run, key: str = "input") -> ModelInput | None:
    """Upload, type, or pick a validation sample; returns the model input or None (with a message shown)."""
    if run.model_config.input_dim:
        st.info(f"{run.name} reads continuous patches ({run.dataset}): inspect it with the library "
                "(damcha.inspect_input) on its local data; the app takes digits and text.")
        return None
    digit = is_digit_run(run)
    sources = ["Validation sample", "Upload an image"] if digit else ["Type text", "Upload a text file", "Validation sample"]
    source = st.radio("Input", sources, horizontal=True, key=f"{key}_source_{'digit' if digit else 'text'}")
    try:
        if source == "Validation sample":
            n = validation_count(run)
            idx = st.number_input(f"Validation index (0..{n - 1})", 0, n - 1, _query_int("sample", 0, n),
                                  key=f"{key}_idx_{run.dataset}")
            _sync_query(sample=int(idx))
            return validation_input(run, int(idx))
        _sync_query(sample=None)
        if source == "Upload an image":
            up = st.file_uploader("Image of one handwritten digit (PNG, JPEG, GIF, BMP, WebP)", type=IMAGE_TYPES,
                                  key=f"{key}_image")
            if up is None:
                st.info("Upload a photo or scan of one digit; it is cropped, centred and reduced to 8x8 grey levels.")
                return None
            return input_from_image(run, up.getvalue(), up.name)
        if source == "Upload a text file":
            up = st.file_uploader("UTF-8 text file", type=TEXT_TYPES, key=f"{key}_textfile")
            if up is None:
                st.info("Upload a UTF-8 text file; the model reads its first bytes, up to its context length.")
                return None
            return input_from_text(run, up.getvalue(), f"file {up.name}")
        text = st.text_area("Text", value="The metric of each head is computed from the context.", key=f"{key}_text",
                            height=100)
        return input_from_text(run, text.encode("utf-8"), "typed text")
    except InputError as e:
        st.error(f"Cannot use this input: {e}")
        return None


# ----------------------------------------------------------------------------- sweeps (cached)

def _mtimes(run: Run) -> tuple[float, ...]:
    return tuple(run.snapshot_path(e).stat().st_mtime for e in run.epochs)


@st.cache_data(show_spinner=False, max_entries=64)
def cached_sweep(run_path: str, mtimes: tuple[float, ...], input_key: str, _run: Run, _inp: ModelInput, mode: str):
    """The input through every snapshot, with a progress bar the first time; instant afterwards."""
    from damcha.dynamics import sweep_epochs

    bar = st.progress(0.0, text="Running every snapshot on this input…")
    sweep = sweep_epochs(_run, model_for, _inp.tokens, _inp.targets, mode,
                         progress=lambda k, n: bar.progress(k / n, text=f"Snapshot {k}/{n}"))
    bar.empty()
    return sweep


def sweep_cached(run: Run, inp: ModelInput, mode: str):
    return cached_sweep(str(run.path), _mtimes(run), inp.key(), run, inp, mode)


@st.cache_data(show_spinner=False, max_entries=32)
def cached_dataset_metrics(run_path: str, mtimes: tuple[float, ...], n: int, _run: Run):
    """M(x) of n validation inputs at their last position, per snapshot: {epoch: (n, L_m, D, D)}, labels."""
    from damcha.dynamics import dataset_metrics
    from damcha.samples import validation_arrays

    x, _, labels = validation_arrays(_run)
    x = x[:n]
    out = {}
    bar = st.progress(0.0, text="Metrics of validation inputs…")
    for k, epoch in enumerate(_run.epochs):
        out[epoch] = dataset_metrics(model_for(_run, epoch), x)
        bar.progress((k + 1) / len(_run.epochs), text=f"Validation metrics, snapshot {k + 1}/{len(_run.epochs)}")
    bar.empty()
    return out, (None if labels is None else labels[:n]), x


def dataset_metrics_cached(run: Run, n: int):
    return cached_dataset_metrics(str(run.path), _mtimes(run), n, run)


@st.cache_data(show_spinner=False, max_entries=32)
def cached_weight_drift(run_path: str, mtimes: tuple[float, ...], _run: Run):
    from damcha.dynamics import generator_weight_drift

    return generator_weight_drift([model_for(_run, e) for e in _run.epochs])


def weight_drift_cached(run: Run):
    return cached_weight_drift(str(run.path), _mtimes(run), run)


# ----------------------------------------------------------------------------- attribution and ablation (cached)

@st.cache_data(show_spinner="Gradients of the loss with respect to M(x)…", max_entries=128)
def cached_contributions(run_path: str, epoch: int, mtime: float, input_key: str, _inp: ModelInput, mode: str,
                         method: str):
    from damcha.attribution import metric_contributions

    return metric_contributions(cached_model(run_path, epoch, mtime), _inp.tokens, _inp.targets, mode, method)


def contributions_cached(run: Run, epoch: int, inp: ModelInput, mode: str, method: str):
    return cached_contributions(str(run.path), epoch, run.snapshot_path(epoch).stat().st_mtime, inp.key(), inp,
                                mode, method)


@st.cache_data(show_spinner=False, max_entries=128)
def cached_token_attributions(run_path: str, epoch: int, mtime: float, input_key: str, _inp: ModelInput, target: str,
                              baseline: int, n_steps: int, options: tuple):
    from damcha.attribution import token_attributions

    bar = st.progress(0.0, text="Integrated Gradients…")
    result = token_attributions(cached_model(run_path, epoch, mtime), _inp.tokens, baseline, target, _inp.targets,
                                n_steps, progress=lambda k, n: bar.progress(k / n, text=f"Integrated Gradients: step {k}/{n}"),
                                **dict(options))
    bar.empty()
    return result


def token_attributions_cached(run: Run, epoch: int, inp: ModelInput, target: str, baseline: int, n_steps: int,
                              **options):
    return cached_token_attributions(str(run.path), epoch, run.snapshot_path(epoch).stat().st_mtime, inp.key(), inp,
                                     target, baseline, n_steps, tuple(sorted(options.items())))


@st.cache_data(show_spinner=False, max_entries=64)
def cached_validation_ablation(run_path: str, mtime: float, epoch: int, _run: Run):
    from damcha.ablation import validation_ablation

    bar = st.progress(0.0, text=f"Validation set of {_run.name} under each metric mode…")
    rows = validation_ablation(_run, model_for(_run, epoch), lambda k, n: bar.progress(k / n, text=f"{_run.name}: mode {k}/{n}"))
    bar.empty()
    return rows


def validation_ablation_cached(run: Run, epoch: int):
    return cached_validation_ablation(str(run.path), run.snapshot_path(epoch).stat().st_mtime, epoch, run)


# ----------------------------------------------------------------------------- figures with export

def export_settings_widget() -> None:
    """Sidebar: size, scale and style of exported figures (kept for the session)."""
    from damcha.export import ExportSettings

    with st.sidebar.expander("Export settings", expanded=False):
        w = st.number_input("Width (px)", 200, 4000, 460, step=20, key="exp_w",
                            help="460 px fits a single journal column, 940 px a double column (text ≈ 7.5 pt).")
        h = st.number_input("Height (px, 0 = the figure's own)", 0, 4000, 0, step=50, key="exp_h")
        s = st.select_slider("PNG scale", [1.0, 2.0, 3.0, 4.0], value=2.0, key="exp_s")
        paper = st.toggle("Paper style", value=True, key="exp_paper",
                          help="White background, one sans-serif font sized for a single column, RdBu centred at 0.")
    st.session_state["export_settings"] = ExportSettings(int(w), int(h) or None, float(s), bool(paper))


def set_export_context(run: Run | None, epoch: int | None, inp: ModelInput | None = None, **params) -> None:
    """What every figure of this page is about, for its provenance JSON."""
    st.session_state["export_context"] = dict(run=run, epoch=epoch, inp=inp, params=params)


def _provenance_for(name: str, figure: str | None, params: dict) -> dict:
    from damcha.export import provenance

    ctx = st.session_state.get("export_context", {})
    run, epoch, inp = ctx.get("run"), ctx.get("epoch"), ctx.get("inp")
    checkpoint = run.snapshot_path(epoch) if run is not None and epoch is not None else None
    prov = provenance(figure or name, run.path if run else None, epoch, checkpoint,
                      None if inp is None else inp.tokens, None if inp is None else inp.targets,
                      "" if inp is None else inp.source, {**ctx.get("params", {}), **params},
                      st.session_state.get("export_settings"))
    prov["regenerable"] = figure is not None  # a named figure of damcha.figure_sets: `damcha figures --from-provenance`
    return prov


def show(fig, name: str, figure: str | None = None, params: dict | None = None, width: str = "stretch") -> None:
    """Draw a figure and give it export buttons (PNG/SVG/PDF, offline HTML, CSV/NPZ, provenance);
    it is also registered for this page's "Export all" ZIP."""
    from damcha.export import data_csv, data_npz, figure_bytes, figure_data, static_export_status

    st.plotly_chart(fig, width=width, key=f"chart_{name}")
    params = params or {}
    registry = st.session_state.setdefault("export_registry", {})
    registry[name] = (fig, figure, params)
    settings = st.session_state.get("export_settings")
    ok, why = static_export_status()
    with st.popover("Export", icon=":material/download:"):
        # Bytes are made only when a button is clicked (a callable), so unexported figures cost nothing.
        mimes = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
                 "csv": "text/csv", "npz": "application/octet-stream"}
        makers = {fmt: (lambda f=fmt: figure_bytes(fig, f, settings)) for fmt in ("png", "svg", "pdf", "html")}
        makers["csv"] = lambda: data_csv(figure_data(fig))
        makers["npz"] = lambda: data_npz(figure_data(fig))
        for row in (("png", "svg", "pdf"), ("html", "csv", "npz")):
            for col, fmt in zip(st.columns(3), row):
                col.download_button(fmt.upper(), makers[fmt], f"{name}.{fmt}", mimes[fmt], key=f"dl_{name}_{fmt}",
                                    disabled=fmt in ("png", "svg", "pdf") and not ok)
        prov = json.dumps(_provenance_for(name, figure, params), indent=2)  # now: the session is gone in the callable
        st.download_button("Provenance JSON", prov,
                           f"{name}.provenance.json", "application/json", key=f"dl_{name}_prov",
                           help="Run, epoch, checkpoint and input hashes, settings; "
                                "`python -m damcha figures --from-provenance` rebuilds named figures")
        if not ok:
            st.caption(why)


def export_all_widget() -> None:
    """A ZIP of every figure shown on this page, with data and provenance."""
    from damcha.export import STATIC_FORMATS, ExportItem, static_export_status, zip_bundle

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
    items = [ExportItem(name, fig, _provenance_for(name, figure, params)) for name, (fig, figure, params) in registry.items()]
    settings = st.session_state.get("export_settings")  # read now: the callable runs outside the session
    st.download_button(f"Export all {len(items)} figures (ZIP)", lambda: zip_bundle(items, formats, settings),
                       "damcha-figures.zip", "application/zip", key="dl_all", icon=":material/folder_zip:")
