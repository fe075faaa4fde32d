"""Training dynamics: how a mechanism's structures form over epochs for one input, across runs, and over the data set."""

import streamlit as st

from app.cache import inspection, mean_structures, projection, statistic_bands, sweep, weight_drift
from app.controls import bounded_slider, computed_on_request, input_picker, is_large, option_controls
from app.export_widgets import provenance, show
from app.run_picker import listed_root, listing, run_page
from app.sharing import failure_text, plain_text
from app.url_state import bound
from damcha.analysis.dynamics import (
    STATISTICS,
    spread_epochs,
    statistic_curves,
    symmetric_spectrum,
    unstructured_baselines,
)
from damcha.analysis.inspection import matrices_fit, residue_caveat, residue_learned
from damcha.inputs.modalities import loss_factor, loss_label
from damcha.views import figures
from damcha.views.figure_sets import (
    panel_titles,
    per_head,
    positions_only,
    structure_figure,
    structure_index,
    structure_style,
)

run, epoch = run_page("Training dynamics", all_epochs=True)

inp = input_picker(run)
if inp is None:
    st.stop()

c1, c2, c3, c4 = st.columns(4)
options = option_controls(run, c1)
T = len(inp.tokens)
# A long input of a wide model: each snapshot's matrices at the viewed position only.
viewed_only = run.model_config.causal and not matrices_fit(run.model_config, T)
if viewed_only:
    pos = bounded_slider(c2, "Query position", T - 1, "position")
result = sweep(run, inp, options, (pos,) if viewed_only else None)
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
index = structure_index(first, layer, pos)
params = {"structure": name, "layer": layer, "position": pos, "head": head, "mode": first.metric_mode}
head_index = head if per_head(chosen) else None
mats = result.over_epochs(name, index, head_index)  # (E, a, b)
style = structure_style(chosen, first)
where = first.where(index["position"]) if "position" in chosen.index_axes else \
    (f"token {pos}" if "token" in chosen.index_axes else "whole input")
label = chosen.title + (f", {panels[head]}" if per_head(chosen) else "")


def here(fig_name: str, **extra):
    """The provenance of a figure of this page."""
    return provenance(fig_name, run, epoch, inp, {**params, **extra})


st.subheader("Over the epochs")
kind = st.radio("View", ["heatmap", "contour", "surface"], horizontal=True, **bound("view"))
st.caption("Press play or drag the slider; one colour range for every frame.")
show(figures.epoch_animation_figure(mats, epochs, style, kind, f"{label}, {where}"), "epoch_animation",
     here("epoch_animation", view=kind))

st.subheader("Paper-style grids")
chosen_epochs = st.multiselect("Epochs shown", epochs, default=spread_epochs(epochs), key="grid_epochs")
if chosen_epochs:
    idx = [epochs.index(e) for e in sorted(chosen_epochs)]
    titles = [f"epoch {epochs[i]}" for i in idx]
    t1, t2, t3 = st.tabs(["First vs last (fig. 8)", "Contours (fig. 10)", "3D surfaces (fig. 11)"])
    with t1:
        pair = [idx[0], idx[-1]]
        show(figures.small_multiples_figure([mats[i] for i in pair], [titles[0], titles[-1]], style, "heatmap",
                                            f"{label}: first vs last epoch"), "first_vs_last", here("first_vs_last"))
    with t2:
        show(figures.small_multiples_figure([mats[i] for i in idx], titles, style, "contour", f"{label}: contours"),
             "contours_grid", here("contours_grid"))
    with t3:
        show(figures.small_multiples_figure([mats[i] for i in idx], titles, style, "surface", f"{label}: surfaces"),
             "surfaces_grid", here("surfaces_grid"))

if first.has_metric:
    st.subheader("Statistics of M(x) over the epochs")
    full = result.over_epochs("metric", index)  # (E, D, D)
    shown = ("frobenius", "off_diagonal_share", "residue_share", "asymmetry", "negative_share", "effective_rank")
    curves = statistic_curves(full, first.n_head, shown)
    with_band = st.toggle("Band over validation inputs (64 samples)", value=not is_large(run), key="band")
    bands = statistic_bands(run, 64, layer, shown) if with_band else None
    metrics = {m["epoch"]: m for m in run.metrics}
    factor = loss_factor(run.model_config)
    losses = {split: [None if metrics.get(e, {}).get(key) is None else metrics[e][key] * factor for e in epochs]
              for split, key in (("train", "train_nll"), ("validation", "val_nll"))}
    H = first.n_head
    learned_residue = residue_learned(first)
    block_count = ((H - 1) / H, f"(H−1)/H = {(H - 1) / H:.2f}: " + ("equal blocks" if learned_residue else
                                                                    "the learned part's share (row sum)"))
    unstructured = unstructured_baselines(full.shape[-1], H)
    show(figures.statistic_curves_figure(epochs, curves, bands, losses, f"M(x) statistics, {where}",
                                         {STATISTICS["off_diagonal_share"]: block_count,
                                          **{STATISTICS[k]: (unstructured[k], f"{unstructured[k]:.2f}: a random matrix")
                                             for k in ("asymmetry", "negative_share")}},
                                         f"loss ({loss_label(run.model_config)})"), "statistics",
         here("statistics"))
    st.caption(f"The off-diagonal share is read against {block_count[0]:.2f}: {H - 1} of every {H} blocks of a row "
               "are off the diagonal. " + ("Every block is learned here (bilinear form): a departure from it is learned "
                                           "cross-head structure." if learned_residue else
                                           "Under the row sum the learned part (each block m_i / H) has exactly that "
                                           "share, so a departure comes from the untrained residue alone."))
    drift = weight_drift(run)
    row_sum = not learned_residue
    st.markdown(
        "Generator's last layer, relative distance from epoch 0: row-mean part (what the row sum trains) "
        + ", ".join(f"{e}: **{v:.3g}**" for e, v in zip(epochs, drift["row_mean"]))
        + "; within-row residual " + ", ".join(f"{e}: **{v:.2g}**" for e, v in zip(epochs, drift["residual"]))
        + (". Under the row sum the residual stays at float rounding: that part of M(x) is never trained."
           if row_sum else ". Under the bilinear form both parts train.")
    )
    show(figures.spectrum_figure(epochs, [symmetric_spectrum(M) for M in full]), "spectrum", here("spectrum"))

st.subheader("Difference between two epochs")
a, b = st.columns(2)
ea = a.selectbox("From epoch", epochs, index=0, key="diff_from")
eb = b.selectbox("To epoch", epochs, index=len(epochs) - 1, key="diff_to")
diff = result.difference(name, index, head_index, ea, eb)
changed = " (1: changed, 0: unchanged)" if style.value_kind == "mask" else ""
show(figures.matrix_figure(diff, style.difference(), f"{label}: epoch {eb} − epoch {ea}{changed}"),
     "epoch_difference", here("epoch_difference", diff_from=ea, diff_to=eb))

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
    left, right = st.columns(2)
    with left:
        show(structure_figure(this.structure(name), this, index, f", {run.name} epoch {this_epoch}"),
             "comparison_this", here("comparison_this"))
    with right:
        if theirs is None:
            pass
        elif their_name is None:
            st.caption(f"{other.variant} exposes no cross-head structure.")
        else:
            s = theirs.structure(their_name)
            st.caption(f"{plain_text(other.name)}: {s.description} **{s.identifiability.capitalize()}.**")
            show(structure_figure(s, theirs, index, f", {other.name} epoch {other_epoch}"), "comparison_other",
                 provenance("comparison_other", other, other_epoch, inp, {"structure": their_name, **index}))

st.subheader("Averaged over validation inputs")
st.caption("Each structure averaged over the first validation inputs at this epoch (for MoA: expert usage and "
           "co-selection over the data set; for DCMHA: composition strength per position).")
m1, m2 = st.columns(2)
n_mean = m1.select_slider("Inputs", [16, 64, 128], value=64, key="mean_n")
mean_epoch = m2.select_slider("Epoch", epochs, value=epoch if epoch in epochs else epochs[-1], key="mean_epoch")
if computed_on_request(run, "Average over validation inputs", "mean_on"):
    means = {s.name: s for s in mean_structures(run, mean_epoch, n_mean, options,
                                                       tuple(first.positions.tolist()) if viewed_only else None)}
    positions_record = positions_only(first)
    show(structure_figure(means[name], positions_record, index, f", epoch {mean_epoch}"), "structure_mean",
         here("structure_mean", n=n_mean, mean_epoch=mean_epoch))

if first.has_metric and computed_on_request(run, "Project the metrics of validation inputs", "geometry_on"):
    st.subheader("Data-set geometry")
    st.caption("M(x) of validation inputs (last position for causal models), projected to 2D. Does the metric "
               "adapt to the input, and from which epoch?")
    g1, g2, g3 = st.columns(3)
    n = g1.select_slider("Inputs", [64, 128, 256], value=128, key="geo_n")
    method = g2.radio("Projection", ["pca", "tsne"], horizontal=True, key="geo_method",
                      format_func=lambda m: {"pca": "PCA", "tsne": "t-SNE (slower)"}[m])
    geo_epoch = g3.select_slider("Epoch", epochs, value=epochs[-1], key="geo_epoch")
    points, labels, label_name, separation = projection(run, n, geo_epoch, layer, method)
    show(figures.projection_figure(points, labels, f"M(x) of {n} validation inputs, epoch {geo_epoch} ({method})",
                                   label_name), "projection", here("projection", n=n, method=method))
    if not residue_learned(first):
        st.caption("The projection is of the full M(x), residue included. " + residue_caveat("of these metrics"))
    st.markdown("Class separation in metric space (silhouette, cosine, from −1 to 1), each beside the range the "
                "same inputs give with their labels shuffled (with many classes even random labels score below 0, "
                "so that range, not 0, is the baseline): "
                + "; ".join(f"epoch {e}: {s.sentence()}" for e, s in separation.items()))
