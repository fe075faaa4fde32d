"""Gradient contributions: which entries of M(x) drive the loss, and which input tokens drive a scalar of the model."""

import streamlit as st

from app.cache import inspection, model_figure_values
from app.controls import bounded_slider, computed_on_request, input_picker, option_choices
from app.named_figures import show_epoch_figure, show_model_figure, show_run_set_figure
from app.run_picker import each_run, listing, run_page
from app.url_state import bound
from damcha.analysis.attribution import TARGET_NAMES, attribution_targets, baseline_description
from damcha.analysis.inspection import identifiability_note, residue_caveat, residue_learned
from damcha.views import figures
from damcha.views.display_units import attribution_sentence
from damcha.views.epoch_figures import frozen
from damcha.views.readings import one_snapshot_sentence

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("contribution_blocks", "contribution_epochs", "contribution_side_by_side", "input_attribution",
                  "metric_contribution")

run, epoch = run_page("Gradient contributions", "Computed with captum on a private copy of the model; the shared "
                                                  "model is never hooked.")
cfg = run.model_config
inp = input_picker(run)
if inp is None:
    st.stop()
record = inspection(run, epoch, inp, None)

if cfg.mechanism.metric(cfg) is None:
    st.info(f"{cfg.mechanism.title} has no metric M(x): the contribution maps of M(x) are for DAMCHA runs. "
            "The attribution to the input below works for every mechanism.")
else:
    st.subheader("Contribution of each entry of M(x) to the loss")
    st.info(identifiability_note(cfg) + " Under the row sum every block of a row gets the same "
            "gradient, so gradient × metric differs between blocks of a row only through M itself.")
    if computed_on_request(run, "Compute the contributions of M(x) (a backward pass per snapshot)", "contrib_on"):
        c1, c2, c3 = st.columns(3)
        method = c1.radio("Method", ["gradient_x_metric", "gradient"], **bound("method"),
                          format_func=lambda m: {"gradient_x_metric": "gradient × metric", "gradient": "|gradient|"}[m])
        choices = option_choices(run, c2, horizontal=True)
        T = len(inp.tokens)
        where = c3.selectbox("Query position", ["sum over positions", *range(T)], key="grad_position") if record.causal \
            else "whole input"
        layer = c3.selectbox("Layer", list(range(1, record.structure_layers + 1)), **bound("layer")) - 1 \
            if record.structure_layers > 1 else 0
        if inp.targets is None:
            st.warning("This input has no target (an uploaded image for a classifier): there is no loss to differentiate.")
            st.stop()
        params = {"method": method, "options": choices, "position": where, "layer": layer}
        values = model_figure_values(run, epoch, inp, "metric_contribution", frozen(params))
        left, right = st.columns([3, 2])
        for column, name in ((left, "metric_contribution"), (right, "contribution_blocks")):  # one values function
            with column:
                show_model_figure(name, run, epoch, inp, params, values)
        if not residue_learned(record):
            st.caption(residue_caveat("in these maps and block sums"))

        with st.expander("Across epochs (same colour range for every frame)"):
            if one_snapshot_sentence(run.epochs):
                st.info(one_snapshot_sentence(run.epochs))
            else:
                show_epoch_figure("contribution_epochs", run, inp, params)

        runs = listing().runs
        siblings = [r for r in runs if r.dataset == run.dataset and r.name != run.name]
        partners = [r for r, rec in each_run(siblings, lambda r: inspection(r, r.epochs[-1], inp, None))
                    if r.model_config.mechanism.metric(r.model_config) is not None]
        if partners:
            st.subheader("Side by side with another run")
            ours = cfg.mechanism.settings(cfg)

            def differences(r) -> dict:
                theirs = r.model_config.mechanism.settings(r.model_config)
                return {k: (ours.get(k), theirs.get(k)) for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)}

            # Paper figure 9 compares shared with unshared: the partner that differs in the sharing alone, if any.
            default = next((i for i, r in enumerate(partners) if list(differences(r)) == ["sharing"]), 0)
            other = st.selectbox("Other run", partners, index=default, format_func=lambda r: f"{r.name} ({r.variant})",
                                 key="grad_other")
            diff = differences(other)
            st.caption(("Paper figure 9: shared against unshared. " if list(diff) == ["sharing"] else "")
                       + ("The two runs differ in " + "; ".join(f"{k}: {a} here, {b} there" for k, (a, b) in diff.items())
                          if diff else "The two runs have the same settings") + ".")
            other_epoch = other.epochs[-1] if epoch not in other.epochs else epoch
            taken = [(r, e, model_figure_values(r, e, inp, "metric_contribution", frozen(params))["map"])
                     for r, e in ((run, epoch), (other, other_epoch))]
            show_run_set_figure("contribution_side_by_side", taken, inp, params)


st.subheader("Attribution to the input (Integrated Gradients)")
if computed_on_request(run, "Compute Integrated Gradients (a forward and backward pass per step)", "ig_on"):
    a1, a2, a3 = st.columns(3)
    target = a1.selectbox("Explain", attribution_targets(cfg), format_func=TARGET_NAMES.get, **bound("ig_target"))
    n_steps = a2.select_slider("IG steps", [8, 16, 32, 64], value=16, key="ig_steps")
    options = {}
    if target != "loss":
        T = len(inp.tokens)
        options["position"] = bounded_slider(a3, "at query position", T - 1, "ig_position", bind=None) if record.causal else 0
        if target == "block_norm":
            i = a3.number_input("row head i", 1, record.n_head, 1, key="ig_i") - 1
            j = a3.number_input("column head j", 1, record.n_head, 2, key="ig_j") - 1
            options["block"] = (int(i), int(j))
        if target == "head_metric_norm":
            options["head"] = int(a3.number_input("head i", 1, record.n_head, 1, key="ig_head")) - 1
    if target == "loss" and inp.targets is None:
        st.warning("This input has no target: pick a scalar of M(x) instead.")
        st.stop()
    ig_params = {"target": target, "n_steps": n_steps, **options}
    values = model_figure_values(run, epoch, inp, "input_attribution", frozen(ig_params))
    st.caption(f"Baseline: {baseline_description(cfg)}. " + attribution_sentence(values["attribution"], target, cfg))
    if not record.modality.grid:
        st.markdown(figures.highlighted_text_html(inp.token_labels(), values["attribution"].values), unsafe_allow_html=True)
    show_model_figure("input_attribution", run, epoch, inp, ig_params, values,
                      width="content" if record.modality.grid else "stretch")
