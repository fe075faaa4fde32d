"""Training dynamics: how a mechanism's structures form over epochs for one input, across runs, and over the data set."""

import streamlit as st

from app.cache import class_separations, figure_over_epochs, inspection, model_figure_values, source_of, weight_drift
from app.controls import bounded_slider, computed_on_request, input_picker, is_large, option_choices
from app.export_widgets import provenance, show
from app.run_picker import listed_root, listing, run_page
from app.sharing import failure_text, plain_text
from app.url_state import bound
from damcha.analysis.dynamics import spread_epochs
from damcha.analysis.inspection import matrices_fit, residue_caveat, residue_learned
from damcha.views.epoch_figures import frozen, off_diagonal_reading
from damcha.views.figure_sets import (
    build_figure,
    panel_titles,
    per_head,
)
from damcha.views.model_figures import model_figure

run, epoch = run_page("Training dynamics", all_epochs=True)

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
name = c2.selectbox("Structure", names, **bound("structure"))  # plain names: the URL holds what the box shows
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


def over_epochs(fig_name: str, file_name: str | None = None, **extra) -> None:
    """Show a named figure across the snapshots (damcha.views.epoch_figures) with its provenance."""
    shown = {**params, **extra}
    show(figure_over_epochs(run, inp, fig_name, frozen(shown)), file_name or fig_name,
         provenance(fig_name, run, epochs[-1], inp, shown, regenerable=True))


st.subheader("Over the epochs")
kind = st.radio("View", ["heatmap", "contour", "surface"], horizontal=True, **bound("view"))
st.caption("Press play or drag the slider; one colour range for every frame.")
over_epochs("epoch_animation", view=kind)

st.subheader("Paper-style grids")
chosen_epochs = st.multiselect("Epochs shown", epochs, default=spread_epochs(epochs), key="grid_epochs")
if chosen_epochs:
    t1, t2, t3 = st.tabs(["First vs last (fig. 8)", "Contours (fig. 10)", "3D surfaces (fig. 11)"])
    for tab, fig_name in zip((t1, t2, t3), ("first_vs_last", "contours_grid", "surfaces_grid")):
        with tab:
            over_epochs(fig_name, shown=sorted(chosen_epochs))

if first.has_metric:
    st.subheader("Statistics of M(x) over the epochs")
    with_band = st.toggle("Band over validation inputs (64 samples)", value=not is_large(run), key="band")
    if with_band:
        over_epochs("statistics_with_band", "statistics", inputs=64)
    else:
        over_epochs("statistics")
    learned_residue = residue_learned(first)
    share, _ = off_diagonal_reading(first)
    st.caption(f"The off-diagonal share is read against {share:.2f}: {first.n_head - 1} of every {first.n_head} "
               "blocks of a row are off the diagonal. " + ("Every block is learned here (bilinear form): a departure "
                                                            "from it is learned cross-head structure." if learned_residue else
                                                            "Under the row sum the learned part (each block m_i / H) has "
                                                            "exactly that share, so a departure comes from the untrained "
                                                            "residue alone."))
    drift = weight_drift(run)
    st.markdown(
        "Generator's last layer, relative distance from epoch 0: row-mean part (what the row sum trains) "
        + ", ".join(f"{e}: **{v:.3g}**" for e, v in zip(epochs, drift["row_mean"]))
        + "; within-row residual " + ", ".join(f"{e}: **{v:.2g}**" for e, v in zip(epochs, drift["residual"]))
        + (". Under the bilinear form both parts train." if learned_residue else
           ". Under the row sum the residual stays at float rounding: that part of M(x) is never trained.")
    )
    over_epochs("spectrum")

st.subheader("Difference between two epochs")
a, b = st.columns(2)
ea = a.selectbox("From epoch", epochs, index=0, key="diff_from")
eb = b.selectbox("To epoch", epochs, index=len(epochs) - 1, key="diff_to")
over_epochs("epoch_difference", diff_from=ea, diff_to=eb)

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
        show(build_figure(name, this, where), "comparison_this",
             provenance(name, run, this_epoch, inp, {**where, "mode": this.metric_mode}, regenerable=True))
    with right:
        if theirs is None:
            pass
        elif their_name is None:
            st.caption(f"{other.variant} exposes no cross-head structure.")
        else:
            s = theirs.structure(their_name)
            st.caption(f"{plain_text(other.name)}, epoch {other_epoch}: {s.description} "
                       f"**{s.identifiability.capitalize()}.**")
            show(build_figure(their_name, theirs, where), "comparison_other",
                 provenance(their_name, other, other_epoch, inp, {**where, "mode": theirs.metric_mode}, regenerable=True))

st.subheader("Averaged over validation inputs")
st.caption("Each structure averaged over the first validation inputs at this epoch (for MoA: expert usage and "
           "co-selection over the data set; for DCMHA: composition strength per position).")
m1, m2 = st.columns(2)
n_mean = m1.select_slider("Inputs", [16, 64, 128], value=64, key="mean_n")
mean_epoch = m2.select_slider("Epoch", epochs, value=epoch if epoch in epochs else epochs[-1], key="mean_epoch")
if computed_on_request(run, "Average over validation inputs", "mean_on"):
    averaged = {**params, "n": n_mean}
    show(model_figure("structure_mean", model_figure_values(run, mean_epoch, inp, "structure_mean", frozen(averaged)),
                      averaged, f"epoch {mean_epoch}"), "structure_mean",
         provenance("structure_mean", run, mean_epoch, inp, averaged, regenerable=True))

if first.has_metric and computed_on_request(run, "Project the metrics of validation inputs", "geometry_on"):
    st.subheader("Data-set geometry")
    st.caption("M(x) of validation inputs (last position for causal models), projected to 2D. Does the metric "
               "adapt to the input, and from which epoch?")
    g1, g2, g3 = st.columns(3)
    n = g1.select_slider("Inputs", [64, 128, 256], value=128, key="geo_n")
    method = g2.radio("Projection", ["pca", "tsne"], horizontal=True, key="geo_method",
                      format_func=lambda m: {"pca": "PCA", "tsne": "t-SNE (slower)"}[m])
    geo_epoch = g3.select_slider("Epoch", epochs, value=epochs[-1], key="geo_epoch")
    over_epochs("projection", inputs=n, projection=method, epoch=geo_epoch)
    if not residue_learned(first):
        st.caption("The projection is of the full M(x), residue included. " + residue_caveat("of these metrics"))
    separation = class_separations(run, n, layer)
    st.markdown("Class separation in metric space (silhouette, cosine, from −1 to 1), each beside the range the "
                "same inputs give with their labels shuffled (with many classes even random labels score below 0, "
                "so that range, not 0, is the baseline): "
                + "; ".join(f"epoch {e}: {s.sentence()}" for e, s in separation.items()))
