"""Interventions: change one thing in the forward pass and see what the model actually uses."""

import numpy as np
import pandas as pd
import streamlit as st

from app.cached_interventions import block_grid, intervened, metric_curves, validation_effects
from app.controls import computed_on_request, holds_validation_inputs, input_picker, over_validation_inputs
from app.named_figures import show_epoch_figure, show_model_figure
from app.run_picker import run_page
from app.sharing import plain_text
from app.url_state import bound
from damcha.analysis.heads import HEAD_KINDS, head_site_note
from damcha.analysis.inspection import residue_caveat, residue_learned
from damcha.analysis.interventions import ADAPTIVITY_GAP_READING, MEAN_INPUTS, alignment_note, available_interventions
from damcha.analysis.structure_patching import structure_site_note
from damcha.inputs.datasets import bundled
from damcha.inputs.model_inputs import validation_count, validation_input, validation_length
from damcha.views.display_units import (
    LossUnit,
    head_metric_ablation_sentence,
    output_change_text,
    output_word,
    residue_check_sentence,
)
from damcha.views.model_figures import intervention_views
from damcha.views.readings import one_snapshot_sentence

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("adaptivity_gap", "block_grid", "block_grid_validation", "head_ablation", "head_logit_attribution",
                  "input", "interpolation", "intervention", "off_diagonal", "structure_patching")

run, epoch = run_page("Interventions", "Each intervention is a forward option of an ordinary model call, computed "
                                       "exactly; the shared model is never changed.")
choices = available_interventions(run.model_config)
inp = input_picker(run)
# Another input or the mean over inputs come from the validation set, which the app holds for its bundled data sets.
validation_held = bundled(run.dataset)
if inp is None:
    st.stop()
unit = LossUnit.of(run.model_config)

st.subheader("Heads: ablation, patching and direct logit attribution (every mechanism)")
site_note = head_site_note(run.model_config)
if site_note:
    st.info(site_note)
elif inp.targets is None:
    st.info("This input has no target (an upload for a classifier): there is no loss to change.")
else:
    h1, h2 = st.columns([2, 3])
    kinds = [k for k in HEAD_KINDS if validation_held or k != "patch"]  # patching takes a validation input's value
    kind = h1.radio("Replace each head's output by", kinds, format_func=HEAD_KINDS.get, horizontal=True,
                    **bound("head_kind"))
    params = {"kind": kind}
    if kind == "patch":
        n = validation_count(run)
        params["other"] = int(h2.number_input(f"its value on validation input (0..{n - 1})", 0, n - 1, 1, key="head_other"))
        h2.caption(plain_text(validation_input(run, params["other"]).source))
    try:
        show_model_figure("head_ablation", run, epoch, inp, params)
    except ValueError as e:
        st.warning(f"Not computed: {e}")
    else:
        st.caption("One head at a time, in one layer, on this input: the loss with that head's output replaced, minus "
                   "the loss of the model as it is. A forward pre-hook on the projection the heads feed, alive for one "
                   "call only (TransformerLens's hook_z, at the same place).")
    try:
        show_model_figure("head_logit_attribution", run, epoch, inp)
    except ValueError as e:
        st.caption(f"No direct logit attribution: {e}.")
    else:
        st.caption("Each head's output through its columns of the output projection, the final LayerNorm at the frozen "
                   "scale of the whole residual, and the right answer's row of the head; the mean over positions with a "
                   "target. Direct effects only: what later layers make of a head is in the ablations above.")

st.subheader("Its own structure, patched from another input (every mechanism that computes one)")
structure_note = structure_site_note(run.model_config)
if structure_note:
    st.info(structure_note)
elif inp.targets is not None and holds_validation_inputs(run):
    n = validation_count(run)
    other = int(st.number_input(f"the structure of validation input (0..{n - 1})", 0, n - 1, 1, key="structure_other"))
    st.caption(plain_text(validation_input(run, other).source))
    try:
        show_model_figure("structure_patching", run, epoch, inp, {"other": other})
    except ValueError as e:
        st.warning(f"Not computed: {e}")
    else:
        st.caption("This input run with the structure its mechanism computed from the other input (DAMCHA's M(x), "
                   "DCMHA's composition weights, MoA's router logits), in one layer at a time and in all at once: the "
                   "loss minus the model's own. Forward hooks on the modules that compute it, alive for one call; "
                   "for DAMCHA this is the same number as its 'M(x′) of another input' intervention.")

if not choices:
    st.info(f"{run.model_config.mechanism.title} declares no intervention of its own.")
    st.stop()
st.subheader(f"{run.model_config.mechanism.title}'s own interventions")

if not validation_held:  # another validation input, or their mean, is what these take
    choices = [iv for iv in choices if not any(p.kind in ("input", "mean") for p in iv.params)]
    holds_validation_inputs(run)
by_name = {iv.name: iv for iv in choices}
name = st.selectbox("Intervention", list(by_name), format_func=lambda n: by_name[n].title, **bound("intervention"))
iv = by_name[name]
st.markdown(f"**{iv.title}.** {iv.description}")
params, other = {}, None
cols = st.columns(max(1, len(iv.params)))
for col, p in zip(cols, iv.params):
    if p.kind == "head":
        params[p.name] = int(col.number_input(f"head {p.name} (1..{int(p.high) + 1})", 1, int(p.high) + 1,
                                              int(p.default) + 1, key=f"iv_{p.name}")) - 1
    elif p.kind == "fraction":
        params[p.name] = float(col.slider(p.name, p.low, p.high, p.default, key=f"iv_{p.name}"))
    elif p.kind == "input":
        n = validation_count(run)
        params[p.name] = int(col.number_input(f"the other input: validation index (0..{n - 1})", 0, n - 1, 1,
                                              key="iv_other"))
        other = validation_input(run, params[p.name])
        col.caption(other.source)
    else:
        col.caption("M-bar: the mean of M(x) over 256 validation inputs at this epoch.")

try:
    before, after = intervened(run, epoch, inp, name, tuple(sorted(params.items())), other)
except ValueError as e:
    st.error(f"Cannot apply this intervention: {e}")
    st.stop()
shown = {"intervention": name, **params}
if run.model_config.causal:
    references = [len(other.tokens)] if other is not None else []
    references += [validation_length(run)] if any(p.kind == "mean" for p in iv.params) else []
    for note in filter(None, (alignment_note(P, len(inp.tokens)) for P in references)):
        st.info(note)
c1, c2, c3 = st.columns(3)
c1.metric(f"Loss without ({unit.label})", unit.text(before.loss))
c2.metric("Loss with the intervention", unit.text(after.loss), unit.text(after.loss - before.loss, signed=True),
          delta_color="inverse")
c3.metric(f"Largest change of a {output_word(run.model_config)}",
          output_change_text(float(np.abs(after.logits - before.logits).max()), float(np.abs(before.logits).max())))

left, right = st.columns(2)
for column, applied in ((left, "without"), (right, "with")):
    with column:
        st.markdown(f"**{'Without' if applied == 'without' else 'With the intervention'}**")
        for view in intervention_views(before):
            drawn = {**shown, "view": view, "applied": applied}
            show_model_figure("intervention", run, epoch, inp, drawn, (before, after), file_name=f"{view}_{applied}")

st.subheader("Over the validation set")
st.caption("Mean loss change over 128 validation inputs for each intervention that needs no second input "
           "(parameters at their defaults), with a 95% bootstrap interval.")
rows = validation_effects(run, epoch) if over_validation_inputs(run, "Compute over the validation set", "effects_on") else []
if rows:
    df = pd.DataFrame(rows)
    st.dataframe(df, hide_index=True, width="stretch")
    st.download_button("Download CSV", df.to_csv(index=False).encode(), f"interventions-{run.name}-e{epoch}.csv",
                       "text/csv", on_click="ignore")

if run.model_config.mechanism.metric(run.model_config) is not None:
    st.subheader("What the model uses of M(x)")
    if not computed_on_request(run, "Compute block grids, curves and the adaptivity gap", "uses_on"):
        st.stop()
    grid_cols = st.columns(2)
    keep = st.toggle("Keep only the block (instead of zeroing it)", value=False, key="iv_keep")
    what = "keeping only" if keep else "zeroing"
    with grid_cols[0]:
        show_model_figure("block_grid", run, epoch, inp, {"keep": keep}, block_grid(run, epoch, inp, keep),
                          file_name="block_grid_input")
    with grid_cols[1]:
        if holds_validation_inputs(run):
            show_model_figure("block_grid_validation", run, epoch, inp, {"keep": keep, "n": 64},
                              block_grid(run, epoch, None, keep, 64))
    curves = metric_curves(run, epoch, inp)
    if not residue_learned(after):
        st.caption(residue_caveat("in the block grids above and the scaling curves below (zeroing or scaling "
                                  "M_ij changes m_i by a block that is part learned, part residue)"))
    a, b = st.columns(2)
    with a:
        if holds_validation_inputs(run):
            show_model_figure("interpolation", run, epoch, inp, values=curves["interpolation"])
    with b:
        show_model_figure("off_diagonal", run, epoch, inp, values=curves["off_diagonal"])
    heads = curves["heads"]
    st.markdown(head_metric_ablation_sentence(heads, run.model_config))
    st.info(residue_check_sentence(curves["residue"], run.model_config))

    st.subheader("How much does the model rely on its per-input metric, and from which epoch?")
    st.caption("Adaptivity gap = loss with M-bar − loss with M(x), over 256 validation inputs, at every snapshot "
               "(mean and 95% bootstrap interval). " + ADAPTIVITY_GAP_READING)
    if one_snapshot_sentence(run.epochs):
        st.info(one_snapshot_sentence(run.epochs))
    elif holds_validation_inputs(run):
        show_epoch_figure("adaptivity_gap", run, None, {"inputs": MEAN_INPUTS})
