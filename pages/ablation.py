"""Metric ablations (paper table 3): the full, diagonal-only, off-diagonal-only and H-scaled diagonal metric at inference."""

import functools
from pathlib import Path

import pandas as pd
import streamlit as st

from app.cache import model_figure_values
from app.cached_interventions import ablation_cached, ablation_table
from app.controls import computed_on_request, input_picker
from app.named_figures import show_model_figure
from app.run_picker import listing, run_page
from app.sharing import plain_text
from damcha.analysis.ablation import has_ablation_modes, long_form, mode_title, modes_by_run
from damcha.analysis.heads import head_site_note
from damcha.analysis.inspection import identifiability_note
from damcha.analysis.interventions import available_interventions
from damcha.inputs.modalities import task_of
from damcha.runs.evaluation import completes_tokens
from damcha.views.display_units import mode_outcome_rows

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("completion_by_mode",)

run, epoch = run_page("Metric ablations")
cfg = run.model_config

if not has_ablation_modes(cfg):
    offered = available_interventions(cfg)
    heads = head_site_note(cfg) is None  # every head's output can be ablated, patched and attributed
    st.info(f"{cfg.mechanism.title} has no metric modes to ablate: this page is about DAMCHA-style metrics. "
            + (f"What its mechanism declares instead: {len(offered)} intervention(s) — "
               + "; ".join(iv.title for iv in offered) + " — on the Interventions page. "
               if offered else "Its mechanism declares no intervention of its own. ")
            + ("The Interventions page also zero-ablates, mean-ablates and patches each head's output and attributes "
               "the logit to each head, as for every mechanism whose heads meet at a projection. " if heads else "")
            + "The table below compares the runs of this data set that have metric modes.")
    if offered or heads:
        st.page_link(str(Path(__file__).resolve().parent / "interventions.py"), label="Interventions on this run", icon=":material/science:")
else:
    st.info(identifiability_note(cfg))
    st.markdown(cfg.mechanism.inference_ablation.note(cfg))

    st.subheader("This input under each metric mode")
    inp = input_picker(run)
    if inp is not None and computed_on_request(run, "Run this input under each metric mode (and continue it)",
                                               "modes_on"):
        values = model_figure_values(run, epoch, inp, "completion_by_mode")
        outcomes = values["outcomes"]
        st.dataframe(pd.DataFrame(mode_outcome_rows(outcomes, cfg)), hide_index=True)
        if any(o.completed is not None or o.completed_patches is not None for o in outcomes):
            st.caption("Bottom halves completed from the true top half: image patches free-running, as the paper's "
                       "generation task; digit pixels as the expected grey level over 16 samples.")
            show_model_figure("completion_by_mode", run, epoch, inp, values=values)
        if any(o.continuation is not None for o in outcomes):
            st.caption("Most likely next bytes after the input, and a greedy continuation of 40 bytes.")
            for o in outcomes:
                st.markdown(f"**{o.title}**: next " + ", ".join(f"`{inp.modality.token_text(t)}` {p:.2f}" for t, p in o.next_bytes)
                            + f" — continues: `{o.continuation!r}`")

st.subheader("Validation set, every run on this data set")
runs = listing().runs
ablated = [r for r in runs if r.dataset == run.dataset and has_ablation_modes(r.model_config)]
ready = sum(ablation_cached(r) for r in ablated)
st.caption(f"{len(ablated)} runs of {plain_text(run.dataset)} have metric modes; {ready} of them are evaluated already (shipped "
           "with the run or kept on disk, keyed by the snapshot's content). Each other run takes one pass over the "
           "validation set per mode.")
table = []
if ablated and (ready == len(ablated) or st.toggle("Evaluate every run of this data set under each mode",
                                                   value=False, key="table_on")):
    table = ablation_table(ablated)
if table:
    df = pd.DataFrame(long_form(table))
    completes = completes_tokens(cfg.modality, task_of(cfg))
    st.caption("Each run at its last snapshot, the same evaluation code as training uses: NLL in nats and in bits"
               + (" and the completion MSE of bottom halves on 64 validation images, 4 samples each" if completes else "")
               + ("; for image patches the next-patch MSE and the per-image MSE of bottom halves completed from the top "
                  "half (mean, q25, q75: the paper's table 1)" if cfg.input_dim else "") + ".")
    metric = next((m for m in (f"bits_per_{run.data.get('unit', 'token')}", "mse") if m in df), None)
    titled = functools.partial(mode_title, ablated[0].model_config)  # (every run here declares the same modes)
    if metric:
        inputs = next((r["inputs"] for r in table if "inputs" in r), None)
        st.markdown(f"**Runs × metric modes** ({metric.replace('_', ' ')}; Δ: change from the full metric, > 0 worse"
                    + (f"; its 95% interval is a Student-t interval over the {inputs} validation inputs, paired by "
                       "input — it says how surely this snapshot's Δ differs from 0, not how a retrained run would "
                       "differ" if inputs else "") + "), the shape of the paper's table 3:")
        st.dataframe(pd.DataFrame(modes_by_run(table, metric, titled)), hide_index=True, width="stretch")
    with st.expander("Every run × mode and every measure (long form, as in the CSV)", expanded=not metric):
        st.dataframe(df.assign(mode=df["mode"].map(titled)) if "mode" in df else df,
                     hide_index=True, width="stretch")  # (the CSV keeps the modes' names, as the CLI takes them)
    st.download_button("Download CSV", df.to_csv(index=False).encode(), f"ablation-{run.dataset}.csv", "text/csv", on_click="ignore")
    shown = {cfg.mechanism.inference_ablation.note(cfg)} if has_ablation_modes(cfg) else set()
    notes = dict.fromkeys(r.model_config.mechanism.inference_ablation.note(r.model_config) for r in ablated)
    unshown = [note for note in notes if note not in shown]
    if unshown:
        st.markdown("\n\n".join(unshown))
