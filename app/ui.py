"""UI support shared by every page: the checkpoint root, cached library calls, the run and input
pickers, and figures with export buttons.

Models are cached with st.cache_resource and shared by every browser session: nothing here or
in a page mutates one (the mechanism's options, dropout and the like are call arguments).
Every cached call takes the run itself; `HASH_FUNCS` keys it by its path and the modification
times of its snapshots (a rewritten snapshot loads afresh), and an input by the hash of what the
model reads.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import streamlit as st

from app.sharing import check_allowed, redacted, root_field_editable, server_settings_warning, shown_path, skipped_line
from app.url_state import URL, bound, keep_in_url, seed_from_url, typed_text_area, url_number_input
from damcha.analysis.inspection import InspectionRecord, inspect_input
from damcha.analysis.interventions import MEAN_INPUTS
from damcha.inputs.model_inputs import (
    BUNDLED_DATASETS,
    ModelInput,
    input_from_image,
    input_from_photo,
    input_from_text,
    input_from_token_ids,
    run_modality,
    validation_count,
    validation_input,
)
from damcha.inputs.uploads import InputError
from damcha.model.mechanisms import ForwardOptions
from damcha.runs.checkpoints import CheckpointError, Run, list_runs, load_model
from damcha.views.export import Provenance

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_ROOT = ROOT / "checkpoints"
UPLOAD_TYPES = {"image": ["png", "jpg", "jpeg", "gif", "bmp", "webp"], "text": ["txt", "md", "py", "csv", "json", "text"]}


def run_key(run: Run) -> tuple:
    """What identifies a run's weights for caching: its path and its snapshots' modification times."""
    return str(run.path), tuple((e, run.snapshot_path(e).stat().st_mtime_ns) for e in run.epochs)


HASH_FUNCS = {Run: run_key, ModelInput: ModelInput.key}


def default_root() -> Path:
    """$DAMCHA_CHECKPOINTS, else the shipped checkpoints/."""
    return Path(os.environ.get("DAMCHA_CHECKPOINTS") or SHIPPED_ROOT)


def checkpoint_root() -> Path:
    """The run folder: the in-app setting, else the default one."""
    return Path(st.session_state.get("checkpoint_root", default_root()))


@st.cache_data(ttl=60, show_spinner=False)
def cached_runs(root: str) -> tuple[list[Run], list[tuple[Path, str]]]:
    return list_runs(root)


# ----------------------------------------------------------------------------- cached library calls

def inference_device() -> str:
    """Where the app runs its models: $DAMCHA_DEVICE (e.g. cuda), else the CPU."""
    return os.environ.get("DAMCHA_DEVICE", "cpu")


@st.cache_resource(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def model_for(run: Run, epoch: int):
    """One model per (run, epoch), shared by every session; frozen and in eval mode."""
    return load_model(run, epoch, device=inference_device())


@st.cache_data(show_spinner=False, max_entries=256, hash_funcs=HASH_FUNCS)
def inspection(run: Run, epoch: int, inp: ModelInput, options: ForwardOptions | None = None,
               positions: tuple[int, ...] | None = None, attention_layers: tuple[int, ...] | None = None
               ) -> InspectionRecord:
    """One input's record; positions / attention_layers: take the large per-position matrices and
    attention maps only where viewed (default: all that fit the inspection budget)."""
    return inspect_input(model_for(run, epoch), inp.tokens, inp.targets, positions=positions, options=options,
                         attention_layers=attention_layers)


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def sequence_profile(run: Run, epoch: int, inp: ModelInput, options: ForwardOptions | None = None):
    """Per-position summaries at every position of the input, in chunks, with a progress bar."""
    from damcha.analysis.inspection import sequence_profile as profile_of

    bar = st.progress(0.0, text="Summarising every position…")
    result = profile_of(model_for(run, epoch), inp.tokens, options,
                        progress=lambda k, n: bar.progress(k / n, text=f"Positions, chunk {k}/{n}"))
    bar.empty()
    return result


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def sweep(run: Run, inp: ModelInput, options: ForwardOptions | None = None, positions: tuple[int, ...] | None = None):
    """The input through every snapshot, with a progress bar the first time; instant afterwards."""
    from damcha.analysis.dynamics import sweep_epochs

    bar = st.progress(0.0, text="Running every snapshot on this input…")
    result = sweep_epochs(run, model_for, inp.tokens, inp.targets, options, positions=positions,
                          progress=lambda k, n: bar.progress(k / n, text=f"Snapshot {k}/{n}"))
    bar.empty()
    return result


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def dataset_metrics(run: Run, n: int):
    """M(x) of n validation inputs at their last position, per snapshot: ({epoch: (n, L_m, D, D)}, labels,
    label name). Inputs without classes are grouped by brightness (images) or share of letters (text)."""
    from damcha.analysis.dynamics import dataset_metrics as metrics_of
    from damcha.analysis.dynamics import input_groups
    from damcha.inputs.model_inputs import validation_arrays

    x, _, labels = validation_arrays(run)
    x = x[:n]
    out = {}
    bar = st.progress(0.0, text="Metrics of validation inputs…")
    for k, epoch in enumerate(run.epochs):
        out[epoch] = metrics_of(model_for(run, epoch), x)
        bar.progress((k + 1) / len(run.epochs), text=f"Validation metrics, snapshot {k + 1}/{len(run.epochs)}")
    bar.empty()
    if labels is None:
        return out, *input_groups(x, bool(run.model_config.input_dim))
    return out, labels[:n], "class"


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def statistic_bands(run: Run, n: int, layer: int, keys: tuple[str, ...]):
    from damcha.analysis.dynamics import statistic_bands as bands

    mats, _, _ = dataset_metrics(run, n)
    return bands([mats[e][:, layer] for e in run.epochs], run.model_config.n_head, keys)


@st.cache_data(show_spinner="Projecting the metrics…", max_entries=64, hash_funcs=HASH_FUNCS)
def projection(run: Run, n: int, epoch: int, layer: int, method: str):
    """2D points of n validation metrics at `epoch`, their labels, and the class separation per epoch."""
    from damcha.analysis.dynamics import class_separation, project

    mats, labels, label_name = dataset_metrics(run, n)
    separation = {e: class_separation(mats[e][:, layer], labels) for e in run.epochs}
    return project(mats[epoch][:, layer], method), labels, label_name, separation


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def mean_structures(run: Run, epoch: int, n: int, options: ForwardOptions | None = None,
                    positions: tuple[int, ...] | None = None):
    """The run's structures averaged over its first n validation inputs, with a progress bar."""
    from damcha.analysis.inspection import mean_structures as average
    from damcha.inputs.model_inputs import validation_arrays

    x, y, _ = validation_arrays(run)
    bar = st.progress(0.0, text="Structures of validation inputs…")
    result = average(model_for(run, epoch), x[:n], y[:n], options, positions=positions,
                     progress=lambda k, m: bar.progress(k / m, text=f"Validation input {k}/{m}"))
    bar.empty()
    return result


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def weight_drift(run: Run):
    from damcha.analysis.dynamics import generator_weight_drift

    return generator_weight_drift([model_for(run, e) for e in run.epochs])


@st.cache_data(show_spinner="Gradients of the loss with respect to M(x)…", max_entries=128, hash_funcs=HASH_FUNCS)
def contributions(run: Run, epoch: int, inp: ModelInput, mode: str, method: str):
    from damcha.analysis.attribution import metric_contributions

    return metric_contributions(model_for(run, epoch), inp.tokens, inp.targets, mode, method)


@st.cache_data(show_spinner=False, max_entries=128, hash_funcs=HASH_FUNCS)
def token_attributions(run: Run, epoch: int, inp: ModelInput, target: str, baseline: int, n_steps: int,
                       options: tuple = ()):
    from damcha.analysis.attribution import token_attributions as attribute

    bar = st.progress(0.0, text="Integrated Gradients…")
    result = attribute(model_for(run, epoch), inp.tokens, baseline, target, inp.targets, n_steps,
                       progress=lambda k, n: bar.progress(k / n, text=f"Integrated Gradients: step {k}/{n}"),
                       **dict(options))
    bar.empty()
    return result


ABLATION_SETTINGS = {"completion_images": 64, "completion_samples": 4}


def ablation_cached(run: Run) -> bool:
    from damcha.runs.disk_cache import is_cached

    return is_cached("validation_ablation", ABLATION_SETTINGS, [(run, run.epochs[-1])])


def ablation_table(runs: list[Run]) -> list[dict]:
    """Each run's validation set under each metric mode at its last snapshot: read from the disk
    cache (keyed by the snapshot's content) where computed before, else computed, with a progress
    bar that estimates the time left. Runs whose snapshot cannot be used are named and left out."""
    import time

    from damcha.analysis.ablation import validation_ablation as ablate
    from damcha.runs.disk_cache import cached

    bar = st.progress(0.0, text="Validation sets under each metric mode…")
    todo = [r for r in runs if not ablation_cached(r)]
    spent, computed = 0.0, 0

    def compute(r: Run) -> list[dict]:
        nonlocal spent, computed
        t0 = time.perf_counter()
        rows = ablate(r, model_for(r, r.epochs[-1]), **ABLATION_SETTINGS)
        spent, computed = spent + time.perf_counter() - t0, computed + 1
        return rows

    def one(r: Run) -> list[dict]:
        rows = cached("validation_ablation", ABLATION_SETTINGS, [(r, r.epochs[-1])], lambda: compute(r))
        left = len(todo) - computed
        eta = f", about {spent / computed * left:.0f} s left" if computed and left > 0 else ""
        bar.progress(min(1.0, (runs.index(r) + 1) / len(runs)), text=f"{r.name} done ({runs.index(r) + 1}/{len(runs)}{eta})")
        return rows

    table = [row for _, rows in each_run(runs, one) for row in rows]
    bar.empty()
    return table


@st.cache_data(show_spinner="This input under each metric mode…", max_entries=64, hash_funcs=HASH_FUNCS)
def input_under_modes(run: Run, epoch: int, inp: ModelInput):
    from damcha.analysis.ablation import input_under_modes as under_modes

    return under_modes(model_for(run, epoch), inp.tokens, inp.targets)


@st.cache_data(show_spinner="Computing from the model…", max_entries=64, hash_funcs=HASH_FUNCS)
def model_figure_values(run: Run, epoch: int, inp: ModelInput, name: str, params: tuple = ()):
    """What a figure computed from the model itself draws (damcha.views.figure_sets.MODEL_FIGURES)."""
    from damcha.views.figure_sets import model_figure_values as values

    return values(name, model_for(run, epoch), run, inp.tokens, inp.targets, dict(params))


# ----------------------------------------------------------------------------- interventions (cached)

def _validation(run: Run, n: int):
    from damcha.inputs.model_inputs import validation_arrays

    x, y, _ = validation_arrays(run)
    return x[:n], y[:n]


@st.cache_resource(show_spinner="The validation mean metric M-bar…", max_entries=32, hash_funcs=HASH_FUNCS)
def mean_metric(run: Run, epoch: int, n: int = MEAN_INPUTS):
    from damcha.analysis.interventions import mean_metric as average

    return average(model_for(run, epoch), _validation(run, n)[0])


def intervention_by_name(run: Run, name: str):
    from damcha.analysis.interventions import available_interventions

    return next(iv for iv in available_interventions(run.model_config) if iv.name == name)


@st.cache_data(show_spinner="Running the model with the intervention…", max_entries=128, hash_funcs=HASH_FUNCS)
def intervened(run: Run, epoch: int, inp: ModelInput, name: str, params: tuple, other: ModelInput | None = None):
    """(record without, record with) the intervention."""
    from damcha.analysis.interventions import intervention_options

    model = model_for(run, epoch)
    iv = intervention_by_name(run, name)
    needs_mean = any(p.kind == "mean" for p in iv.params)
    options = intervention_options(model, iv, inp.tokens, dict(params), None if other is None else other.tokens,
                                   mean_metric(run, epoch) if needs_mean else None)
    return inspection(run, epoch, inp, None), inspect_input(model, inp.tokens, inp.targets, options=options)


@st.cache_data(show_spinner=False, max_entries=64, hash_funcs=HASH_FUNCS)
def block_grid(run: Run, epoch: int, inp: ModelInput | None, keep: bool, n: int = 64):
    """Loss change per zeroed (or kept) block M_ij, for the input or averaged over n validation inputs."""
    from damcha.analysis import interventions

    bar = st.progress(0.0, text="One forward pass per block…")
    tick = lambda k, m: bar.progress(k / m, text=f"Block {k}/{m}")  # noqa: E731
    model = model_for(run, epoch)
    if inp is None:
        x, y = _validation(run, n)
        grid = interventions.block_grid_over(model, x, y, keep, progress=tick)
    else:
        grid = interventions.block_grid(model, inp.tokens, inp.targets, keep, progress=tick)
    bar.empty()
    return grid


@st.cache_data(show_spinner="Loss along the curve…", max_entries=64, hash_funcs=HASH_FUNCS)
def metric_curves(run: Run, epoch: int, inp: ModelInput):
    """Interpolation from M-bar to M(x) (and beyond), off-diagonal scaling, head ablation, residue check."""
    from damcha.analysis import interventions

    model = model_for(run, epoch)
    return {
        "interpolation": interventions.interpolation_curve(model, inp.tokens, inp.targets, mean_metric(run, epoch)),
        "off_diagonal": interventions.off_diagonal_curve(model, inp.tokens, inp.targets),
        "heads": interventions.head_ablation(model, inp.tokens, inp.targets),
        "residue": interventions.residue_check(model, inp.tokens, inp.targets),
    }


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def adaptivity_over_epochs(run: Run, n: int = 256):
    """Per snapshot: the adaptivity gap loss(M-bar) - loss(M(x)) over n validation inputs (mean, 95% interval)."""
    from damcha.analysis import interventions

    x, y = _validation(run, n)
    bar = st.progress(0.0, text="Adaptivity gap per snapshot…")
    rows = []
    for k, epoch in enumerate(run.epochs):
        gap = interventions.adaptivity_gap(model_for(run, epoch), x, y, mean_metric(run, epoch))
        rows.append((epoch, *interventions.interval(gap)))
        bar.progress((k + 1) / len(run.epochs), text=f"Snapshot {k + 1}/{len(run.epochs)}")
    bar.empty()
    return rows


@st.cache_data(show_spinner=False, max_entries=32, hash_funcs=HASH_FUNCS)
def validation_effects(run: Run, epoch: int, n: int = 128):
    from damcha.analysis import interventions

    model = model_for(run, epoch)
    ivs = interventions.available_interventions(run.model_config)
    needs_mean = any(p.kind == "mean" for iv in ivs for p in iv.params)
    x, y = _validation(run, n)
    bar = st.progress(0.0, text="Each intervention over the validation inputs…")
    rows = interventions.validation_effects(model, x, y, ivs, mean_metric(run, epoch) if needs_mean else None,
                                            progress=lambda k, m: bar.progress(k / m, text=f"Intervention {k}/{m}"))
    bar.empty()
    return rows


# ----------------------------------------------------------------------------- run picker

def run_picker() -> tuple[Run | None, int | None]:
    """Sidebar: checkpoint root, data set, run, epoch. Data set, run and epoch are always in the URL
    (?dataset=…&run=…&epoch=…), so a copied link reopens the same view."""
    sb = st.sidebar
    warning = server_settings_warning()
    if warning:
        sb.warning(warning)
    root = root_picker(sb)
    if root is None:
        return None, None
    if is_reference_source(root):  # checkpoints of the authors' code: converted once, then opened as runs
        try:
            root = reference_root(root, *reference_reading(sb), reference_stamp(root))
        except (CheckpointError, ValueError, OSError) as e:
            sb.error(f"{redacted(str(e), root)}. Pick another folder above.")
            return None, None
    try:
        runs, bad = cached_runs(str(root))
    except CheckpointError as e:
        sb.error(f"{redacted(str(e), root)}. Pick another folder above.")
        return None, None
    for path, why in bad:
        sb.warning(skipped_line(path, why, root))
    if not runs:
        sb.info("No runs in this folder. Train one with `python -m damcha train --out DIR`.")
        return None, None

    by_name = {r.name: r for r in runs}
    datasets = sorted({r.dataset for r in runs})
    first_visit = "run" not in st.session_state
    seed_from_url("run", by_name)
    seed_from_url("dataset", datasets)
    if first_visit and st.session_state.get("run") in by_name:  # a link's run decides its data set
        st.session_state["dataset"] = by_name[st.session_state["run"]].dataset
    if st.session_state.get("dataset") not in datasets:
        st.session_state["dataset"] = datasets[0]
    dataset = sb.selectbox("Data set", datasets, key="dataset")
    names = [r.name for r in runs if r.dataset == dataset]
    if st.session_state.get("run") not in names:
        st.session_state["run"] = names[0]
    name = sb.selectbox("Run", names, key="run")
    run = by_name[name]
    sb.caption(f"{run.variant}: {run.model_config.mechanism.title}")
    for epoch, why in run.bad_snapshots:
        sb.warning(f"Epoch {epoch} of {run.name} is not offered: {redacted(why, root)}")
    epochs = list(run.epochs)
    seed_from_url("epoch", epochs)
    if st.session_state.get("epoch") not in epochs:  # first visit, or a run without the kept epoch
        st.session_state["epoch"] = epochs[-1]
    epoch = sb.select_slider("Epoch (snapshot)", options=epochs, key="epoch")
    for key, value in (("dataset", dataset), ("run", name), ("epoch", epoch)):
        keep_in_url(key, value)
    return run, epoch


def root_picker(sb) -> Path | None:
    """The checkpoint folder field: editable on a local server or inside the allowed folders;
    read-only (with the reason) on a shared server without DAMCHA_ALLOWED_ROOTS."""
    default = default_root()
    editable, why = root_field_editable()
    with sb.expander("Checkpoint folder", expanded=False):
        if not editable:
            st.text_input("Run root", value=shown_path(default, default.parent), disabled=True, key="root_shown")
            st.caption(why)
            st.session_state.pop("checkpoint_root", None)
            return default
        root_text = st.text_input("Run root", value=str(checkpoint_root()), key="root_input",
                                  help="A folder of run directories. Set DAMCHA_CHECKPOINTS to change the default.")
        if root_text != str(checkpoint_root()):
            st.session_state["checkpoint_root"] = root_text
    root = checkpoint_root()
    refused = None if root == default else check_allowed(root)
    if refused:
        sb.error(f"Cannot open {root.name or root}: {refused}. Pick another folder above.")
        return None
    return root


def is_reference_source(path: Path) -> bool:
    """A .pt file, or a folder holding .pt files and no runs: checkpoints of the reference code."""
    if path.is_file():
        return path.suffix == ".pt"
    return path.is_dir() and any(p.suffix == ".pt" for p in path.iterdir()) and not (path / "config.json").exists()


def reference_reading(where) -> tuple[str, str | None]:
    """What the reference checkpoints read (their files do not say): images, or a tokenizer's ids."""
    from damcha.runs.reference import TOKENIZERS

    choices = ["as the file says", "CIFAR patches", *TOKENIZERS]
    reads = where.selectbox("The reference model reads", choices, key="reference_reads",
                            help="Files written by their current code carry their embedding and head (components), "
                                 "which say it; older files hold the decoder only: say what it was trained on.")
    if reads == "as the file says":
        return None, None
    return ("image_patches", None) if reads == "CIFAR patches" else ("tokens", reads)


def reference_stamp(source: Path) -> tuple:
    """Names, sizes and modification times of the .pt files: a changed file is converted again."""
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.suffix == ".pt")
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)


@st.cache_resource(show_spinner="Converting the reference checkpoints…", max_entries=8)
def reference_root(source: Path, modality: str, tokenizer: str | None, stamp: tuple) -> Path:
    """A run root holding the conversion of a reference .pt file or folder (damcha.runs.reference),
    in a temporary folder keyed by the files' stamp."""
    import hashlib
    import tempfile

    from damcha.runs.reference import import_reference

    key = hashlib.sha256(repr((str(source.resolve()), stamp, modality, tokenizer)).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / "damcha-reference" / key
    name = source.stem if source.is_file() else source.name
    if not (root / name / "config.json").exists():
        import_reference(source, root / name, modality, tokenizer=tokenizer)
    return root


def plain_text(text: str) -> str:
    """Text from a file shown as it is: Markdown and HTML characters escaped, so a config's notes
    cannot draw links, images or formatting."""
    escaped = re.sub(r"([\\`*_{}\[\]()#!|~<>$:])", r"\\\1", text)
    escaped = re.sub(r"^(\s*)([-+>])", r"\1\\\2", escaped, flags=re.MULTILINE)  # list and quote markers
    return re.sub(r"^(\s*\d+)\.", r"\1\\.", escaped, flags=re.MULTILINE)  # numbered lists


def each_run(runs, compute) -> list[tuple[Run, object]]:
    """(run, compute(run)) for each run, leaving out the runs whose snapshots cannot be used and
    naming them in one warning: one broken run never takes a page of the others down."""
    out, skipped = [], []
    for r in runs:
        try:
            out.append((r, compute(r)))
        except CheckpointError as e:
            skipped.append(f"{r.name} ({redacted(str(e), checkpoint_root())})")
    if skipped:
        st.warning("Left out, their snapshots cannot be used: " + "; ".join(skipped))
    return out


def selected_run() -> tuple[Run, int]:
    """The sidebar's (run, epoch); stops the page with a message when there is none."""
    run, epoch = st.session_state.get("selection", (None, None))
    if run is None:
        st.warning("No run selected: pick a checkpoint folder with runs in the sidebar.")
        st.stop()
    for note in run.raw_config.get("notes", []):  # what an imported run lacks, in its own words
        st.warning(plain_text(note))
    return run, epoch


def bounded_slider(where, label: str, upper: int, key: str, bind: str | None = URL, **kw) -> int:
    """A slider over 0..upper (default: upper) whose kept value (session or URL) is clamped first:
    a new input may be shorter than the one the value was chosen for."""
    kept = st.session_state.get(key)
    if isinstance(kept, int) and kept > upper:
        st.session_state[key] = upper
    if bind is None:
        return where.slider(label, 0, upper, upper, key=key, **kw)
    return where.slider(label, 0, upper, upper, **bound(key), **kw)


def is_large(run: Run) -> bool:
    """A paper-sized run: its per-position matrices for a full-length input exceed the inspection
    budget, and one forward pass of such an input takes about a second on a CPU."""
    from damcha.analysis.inspection import matrices_fit

    cfg = run.model_config
    return not matrices_fit(cfg, cfg.block_size)


def computed_on_request(run: Run, label: str, key: str) -> bool:
    """Whether to compute a section that runs the model over many inputs, snapshots or integration
    steps: always for small runs; for paper-sized ones only when asked, so the page answers at once."""
    if not is_large(run):
        return True
    on = st.toggle(label, value=False, key=key,
                   help="A paper-sized run: this runs the model many times (minutes on a CPU), so it waits to be asked.")
    if not on:
        st.caption("Not computed yet (paper-sized run): switch it on above.")
    return on


def position_in_context(labels, position: int, width: int = 40) -> str:
    """Markdown of the tokens around `position`, the one at it highlighted: where a query sits in a
    long input, readable where a slider alone is not."""
    def text(part) -> str:
        return plain_text("".join(part))

    before = text(labels[max(0, position - width):position])
    after = text(labels[position + 1:position + 1 + width])
    return (f"{'…' if position > width else ''}{before}:orange-background[**{text(labels[position:position + 1])}**]"
            f"{after}{'…' if position + 1 + width < len(labels) else ''}")


# ----------------------------------------------------------------------------- input picker

def input_picker(run: Run) -> ModelInput | None:
    """Upload, type, or pick a validation sample, as the run's modality allows; returns the model
    input or None (with a message shown). The source, validation index and typed text are in the URL."""
    modality = run_modality(run)
    sources = ["Validation sample"] if run.dataset in BUNDLED_DATASETS else []
    if modality.upload == "image":
        sources.append("Upload an image")
    elif modality.upload == "photo":
        sources.append("Upload a colour photo")
    elif modality.upload == "text":
        sources = ["Type text", "Upload a text file", *sources]
    elif modality.upload == "ids":
        sources = ["Type token ids", *sources]
    if not sources:
        st.info(f"{run.name} reads {modality.title} from local files ({run.dataset}) and takes no uploads.")
        return None
    source = st.radio("Input", sources, horizontal=True, **bound("source"))
    try:
        if source == "Validation sample":
            n = validation_count(run)
            return validation_input(run, url_number_input(st, f"Validation index (0..{n - 1})", 0, n - 1, 0, "sample"))
        if source == "Upload an image":
            up = st.file_uploader("Image of one handwritten digit (PNG, JPEG, GIF, BMP, WebP)",
                                  type=UPLOAD_TYPES["image"], key="upload_image")
            if up is None:
                st.info("Upload a photo or scan of one digit; it is cropped, centred and reduced to 8x8 grey levels.")
                return None
            return input_from_image(run, up.getvalue(), up.name)
        if source == "Upload a colour photo":
            up = st.file_uploader("A colour photo (PNG, JPEG, GIF, BMP, WebP)", type=UPLOAD_TYPES["image"],
                                  key="upload_photo")
            if up is None:
                st.info("Upload any colour photo; it is turned upright, centre-cropped to a square and resized to "
                        "32x32 (Lanczos), then read as 8x8 patches of 4x4 pixels.")
                return None
            return input_from_photo(run, up.getvalue(), up.name)
        if source == "Upload a text file":
            up = st.file_uploader("UTF-8 text file", type=UPLOAD_TYPES["text"], key="upload_text")
            if up is None:
                st.info("Upload a UTF-8 text file; the model reads its first bytes, up to its context length.")
                return None
            return input_from_text(run, up.getvalue(), f"file {up.name}")
        if source == "Type token ids":
            default = " ".join(str(i % run.model_config.vocab_size) for i in range(1, 33))
            return input_from_token_ids(run, typed_text_area(st, "Token ids (spaces or commas)", default, "ids"))
        text = typed_text_area(st, "Text", "The metric of each head is computed from the context.", "text")
        return input_from_text(run, text.encode("utf-8"), "typed text")
    except InputError as e:
        st.error(f"Cannot use this input: {e}")
        return None


def option_controls(run: Run, container=None) -> ForwardOptions:
    """A control for each per-call choice the run's mechanism declares (DAMCHA: the metric mode),
    with its help, in the URL under its declared key."""
    mechanism = run.model_config.mechanism
    where = container or st
    chosen = {c.name: where.radio(c.label, list(c.values), **bound(c.url_key), help=c.help)
              for c in mechanism.option_choices}
    return mechanism.options_from(chosen)


# ----------------------------------------------------------------------------- figures with export

def export_settings_widget() -> None:
    """Sidebar: size, scale and style of exported figures (kept for the session)."""
    from damcha.views.export import ExportSettings

    with st.sidebar.expander("Export settings", expanded=False):
        w = st.number_input("Width (px)", 200, 4000, 460, step=20, key="exp_w",
                            help="460 px fits a single journal column, 940 px a double column (text ≈ 7.5 pt).")
        h = st.number_input("Height (px, 0 = the figure's own)", 0, 4000, 0, step=50, key="exp_h")
        s = st.select_slider("PNG scale", [1.0, 2.0, 3.0, 4.0], value=2.0, key="exp_s")
        paper = st.toggle("Paper style", value=True, key="exp_paper",
                          help="White background, one sans-serif font sized for a single column, RdBu centred at 0.")
    st.session_state["export_settings"] = ExportSettings(int(w), int(h) or None, float(s), bool(paper))


def provenance(figure: str, run: Run | None, epoch: int | None = None, inp: ModelInput | None = None,
               params: dict | None = None, regenerable: bool = False) -> Provenance:
    """The provenance of a figure on this page. regenerable: a named figure of damcha.views.figure_sets
    (`python -m damcha figures --from-provenance` rebuilds it)."""
    return Provenance.of(figure, run, epoch, None if inp is None else inp.tokens, None if inp is None else inp.targets,
                         "" if inp is None else inp.source, params, regenerable, root=checkpoint_root())


def show(fig, name: str, prov: Provenance, width: str = "stretch") -> None:
    """Draw a figure (large heatmaps as block means) and give it export buttons at full resolution
    (PNG/SVG/PDF, offline HTML, CSV/NPZ, provenance); it is also registered for this page's "Export all" ZIP."""
    from damcha.views.export import data_csv, data_npz, figure_bytes, figure_data, static_export_status
    from damcha.views.figures import display_copy

    st.plotly_chart(display_copy(fig), width=width, key=f"chart_{name}")
    st.session_state.setdefault("export_registry", {})[name] = (fig, prov)
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
        st.download_button("Provenance JSON", json.dumps(prov.to_dict(settings), indent=2),
                           f"{name}.provenance.json", "application/json", key=f"dl_{name}_prov",
                           help="Run, epoch, checkpoint and input hashes, settings; "
                                "`python -m damcha figures --from-provenance` rebuilds named figures")
        if not ok:
            st.caption(why)


def export_all_widget() -> None:
    """A ZIP of every figure shown on this page, with data and provenance."""
    from damcha.views.export import STATIC_FORMATS, ExportItem, static_export_status, zip_bundle

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
    settings = st.session_state.get("export_settings")  # read now: the callable runs outside the session
    st.download_button(f"Export all {len(items)} figure{'s' if len(items) != 1 else ''} (ZIP)", lambda: zip_bundle(items, formats, settings),
                       "damcha-figures.zip", "application/zip", key="dl_all", icon=":material/folder_zip:")
