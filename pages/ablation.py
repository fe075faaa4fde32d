"""Metric ablations (paper table 3): the full, diagonal-only and off-diagonal-only metric at inference."""

import numpy as np
import pandas as pd
import streamlit as st

from app.ui import (
    cached_runs,
    checkpoint_root,
    input_picker,
    inspect_cached,
    model_for,
    selected_run,
    set_export_context,
    show,
    validation_ablation_cached,
)
from damcha import figures
from damcha.ablation import MODES, completed_digit, greedy_continuation
from damcha.inspection import identifiability_note, next_token_probabilities
from damcha.samples import printable

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
if cfg.is_damcha:
    st.info(identifiability_note(cfg.score_form))
    st.markdown(ROW_SUM_NOTE if cfg.score_form == "row_sum" else BILINEAR_NOTE)

st.subheader("This input under each metric mode")
inp = input_picker(run, key="abl")
if inp is not None and cfg.is_damcha:
    set_export_context(run, epoch, inp)
    model = model_for(run, epoch)
    records = {m: inspect_cached(run, epoch, inp, m) for m in MODES}
    unit = "pixel" if inp.kind == "digit" else ("image" if cfg.n_classes else "char")
    rows = []
    for m, r in records.items():
        row = {"metric mode": m, "loss (nats)": r.loss}
        if r.loss is not None:
            row[f"bits/{unit}"] = r.loss / np.log(2)
        if cfg.n_classes:
            probs = next_token_probabilities(r, 0)
            row["predicted class"] = int(probs.argmax())
            row["p(class)"] = float(probs.max())
        rows.append(row)
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    if inp.kind == "digit" and not cfg.n_classes:
        st.caption("Bottom half completed from the true top half (expected grey level over 16 samples).")
        cols = st.columns(len(MODES) + 1)
        with cols[0]:
            show(figures.digit_figure(inp.levels, "truth"), "abl_truth", width="content")
        for c, m in zip(cols[1:], MODES):
            img = completed_digit(model, inp.tokens, inp.targets, m)
            with c:
                show(figures.digit_figure(np.round(img, 1), m), f"abl_completion_{m}", width="content")
    elif inp.kind == "text":
        st.caption("Most likely next bytes after the input, and a greedy continuation of 40 bytes.")
        for m, r in records.items():
            probs = next_token_probabilities(r, len(inp.tokens) - 1)
            top = np.argsort(probs)[::-1][:5]
            cont = greedy_continuation(model, inp.tokens, 40, m).decode("utf-8", "replace")
            st.markdown(f"**{m}**: next " + ", ".join(f"`{printable(t)}` {probs[t]:.2f}" for t in top)
                        + f" — continues: `{cont!r}`")
elif inp is not None:
    st.caption("Standard multi-head attention has no metric to ablate.")

st.subheader("Validation set, every run on this data set")
runs, _ = cached_runs(str(checkpoint_root()))
table = []
for r in runs:
    if r.dataset != run.dataset or not r.model_config.is_damcha:
        continue
    table.extend(validation_ablation_cached(r, r.epochs[-1]))
if table:
    df = pd.DataFrame(table)
    st.caption("Each run at its last snapshot; NLL in nats, the same evaluation code as training uses "
               "(completion MSE on 64 validation images, 4 samples each).")
    st.dataframe(df, hide_index=True, width="stretch")
    st.download_button("Download CSV", df.to_csv(index=False).encode(), f"ablation-{run.dataset}.csv", "text/csv")
    st.markdown(ROW_SUM_NOTE + "\n\n" + BILINEAR_NOTE)
