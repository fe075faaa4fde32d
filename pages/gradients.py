"""Gradient contributions: which entries of M(x) drive the loss, and which input tokens drive M(x)."""

import numpy as np
import streamlit as st

from app.ui import (
    cached_runs,
    checkpoint_root,
    contributions_cached,
    input_picker,
    selected_run,
    set_export_context,
    show,
    token_attributions_cached,
)
from damcha import figures
from damcha.data import DIGIT_START
from damcha.inspection import identifiability_note

st.title("Gradient contributions")
run, epoch = selected_run()
cfg = run.model_config
st.caption(f"Run **{run.name}** ({run.variant}), epoch **{epoch}**. Computed with captum on a private copy of "
           "the model; the shared model is never hooked.")
inp = input_picker(run, key="grad")
if inp is None:
    st.stop()
set_export_context(run, epoch, inp)

if cfg.is_damcha:
    st.subheader("Contribution of each entry of M(x) to the loss")
    st.info(identifiability_note(cfg.score_form) + " Under the row sum every block of a row gets the same "
            "gradient, so gradient × metric differs between blocks of a row only through M itself.")
    c1, c2, c3 = st.columns(3)
    method = c1.radio("Method", ["gradient_x_metric", "gradient"], key="grad_method",
                      format_func=lambda m: {"gradient_x_metric": "gradient × metric", "gradient": "|gradient|"}[m])
    mode = c2.radio("Metric mode", ["full", "diagonal", "off_diagonal"], key="grad_mode", horizontal=True)
    T = len(inp.tokens)
    where = c3.selectbox("Query position", ["sum over positions", *range(T)], key="grad_pos") if cfg.causal \
        else "whole input"
    n_metric = cfg.n_layer if cfg.metric_sharing == "per_layer" else 1
    layer = c3.selectbox("Layer", list(range(n_metric)), format_func=lambda i: f"layer {i + 1}", key="grad_layer") \
        if n_metric > 1 else 0
    if inp.targets is None:
        st.warning("This input has no target (an uploaded image for a classifier): there is no loss to differentiate.")
        st.stop()

    def contribution_map(r, e):
        c = contributions_cached(r, e, inp, mode, method)
        vals = c.values[min(layer, c.values.shape[0] - 1)]  # (P, D, D)
        vals = vals.sum(0) if (where in ("sum over positions", "whole input") or vals.shape[0] == 1) else vals[where]
        return vals if method == "gradient_x_metric" else np.abs(vals)

    contrib = contribution_map(run, epoch)
    H = cfg.n_head
    left, right = st.columns([3, 2])
    with left:
        show(figures.metric_heatmap_figure(contrib, H, f"{'∂L/∂M × M' if method == 'gradient_x_metric' else '|∂L/∂M|'}, "
                                                        f"{where}, epoch {epoch}", colorbar_title="contribution"), "contribution")
    blocks = contrib.reshape(H, cfg.head_dim, H, cfg.head_dim).sum(axis=(1, 3))
    with right:
        show(figures.metric_heatmap_figure(blocks, H, "Summed per block (H × H)", colorbar_title="Σ"), "contribution_blocks")

    with st.expander("Across epochs (same colour range for every frame)"):
        maps = np.stack([contribution_map(run, e) for e in run.epochs])
        show(figures.epoch_animation_figure(maps, list(run.epochs), H, "heatmap", "Contribution"), "contribution_epochs")

    runs, _ = cached_runs(str(checkpoint_root()))
    partners = [r for r in runs if r.dataset == run.dataset and r.name != run.name and r.model_config.is_damcha]
    if partners:
        st.subheader("Side by side (paper figure 9: shared against unshared)")
        want = "per_layer" if cfg.metric_sharing == "shared" else "shared"
        default = next((i for i, r in enumerate(partners) if r.model_config.metric_sharing == want
                        and r.model_config.metric_input == cfg.metric_input), 0)
        other = st.selectbox("Other run", partners, index=default, format_func=lambda r: f"{r.name} ({r.variant})",
                             key="grad_other")
        other_epoch = other.epochs[-1] if epoch not in other.epochs else epoch
        theirs = contribution_map(other, other_epoch)
        show(figures.metric_panels_figure({f"{run.name} (epoch {epoch})": contrib,
                                                      f"{other.name} (epoch {other_epoch})": theirs}, H,
                                                     "Contribution of M(x) to the loss, one colour range"), "contribution_side_by_side")

st.subheader("Attribution to the input (Integrated Gradients)")
targets = ["loss"] + (["off_diagonal_energy", "block_norm", "head_metric_norm"]
                      if cfg.is_damcha and cfg.metric_input == "adaptive" else [])
names = {"loss": "the loss", "off_diagonal_energy": "off-diagonal energy of M(x)", "block_norm": "one block's norm ‖M_ij‖",
         "head_metric_norm": "one head's ‖m_i‖"}
a1, a2, a3 = st.columns(3)
target = a1.selectbox("Explain", targets, format_func=names.get, key="ig_target")
n_steps = a2.select_slider("IG steps", [8, 16, 32, 64], value=16, key="ig_steps")
options = {}
if target != "loss":
    T = len(inp.tokens)
    options["position"] = a3.slider("at query position", 0, T - 1, T - 1, key="ig_pos") if cfg.causal else 0
    if target == "block_norm":
        i = a3.number_input("row head i", 1, cfg.n_head, 1, key="ig_i") - 1
        j = a3.number_input("column head j", 1, cfg.n_head, 2, key="ig_j") - 1
        options["block"] = (int(i), int(j))
    if target == "head_metric_norm":
        options["head"] = int(a3.number_input("head i", 1, cfg.n_head, 1, key="ig_head")) - 1
if target == "loss" and inp.targets is None:
    st.warning("This input has no target: pick a scalar of M(x) instead.")
    st.stop()
baseline = 0 if inp.kind == "digit" else ord(" ")
attr = token_attributions_cached(run, epoch, inp, target, baseline, n_steps, **options)
st.caption(f"Baseline: every {'pixel blank (level 0)' if inp.kind == 'digit' else 'character a space'}. "
           f"F(input) = {attr.value:.4g}, F(baseline) = {attr.baseline_value:.4g}; the attributions add up to "
           f"{attr.values.sum():.4g} (captum's convergence delta {attr.delta:.2g}).")
if inp.kind == "digit":
    if inp.tokens[0] == DIGIT_START:  # decoder: token t is pixel t-1; the last pixel is never an input
        per_pixel = np.full(64, np.nan)
        per_pixel[:63] = attr.values[1:]
    else:
        per_pixel = attr.values
    show(figures.digit_attribution_figure(np.nan_to_num(per_pixel).reshape(8, 8), inp.levels,
                                                     f"Which pixels drive {names[target]}"), "pixel_attribution", width="content")
else:
    st.markdown(figures.highlighted_text_html(inp.token_labels(), attr.values), unsafe_allow_html=True)
    show(figures.token_attribution_figure(attr.values, inp.token_labels(), f"Which characters drive {names[target]}"), "token_attribution")
