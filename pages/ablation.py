"""Metric ablations (paper table 3): the full, diagonal-only and off-diagonal-only metric at inference."""

import numpy as np
import pandas as pd
import streamlit as st

from app.ui import (
    cached_runs,
    checkpoint_root,
    computed_on_request,
    each_run,
    input_picker,
    input_under_modes,
    provenance,
    selected_run,
    show,
    validation_ablation,
)
from damcha import figures
from damcha.figure_sets import patches_image
from damcha.inspection import identifiability_note
from damcha.modalities import loss_unit, printable

st.title("Metric ablations")
run, epoch = selected_run()
cfg = run.model_config
st.caption(f"Run **{run.name}** ({run.variant}), epoch **{epoch}**.")
ROW_SUM_NOTE = ("**Row-sum runs:** the diagonal-only metric is M_ii = m_i / H + its initialisation residue, and the "
                "off-diagonal-only metric is (H−1)/H · m_i minus that residue. Neither 'the diagonal' nor 'the "
                "off-diagonal' was learned as such, so a gap between them measures the random residue and the "
                "1 : (H−1) scaling, not what cross-head blocks learned.")
BILINEAR_NOTE = ("**Bilinear runs:** every block M_ij is trained for its own role (head i's queries against head j's "
                 "keys), so the diagonal/off-diagonal split is meaningful there.")


def has_metric_modes(r) -> bool:
    return "metric_mode" in r.model_config.mechanism.option_choices


if not has_metric_modes(run):
    st.info(f"{cfg.mechanism.title} has no metric to ablate; the table below compares the runs of this data set "
            "that have one.")
else:
    st.info(identifiability_note(cfg))
    st.markdown(ROW_SUM_NOTE if cfg.score_form == "row_sum" else BILINEAR_NOTE)

    st.subheader("This input under each metric mode")
    inp = input_picker(run)
    if inp is not None and computed_on_request(run, "Run this input under each metric mode (and continue it)",
                                               "modes_on"):
        outcomes = input_under_modes(run, epoch, inp)
        unit = loss_unit(cfg)
        rows = []
        for o in outcomes:
            vectors = bool(cfg.input_dim)  # a squared error, not a likelihood
            row = {"metric mode": o.mode, "squared error" if vectors else "loss (nats)": o.loss}
            if o.loss is not None and not vectors:
                row[f"bits/{unit}"] = o.loss / np.log(2)
            if o.predicted_class is not None:
                row["predicted class"] = o.predicted_class
                row["p(class)"] = o.class_probability
            rows.append(row)
        st.dataframe(pd.DataFrame(rows), hide_index=True)
        if any(o.completed is not None for o in outcomes):
            st.caption("Bottom half completed from the true top half (expected grey level over 16 samples).")
            cols = st.columns(len(outcomes) + 1)
            with cols[0]:
                show(figures.digit_figure(inp.levels, "truth"), "abl_truth", provenance("abl_truth", run, epoch, inp),
                     width="content")
            for c, o in zip(cols[1:], outcomes):
                with c:
                    show(figures.digit_figure(np.round(o.completed, 1), o.mode), f"abl_completion_{o.mode}",
                         provenance(f"abl_completion_{o.mode}", run, epoch, inp, {"mode": o.mode}), width="content")
        if any(o.completed_patches is not None for o in outcomes):
            st.caption("The bottom half completed from the true top half under each mode (free-running, as the "
                       "paper's generation task).")
            images = {"truth": patches_image(inp.targets), **{o.mode: patches_image(o.completed_patches) for o in outcomes}}
            show(figures.image_row_figure(images, "Completion under each metric mode"), "abl_completions",
                 provenance("abl_completions", run, epoch, inp))
        if any(o.continuation is not None for o in outcomes):
            st.caption("Most likely next bytes after the input, and a greedy continuation of 40 bytes.")
            for o in outcomes:
                st.markdown(f"**{o.mode}**: next " + ", ".join(f"`{printable(t)}` {p:.2f}" for t, p in o.next_bytes)
                            + f" — continues: `{o.continuation!r}`")

st.subheader("Validation set, every run on this data set")
runs, _ = cached_runs(str(checkpoint_root()))
evaluate_all = computed_on_request(run, "Evaluate every run of this data set under each mode", "table_on")
ablated = [r for r in runs if evaluate_all and r.dataset == run.dataset and has_metric_modes(r)]
table = [row for _, rows in each_run(ablated, lambda r: validation_ablation(r, r.epochs[-1])) for row in rows]
if table:
    df = pd.DataFrame(table)
    st.caption("Each run at its last snapshot, the same evaluation code as training uses: NLL in nats (completion "
               "MSE on 64 validation digits, 4 samples each); for image patches the next-patch MSE and the per-image "
               "MSE of bottom halves completed from the top half (mean, q25, q75: the paper's table 1).")
    st.dataframe(df, hide_index=True, width="stretch")
    st.download_button("Download CSV", df.to_csv(index=False).encode(), f"ablation-{run.dataset}.csv", "text/csv")
    st.markdown(ROW_SUM_NOTE + "\n\n" + BILINEAR_NOTE)
