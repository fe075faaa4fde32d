"""The sidebar's checkpoint folder, data set, run and epoch, and the run a page works on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.cache import cached_runs
from app.reference_folder import is_reference_source, reference_reading, reference_root, reference_stamp
from app.roots import checkpoint_root, default_root
from app.sharing import (
    failure_text,
    folder_problem,
    plain_text,
    redacted,
    root_field_editable,
    server_settings_warning,
    shown_path,
    skipped_line,
)
from app.url_state import keep_in_url, seed_from_url
from damcha.runs.checkpoints import CheckpointError, Run


def run_picker() -> tuple[Run | None, int | None]:
    """Sidebar: checkpoint root, data set, run, epoch. Data set, run and epoch are always in the URL
    (?dataset=…&run=…&epoch=…), so a copied link reopens the same view."""
    sb = st.sidebar
    warning = server_settings_warning()
    if warning:
        sb.warning(warning)
    st.session_state["listing"] = Listing()
    runs, root = _listed_runs(sb)
    if not runs:
        return None, None
    by_name = {r.name: r for r in runs}
    dataset, name = _chosen_run(sb, by_name)
    run = by_name[name]
    sb.caption(f"{plain_text(run.variant)}: {run.model_config.mechanism.title}")
    for epoch, why in run.bad_snapshots:
        sb.warning(f"Epoch {epoch} of {plain_text(run.name)} is not offered: {redacted(why, root)}")
    epochs = list(run.epochs)
    seed_from_url("epoch", epochs)
    if st.session_state.get("epoch") not in epochs:  # first visit, or a run without the kept epoch
        st.session_state["epoch"] = epochs[-1]
    epoch = sb.select_slider("Epoch (snapshot)", options=epochs, key="epoch")
    for key, value in (("dataset", dataset), ("run", name), ("epoch", epoch)):
        keep_in_url(key, value)
    return run, epoch


def _listed_runs(sb) -> tuple[list[Run], Path | None]:
    """The runs of the chosen folder (the authors' checkpoints converted once first), each folder that is
    not a run named in the sidebar; no runs, with the message shown, where there are none to open."""
    root = root_picker(sb)
    if root is None:
        return [], None
    try:
        if is_reference_source(root):  # checkpoints of the authors' code: converted once, then opened as runs
            root = reference_root(root, *reference_reading(sb), reference_stamp(root))
        runs, bad = cached_runs(str(root))
    except (CheckpointError, ValueError, OSError) as e:
        sb.error(f"{redacted(str(e), root)}. Pick another folder above.")
        return [], root
    st.session_state["listing"] = Listing(root, runs, bad)
    for path, why in bad:
        sb.warning(skipped_line(path, why, root))
    if not runs:
        sb.info("No runs in this folder. Train one with `python -m damcha train --out DIR`.")
    return runs, root


def _chosen_run(sb, by_name: dict[str, Run]) -> tuple[str, str]:
    """(data set, run name) as the sidebar's selects hold them, seeded from the URL: a link's run decides
    its data set (and one not in this folder is said to be missing)."""
    datasets = sorted({r.dataset for r in by_name.values()})
    first_visit = "run" not in st.session_state
    linked = st.query_params.get("run")
    if first_visit and linked is not None and linked not in by_name:
        sb.warning(f"The link's run {plain_text(linked[:100])} is not in this folder; another run is shown.")
    seed_from_url("run", by_name)
    seed_from_url("dataset", datasets)
    if first_visit and st.session_state.get("run") in by_name:
        st.session_state["dataset"] = by_name[st.session_state["run"]].dataset
    if st.session_state.get("dataset") not in datasets:
        st.session_state["dataset"] = datasets[0]
    dataset = sb.selectbox("Data set", datasets, key="dataset")
    names = [r.name for r in by_name.values() if r.dataset == dataset]
    if st.session_state.get("run") not in names:
        st.session_state["run"] = names[0]
    return dataset, sb.selectbox("Run", names, key="run")


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
            # A typed folder is adopted only once it can be opened: otherwise one message here,
            # and the folder in use stays.
            problem = folder_problem(Path(root_text)) if root_text.strip() else "no folder given"
            if problem is None:
                st.session_state["checkpoint_root"] = root_text
            else:
                st.error(f"Not opened: {problem}. Still showing {plain_text(shown_path(checkpoint_root(), checkpoint_root()))}.")
    root = checkpoint_root()
    refused = None if root == default else folder_problem(root)
    if refused:
        sb.error(f"Cannot open {plain_text(root.name or str(root))[:200]}: {refused}. Pick another folder above.")
        return None
    return root


def selected_run() -> tuple[Run, int]:
    """The sidebar's (run, epoch); stops the page with a message when there is none."""
    run, epoch = st.session_state.get("selection", (None, None))
    if run is None:
        st.warning("No run selected: pick a checkpoint folder with runs in the sidebar.")
        st.stop()
    for note in run.raw_config.get("provenance", []):  # where the run came from: information
        st.info(plain_text(note))
    for note in run.raw_config.get("notes", []):  # what an imported run lacks, in its own words: a caveat
        st.warning(plain_text(note))
    return run, epoch


def run_page(title: str, note: str = "", all_epochs: bool = False) -> tuple[Run, int]:
    """The header every page about one run shares: its title, then the sidebar's run and epoch in
    one line (every snapshot's epoch instead, for pages across epochs) and the page's own note."""
    st.title(title)
    run, epoch = selected_run()
    where = f"snapshots at epochs {list(run.epochs)}" if all_epochs else f"epoch **{epoch}** of {run.epochs[-1]}"
    st.caption(f"Run **{plain_text(run.name)}** ({run.variant}), {where}." + (f" {note}" if note else ""))
    return run, epoch


def each_run(runs, compute) -> list[tuple[Run, object]]:
    """(run, compute(run)) for each run, leaving out the runs that fail, whatever they raise, and
    naming them in one warning: one broken run never takes a page of the others down."""
    out, skipped = [], []
    for r in runs:
        try:
            out.append((r, compute(r)))
        except Exception as e:  # noqa: BLE001 — a sibling's failure is reported on it, never on this page
            skipped.append(f"{plain_text(r.name)} ({failure_text(e, listed_root())})")
    if skipped:
        st.warning("Left out, they cannot be used: " + "; ".join(skipped))
    return out


@dataclass(frozen=True)
class Listing:
    """What the sidebar opened: the folder (after the fence and any reference conversion), its runs,
    and the folders it skipped with why. Pages read runs from here, never from a typed path."""

    root: Path | None = None
    runs: Sequence[Run] = ()
    skipped: Sequence[tuple[Path, str]] = ()


def listing() -> Listing:
    return st.session_state.get("listing") or Listing()


def listed_root() -> Path:
    """The folder messages are shown relative to: the opened one, else the default."""
    return listing().root or default_root()
