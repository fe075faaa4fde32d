"""Training dynamics: how M(x) forms over epochs for one input, across runs, and over the data set."""

import numpy as np
import streamlit as st

from app.ui import (
    cached_runs,
    checkpoint_root,
    dataset_metrics_cached,
    input_picker,
    model_for,
    selected_run,
    set_export_context,
    show,
    sweep_cached,
    weight_drift_cached,
)
from damcha import figures
from damcha.dynamics import (
    STATISTICS,
    class_separation,
    metric_statistics,
    mha_implied_metrics,
    project,
    symmetric_spectrum,
)
from damcha.inspection import identifiability_note

st.title("Training dynamics")
run, epoch = selected_run()
cfg = run.model_config
st.caption(f"Run **{run.name}** ({run.variant}); snapshots at epochs {list(run.epochs)}.")
if not cfg.is_damcha:
    st.info("This run is standard multi-head attention: it has no M(x). Its implied per-head bilinear forms "
            "are shown under *Compare runs* when it is the second run of a comparison.")

inp = input_picker(run, key="dyn")
if inp is None or not cfg.is_damcha:
    st.stop()

c1, c2, c3 = st.columns(3)
mode = c1.radio("Metric mode", ["full", "diagonal", "off_diagonal"], key="dyn_mode", horizontal=True)
T = len(inp.tokens)
pos = c2.slider("Query position", 0, T - 1, T - 1, key="dyn_pos") if cfg.causal else 0
n_metric = cfg.n_layer if cfg.metric_sharing == "per_layer" else 1
layer = c3.selectbox("Layer", list(range(n_metric)), format_func=lambda i: f"layer {i + 1}", key="dyn_layer") \
    if n_metric > 1 else 0
part = c3.radio("Matrix", ["M(x)", "learned part", "residue"], key="dyn_part", horizontal=True)
st.info(identifiability_note(cfg.score_form))
set_export_context(run, epoch, inp, mode=mode, layer=layer, position=pos, part=part)

sweep = sweep_cached(run, inp, mode)
epochs = list(sweep.epochs)
field = {"M(x)": "metric", "learned part": "metric_learned", "residue": "metric_residue"}[part]
mats = np.stack([getattr(r, field)[layer, pos] for r in sweep.records])  # (E, D, D)
full = sweep.metric_at(layer, pos)  # (E, D, D)
H = cfg.n_head
where = f"position {pos}" if cfg.causal else "whole input"

st.subheader("Over the epochs")
kind = st.radio("View", ["heatmap", "contour", "surface"], horizontal=True, key="dyn_kind")
st.caption("Press play or drag the slider; one colour range for every frame.")
show(figures.epoch_animation_figure(mats, epochs, H, kind, f"{part}, {where}"), "epoch_animation")

st.subheader("Paper-style grids")
default = [epochs[i] for i in np.unique(np.linspace(0, len(epochs) - 1, min(5, len(epochs))).round().astype(int))]
chosen = st.multiselect("Epochs shown", epochs, default=default, key="dyn_grid_epochs")
if chosen:
    idx = [epochs.index(e) for e in sorted(chosen)]
    t1, t2, t3 = st.tabs(["First vs last (fig. 8)", "Contours (fig. 10)", "3D surfaces (fig. 11)"])
    with t1:
        pair = [idx[0], idx[-1]]
        show(figures.small_multiples_figure([mats[i] for i in pair], [f"epoch {epochs[i]}" for i in pair], H,
                                                       "heatmap", f"{part}: first vs last epoch"), "first_vs_last")
    with t2:
        show(figures.small_multiples_figure([mats[i] for i in idx], [f"epoch {epochs[i]}" for i in idx], H,
                                                       "contour", f"{part}: contours"), "contours_grid")
    with t3:
        show(figures.small_multiples_figure([mats[i] for i in idx], [f"epoch {epochs[i]}" for i in idx], H,
                                                       "surface", f"{part}: surfaces"), "surfaces_grid")

st.subheader("Statistics over the epochs")
stats = [metric_statistics(M, H) for M in full]
shown = ["frobenius", "off_diagonal_share", "residue_share", "asymmetry", "negative_share", "effective_rank"]
curves = {STATISTICS[k]: [s[k] for s in stats] for k in shown}
with_band = st.toggle("Band over validation inputs (64 samples)", value=True, key="dyn_band")
bands = None
if with_band:
    data_mats, _, _ = dataset_metrics_cached(run, 64)
    bands = {}
    for k in shown:
        per_epoch = [[metric_statistics(M[layer], H)[k] for M in data_mats[e]] for e in epochs]
        bands[STATISTICS[k]] = tuple(list(np.percentile(v, q) for v in per_epoch) for q in (10, 50, 90))
metrics = {m["epoch"]: m for m in run.metrics}
losses = {"train": [metrics.get(e, {}).get("train_nll") for e in epochs],
          "validation": [metrics.get(e, {}).get("val_nll") for e in epochs]}
show(figures.statistic_curves_figure(epochs, curves, bands, losses, f"M(x) statistics, {where}"), "statistics")
drift = weight_drift_cached(run)
st.markdown(
    "Generator's last layer, relative distance from epoch 0: row-mean part (what the row sum trains) "
    + ", ".join(f"{e}: **{v:.3g}**" for e, v in zip(epochs, drift["row_mean"]))
    + "; within-row residual " + ", ".join(f"{e}: **{v:.2g}**" for e, v in zip(epochs, drift["residual"]))
    + (". Under the row sum the residual stays at float rounding: that part of M(x) is never trained."
       if cfg.score_form == "row_sum" else ". Under the bilinear form both parts train.")
)
show(figures.spectrum_figure(epochs, [symmetric_spectrum(M) for M in full]), "spectrum")

st.subheader("Difference between two epochs")
a, b = st.columns(2)
ea = a.selectbox("From epoch", epochs, index=0, key="dyn_diff_a")
eb = b.selectbox("To epoch", epochs, index=len(epochs) - 1, key="dyn_diff_b")
diff = mats[epochs.index(eb)] - mats[epochs.index(ea)]
show(figures.metric_heatmap_figure(diff, H, f"{part}: epoch {eb} − epoch {ea}", colorbar_title="Δ"), "epoch_difference")

st.subheader("Compare runs")
runs, _ = cached_runs(str(checkpoint_root()))
others = [r for r in runs if r.dataset == run.dataset and r.name != run.name]
if not others:
    st.caption("No other run on this data set.")
else:
    other = st.selectbox("Second run", others, format_func=lambda r: f"{r.name} ({r.variant})", key="dyn_other")
    other_epoch = st.select_slider("Its epoch", list(other.epochs), value=other.epochs[-1], key="dyn_other_epoch")
    mine = mats[epochs.index(epoch)] if epoch in epochs else mats[-1]
    if other.model_config.is_damcha:
        rec = sweep_cached(other, inp, mode).records[list(other.epochs).index(other_epoch)]
        theirs = getattr(rec, field)[min(layer, rec.metric.shape[0] - 1), pos]
        panels = {f"{run.name} (epoch {epoch})": mine, f"{other.name} (epoch {other_epoch})": theirs}
        if theirs.shape == mine.shape:
            panels["difference (first − second)"] = mine - theirs
        show(figures.metric_panels_figure(panels, H, f"{part}, {where}, same input"), "run_comparison")
    else:
        implied = mha_implied_metrics(model_for(other, other_epoch), 0)
        st.caption("MHA has no M(x). Its closest honest analogue: each head's bilinear form B_h = W_Q^h W_K^hᵀ "
                   "(D×D, rank d_h, the same for every input; biases omitted), layer 1.")
        show(figures.small_multiples_figure(list(implied), [f"head {h + 1}" for h in range(H)], H, "heatmap",
                                                       f"{other.name}: B_h, epoch {other_epoch}"), "mha_implied")

st.subheader("Data-set geometry")
st.caption("M(x) of validation inputs (last position for causal models), projected to 2D. Does the metric "
           "adapt to the input, and from which epoch?")
g1, g2, g3 = st.columns(3)
n = g1.select_slider("Inputs", [64, 128, 256], value=128, key="dyn_geo_n")
method = g2.radio("Projection", ["pca", "tsne"], horizontal=True, key="dyn_geo_method",
                  format_func=lambda m: {"pca": "PCA", "tsne": "t-SNE (slower)"}[m])
geo_epoch = g3.select_slider("Epoch", epochs, value=epochs[-1], key="dyn_geo_epoch")
data_mats, labels, inputs = dataset_metrics_cached(run, n)
if labels is None:  # text: colour by the share of letters in the window
    letters = np.array([np.mean([(65 <= t <= 90) or (97 <= t <= 122) for t in row]) for row in inputs])
    labels = np.digitize(letters, np.quantile(letters, [1 / 3, 2 / 3]))
    label_name = "letter-share tercile"
else:
    label_name = "digit"
points = project(data_mats[geo_epoch][:, layer], method)
show(figures.projection_figure(points, labels, f"M(x) of {n} validation inputs, epoch {geo_epoch} ({method})",
                                          label_name), "projection")
sep = [class_separation(data_mats[e][:, layer], labels) for e in epochs]
st.markdown("Class separation in metric space (silhouette, cosine; 0 = none): "
            + ", ".join(f"epoch {e}: **{s:.3f}**" for e, s in zip(epochs, sep)))
