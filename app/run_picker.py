"""The sidebar's checkpoint folder, data set, run and epoch, and the run a page works on."""

from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

from app.cache import cached_runs
from app.reference_folder import is_reference_source, reference_reading, reference_root, reference_stamp
from app.roots import checkpoint_root, default_root
from app.sharing import check_allowed, redacted, root_field_editable, server_settings_warning, shown_path, skipped_line
from app.url_state import keep_in_url, seed_from_url
from damcha.runs.checkpoints import CheckpointError, Run


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


def selected_run() -> tuple[Run, int]:
    """The sidebar's (run, epoch); stops the page with a message when there is none."""
    run, epoch = st.session_state.get("selection", (None, None))
    if run is None:
        st.warning("No run selected: pick a checkpoint folder with runs in the sidebar.")
        st.stop()
    for note in run.raw_config.get("notes", []):  # what an imported run lacks, in its own words
        st.warning(plain_text(note))
    return run, epoch


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


def plain_text(text: str) -> str:
    """Text from a file shown as it is: Markdown and HTML characters escaped, so a config's notes
    cannot draw links, images or formatting."""
    escaped = re.sub(r"([\\`*_{}\[\]()#!|~<>$:])", r"\\\1", text)
    escaped = re.sub(r"^(\s*)([-+>])", r"\1\\\2", escaped, flags=re.MULTILINE)  # list and quote markers
    return re.sub(r"^(\s*\d+)\.", r"\1\\.", escaped, flags=re.MULTILINE)  # numbered lists
