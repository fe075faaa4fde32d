"""Metric inspector: the metric M(x) one input induces, and what the model does with it."""

import numpy as np
import streamlit as st

from app.ui import input_picker, inspect_cached, selected_run, set_export_context, show
from damcha import figures
from damcha.figure_sets import build_figure
from damcha.inspection import identifiability_note, next_token_probabilities
from damcha.samples import printable

st.title("Metric inspector")
run, epoch = selected_run()
cfg = run.model_config
st.caption(f"Run **{run.name}** ({run.variant}), epoch **{epoch}** of {run.epochs[-1]}.")

left, right = st.columns([1, 1])
with left:
    inp = input_picker(run)
if inp is None:
    st.stop()

with right:
    st.markdown(f"**Input:** {inp.source}. {inp.note}")
    if inp.kind == "digit":
        show(figures.digit_figure(inp.levels), "input", width="content")
    else:
        st.markdown("**The bytes the model reads** (⏎ newline, ␣ space):")
        st.code(inp.text, language=None, wrap_lines=True)

if not cfg.is_damcha:
    mode = "full"
else:
    c1, c2, c3, c4 = st.columns(4)
    mode = c1.radio("Metric mode", ["full", "diagonal", "off_diagonal"], horizontal=False, key="metric_mode",
                    help="Inference-time row sum: full m_i = Σ_j M_ij, diagonal-only M_ii, off-diagonal-only Σ_{j≠i} M_ij.")
    shared_scale = c4.toggle("One colour scale for all panels", value=True, key="shared_scale")

with st.status("Running the model on this input…", expanded=False) as status:
    record = inspect_cached(run, epoch, inp, mode)
    status.update(label="Model run on this input", state="complete")

T = len(record.tokens)
labels = inp.token_labels()
if record.loss is not None:
    unit = "pixel" if inp.kind == "digit" else "char"
    extra = f" = {record.loss / np.log(2):.3f} bits/{unit}" if cfg.causal else ""
    st.metric("Loss on this input (nats)", f"{record.loss:.4f}", help=f"mean over known targets{extra}")

if cfg.is_damcha:
    if cfg.causal:
        pos = c2.slider("Query position", 0, T - 1, T - 1, key="position",
                        help="A causal model has one metric per query position: M(c_t), c_t = mean of tokens 1..t.")
        c2.caption(f"position {pos}: `{labels[pos]}`")
    else:
        pos = 0
        c2.caption("Non-causal: one metric for the whole input.")
    n_metric = record.metric.shape[0]
    layer = c3.selectbox("Layer", list(range(n_metric)), key="layer",
                         format_func=lambda i: f"layer {i + 1}") if n_metric > 1 else 0
    if n_metric == 1:
        c3.caption("Shared metric: one M(x) for every layer." if cfg.metric_sharing == "shared" else "")
    p_idx = pos if cfg.causal else 0
    M = record.metric[layer, p_idx]
    learned = record.metric_learned[layer, p_idx]
    residue = record.metric_residue[layer, p_idx]
    H = cfg.n_head
    params = {"layer": layer, "position": p_idx, "shared_scale": shared_scale}
    set_export_context(run, epoch, inp, mode=mode)
    st.info(identifiability_note(record.score_form))

    def named(name, **extra):
        """A named figure (regenerable from its provenance by `damcha figures`), shown with export buttons."""
        p = {**params, **extra}
        show(build_figure(name, record, H, p, epoch), name + "".join(f"_{v}" for v in extra.values()), name, p)

    tabs = st.tabs(["M(x)", "Learned vs residue", "Block norms", "Per-head m_i", "Contour & 3D", "Attention",
                    "Loss & prediction"])
    with tabs[0]:
        st.caption("The full D×D metric at this input, with the H×H head blocks outlined. Row block i is head i's "
                   "query side. Colour centred at 0.")
        named("metric")
    with tabs[1]:
        st.caption("M = learned + residue. Learned: each block replaced by its row mean m_i/H (what the row sum "
                   "can see). Residue: what is left, zero mean along each block row.")
        named("decomposition")
        energy = (M**2).sum()
        st.markdown(f"Residue share of ‖M‖²: **{(residue**2).sum() / energy:.1%}**; learned share "
                    f"**{(learned**2).sum() / energy:.1%}** (the two are orthogonal, so they add to 100%).")
    with tabs[2]:
        st.caption("Frobenius norm of each block M_ij: how strongly head i's rows read head j's columns.")
        named("block_norms")
    with tabs[3]:
        st.caption(f"What each head actually scores with under the '{mode}' metric mode.")
        named("head_metrics")
    with tabs[4]:
        target = st.radio("Matrix", ["M(x)", "learned part", "residue"], horizontal=True, key="surface_target")
        a, b = st.columns(2)
        with a:
            named("contour", part=target)
        with b:
            named("surface", part=target)
else:
    set_export_context(run, epoch, inp)
    params = {}

attn_container = tabs[5] if cfg.is_damcha else st.container()
with attn_container:
    st.caption("Attention probabilities per head (rows: queries, columns: keys).")
    n_layers = record.attention.shape[0]
    a_layer = st.selectbox("Attention layer", list(range(n_layers)), format_func=lambda i: f"layer {i + 1}",
                           key="attn_layer")
    show(build_figure("attention", record, cfg.n_head, {**params, "attn_layer": a_layer}, epoch), "attention",
         "attention", {**params, "attn_layer": a_layer})

pred_container = tabs[6] if cfg.is_damcha else st.container()
with pred_container:
    if cfg.n_classes:
        show(build_figure("prediction", record, cfg.n_head, params, epoch), "prediction", "prediction", params)
    else:
        if record.token_loss is not None:
            ok = ~np.isnan(record.token_loss)
            show(figures.token_loss_figure(np.where(ok, record.token_loss, 0), inp.target_labels(),
                                           "Loss per position (bits)"), "token_loss")
        if inp.kind == "digit":
            st.caption("Teacher-forced prediction: the expected grey level of each pixel given the true pixels before it.")
            show(build_figure("prediction", record, cfg.n_head, params, epoch), "prediction", "prediction", params,
                 width="content")
        else:
            p = st.slider("Next-character distribution after position", 0, T - 1, T - 1, key="next_pos")
            probs = next_token_probabilities(record, p)
            top = np.argsort(probs)[::-1][:10]
            show(figures.probabilities_figure([printable(t) for t in top], probs[top],
                                              f"Most likely next bytes after position {p}"), "next_bytes")
