"""Training dynamics: how a mechanism's structures form over epochs for one input, across runs, and over the data set."""

import streamlit as st

from app.cache import class_separations, inspection, source_of, weight_drift
from app.controls import (
    bounded_slider,
    holds_validation_inputs,
    input_picker,
    is_large,
    option_choices,
    over_validation_inputs,
)
from app.named_figures import not_placed, show_epoch_figure, show_model_figure, show_record_figure
from app.run_picker import listed_root, listing, run_page
from app.sharing import failure_text, plain_text
from app.url_state import bound
from damcha.analysis.dynamics import spread_epochs
from damcha.analysis.inspection import matrices_fit, residue_caveat, residue_learned
from damcha.views.epoch_figures import EPOCH_FIGURES
from damcha.views.figure_sets import (
    panel_titles,
    per_head,
)
from damcha.views.readings import (
    fixed_structure_sentence,
    generator_drift_sentence,
    one_snapshot_sentence,
    separation_sentence,
    statistics_caption,
)

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("contour", "contours_grid", "epoch_animation", "epoch_difference", "first_vs_last", "projection",
                  "spectrum", "statistics", "statistics_with_band", "structure_mean", "surface", "surfaces_grid")

run, epoch = run_page("Training dynamics", all_epochs=True)
cfg = run.model_config
if one_snapshot_sentence(run.epochs):
    st.info(one_snapshot_sentence(run.epochs))
    st.stop()

inp = input_picker(run)
if inp is None:
    st.stop()

c1, c2, c3, c4 = st.columns(4)
choices = option_choices(run, c1)
T = len(inp.tokens)
# A long input of a wide model: each snapshot's matrices at the viewed position only.
viewed_only = run.model_config.causal and not matrices_fit(run.model_config, T)
if viewed_only:
    pos = bounded_slider(c2, "Query position", T - 1, "position")
params = {"options": choices, "positions": [pos] if viewed_only else None}
result = source_of(run, inp, params)("sweep")
epochs = list(result.epochs)
first = result.records[0]
if not first.structures:
    st.info(f"{run.variant} exposes no cross-head structure to follow over training.")
    st.stop()
names = [s.name for s in first.structures]
name = c2.selectbox("Structure", names, format_func=lambda n: first.structure(n).title,
                    **bound("structure"))  # the URL holds the structure's name, the box shows its title
chosen = first.structure(name)
if not viewed_only:
    pos = bounded_slider(c2, "Query position", T - 1, "position") \
        if chosen.size("position") > 1 or "token" in chosen.index_axes else 0
layer = c3.selectbox("Layer", list(range(1, chosen.size("layer") + 1)), **bound("layer")) - 1 \
    if chosen.size("layer") > 1 else 0
panels = panel_titles(chosen, first) if per_head(chosen) else []
if st.session_state.get("head", 0) >= max(len(panels), 1):  # chosen for a structure with more panels
    st.session_state["head"] = 0
head = c3.selectbox(chosen.axis_title(chosen.drawn[0]).capitalize(), list(range(len(panels))),
                    format_func=panels.__getitem__, key="head") if per_head(chosen) else 0
for note in first.notes:
    st.info(note)
params.update(structure=name, layer=layer, position=pos, head=head)


st.subheader("Over the epochs")
fixed = fixed_structure_sentence(chosen)
if fixed:  # an animation of a constant would read as a structure training keeps in place
    st.info(fixed)
    show_record_figure(name, first, run, epochs[0], inp, params)
else:
    kind = st.radio("View", ["heatmap", "contour", "surface"], horizontal=True, **bound("view"))
    st.caption("Press play or drag the slider; one colour range for every frame.")
    show_epoch_figure("epoch_animation", run, inp, {**params, "view": kind})
    st.subheader("Paper-style grids")
    chosen_epochs = st.multiselect("Epochs shown", epochs, default=spread_epochs(epochs), key="grid_epochs")
if not fixed and chosen_epochs:
    grids = {"First vs last (fig. 8)": "first_vs_last", "Contours (fig. 10)": "contours_grid",
             "3D surfaces (fig. 11)": "surfaces_grid"}
    for tab, fig_name in zip(st.tabs(list(grids), **bound("grid")), grids.values()):
        if tab.open is not False:  # bound to the URL, the tabs track which is open: hidden ones build nothing
            with tab:
                show_epoch_figure(fig_name, run, inp, {**params, "shown": sorted(chosen_epochs)})

if cfg.mechanism.metric(cfg) is not None:
    st.subheader("Statistics of M(x) over the epochs")
    with_band = holds_validation_inputs(run) and \
        st.toggle("Band over validation inputs (64 samples)", value=not is_large(run), key="band")
    show_epoch_figure("statistics_with_band" if with_band else "statistics", run, inp, {**params, "inputs": 64},
                      "statistics")
    st.caption(statistics_caption(first))
    st.markdown(generator_drift_sentence(weight_drift(run), epochs, first))
    show_epoch_figure("spectrum", run, inp, params)

st.subheader("Difference between two epochs")
a, b = st.columns(2)
ea = a.selectbox("From epoch", epochs, index=0, key="diff_from")
eb = b.selectbox("To epoch", epochs, index=len(epochs) - 1, key="diff_to")
show_epoch_figure("epoch_difference", run, inp, {**params, "diff_from": ea, "diff_to": eb})

st.subheader("Compare runs")
runs = listing().runs
others = [r for r in runs if r.dataset == run.dataset and r.name != run.name]
if not others:
    st.caption("No other run on this data set.")
else:
    other = st.selectbox("Second run", others, format_func=lambda r: f"{r.name} ({r.variant})", key="other")
    other_epoch = st.select_slider("Its epoch", list(other.epochs), value=other.epochs[-1], key="other_epoch")
    try:
        theirs = inspection(other, other_epoch, inp, None, tuple(first.positions.tolist()) if viewed_only else None)
    except Exception as e:  # noqa: BLE001 — the other run's failure is its own (CheckpointError or anything else)
        theirs = None
        st.warning(f"{plain_text(other.name)} at epoch {other_epoch} cannot be used: {failure_text(e, listed_root())}")
    their_name = st.selectbox("Its structure", [s.name for s in theirs.structures], key="other_structure",
                              format_func=lambda n: theirs.structure(n).title) if theirs and theirs.structures else None
    this_epoch = epoch if epoch in epochs else epochs[-1]
    this = result.records[epochs.index(this_epoch)]  # the structure at the sidebar's epoch, not at epoch 0
    where = {"layer": layer, "position": pos, "named_run": True}
    left, right = st.columns(2)
    with left:
        show_record_figure(name, this, run, this_epoch, inp, {**where, "options": choices}, "comparison_this")
    with right:
        if theirs is None:
            pass
        elif their_name is None:
            st.caption(f"{other.variant} exposes no cross-head structure.")
        else:
            s = theirs.structure(their_name)
            st.caption(f"{plain_text(other.name)}, epoch {other_epoch}: {s.description} "
                       f"**{s.identifiability.capitalize()}.**")
            show_record_figure(their_name, theirs, other, other_epoch, inp, where, "comparison_other")

st.subheader("Averaged over validation inputs")
st.caption("Each structure averaged over the first validation inputs at this epoch (for MoA: expert usage and "
           "co-selection over the data set; for DCMHA: composition strength per position).")
m1, m2 = st.columns(2)
n_mean = m1.select_slider("Inputs", [16, 64, 128], value=64, key="mean_n")
mean_epoch = m2.select_slider("Epoch", epochs, value=epoch if epoch in epochs else epochs[-1], key="mean_epoch")
if over_validation_inputs(run, "Average over validation inputs", "mean_on"):
    show_model_figure("structure_mean", run, mean_epoch, inp, {**params, "n": n_mean}, where=f"epoch {mean_epoch}")

if cfg.mechanism.metric(cfg) is not None and over_validation_inputs(run, "Project the metrics of validation inputs", "geometry_on"):
    st.subheader("Data-set geometry")
    st.caption("M(x) of validation inputs (last position for causal models), projected to 2D. Does the metric "
               "adapt to the input, and from which epoch?")
    g1, g2, g3 = st.columns(3)
    n = g1.select_slider("Inputs", [64, 128, 256], value=128, key="geo_n")
    method = g2.radio("Projection", ["pca", "tsne"], horizontal=True, key="geo_method",
                      format_func=lambda m: {"pca": "PCA", "tsne": "t-SNE (slower)"}[m])
    geo_epoch = g3.select_slider("Epoch", epochs, value=epochs[-1], key="geo_epoch")
    show_epoch_figure("projection", run, inp, {**params, "inputs": n, "projection": method, "epoch": geo_epoch})
    if not residue_learned(first):
        st.caption("The projection is of the full M(x), residue included. " + residue_caveat("of these metrics"))
    st.markdown(separation_sentence(class_separations(run, n, layer)))

more = not_placed(EPOCH_FIGURES)
if more:
    st.subheader("More figures across the snapshots")
    st.caption("Every other named figure of a run across its snapshots, as its table declares it.")
    for more_name in more:
        try:
            show_epoch_figure(more_name, run, inp, params)
        except ValueError as e:  # a figure that does not apply to this run says why
            st.info(f"{more_name}: {e}")
