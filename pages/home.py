"""Home: what the app is, the runs in the checkpoint folder with their model cards."""

import pandas as pd
import streamlit as st

from app.named_figures import show_epoch_figure
from app.run_picker import each_run, listing
from app.sharing import plain_text, shown_path, skipped_line
from damcha.inputs.modalities import modality_named
from damcha.views.display_units import final_validation_loss, test_loss

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("training_curves",)

st.title("DAMCHA Lab")
st.markdown(
    "**Data-adaptive Mahalanobis cross-head attention**, seen from the inside. DAMCHA replaces "
    "the Q/K projections of attention with a metric M(x) that a small network computes from the "
    "input; each head i scores tokens with m_i = Σ_j M_ij. Pick a run and an epoch in the sidebar, "
    "then open the **Inspector** to see the metric an image or a text induces. Beside DAMCHA, the "
    "baselines it is compared with are inspectable the same way."
)
st.info(
    "Under the paper's row sum only the per-head metrics m_i are learned: the split of M(x) into "
    "diagonal and off-diagonal blocks comes from a random read-out whose weights never move from "
    "their initial values. Every view of M(x) in this app shows the learned part and that residue separately."
)

opened = listing()  # only what the sidebar opened through the fence: never a folder it refused
if opened.root is None:
    st.info("No checkpoint folder is open: the sidebar says why.")
    st.stop()
runs, bad, root = opened.runs, opened.skipped, opened.root


def _data_line(run) -> str:
    d = run.data
    if "split" in d:  # a data set that states its split (the benchmarks' standard splits)
        standard = {True: "standard files: yes", False: "standard files: no"}.get(d.get("standard_files"), "")
        return f"{plain_text(run.dataset)}: {plain_text(str(d['split']))}" + (f"; {standard}" if standard else "")
    if "bytes" in d:  # a byte corpus
        return f"{plain_text(run.dataset)}: {d['bytes']:,} bytes, the last {d['val_fraction']:.0%} for validation"
    return f"{plain_text(run.dataset)}: {d.get('n_train', '?')} train / {d.get('n_val', '?')} validation"


TEST_COLUMN = "test loss (once, after training)"


def _row(r) -> dict:
    last = r.metrics[-1] if r.metrics else {}
    return {  # what a reader compares first (the run, its loss, its size), then where it comes from
        "run": r.name, "variant": r.variant, "final val loss": final_validation_loss(r),
        TEST_COLUMN: test_loss(r),
        "val accuracy": last.get("val_accuracy"), "completion MSE": last.get("val_completion_mse"),
        "parameters": r.model_config.parameter_estimate(), "data set": r.dataset,
        "mechanism": r.model_config.mechanism.title,
        "layers×heads×width": f"{r.model_config.n_layer}×{r.model_config.n_head}×{r.model_config.n_embd}",
        "snapshots": ", ".join(map(str, r.epochs)),
        "unreadable snapshots": ", ".join(str(e) for e, _ in r.bad_snapshots),
    }


rows = [row for _, row in each_run(runs, _row)]
if not any(r.test for r in runs):  # no run has a test split: no column of dashes
    rows = [{k: v for k, v in row.items() if k != TEST_COLUMN} for row in rows]
st.subheader(f"Runs in {plain_text(shown_path(root, root))}")
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
for path, why in bad:
    st.warning(skipped_line(path, why, root))

sel = st.session_state.get("selection", (None, None))
run, epoch = sel
if run is not None:
    st.subheader(f"Model card: {plain_text(run.name)}")
    c = run.model_config
    left, right = st.columns([1, 2])
    with left:
        st.markdown(
            f"- **variant** `{run.variant}` ({'causal decoder' if c.causal else 'non-causal classifier'})\n"
            f"- **attention** {c.mechanism.title} ({c.mechanism.reference})"
            + "".join(f"; {k} {v}" for k, v in c.mechanism.settings(c).items()) + "\n"
            f"- **data** {_data_line(run)}; tokens are {modality_named(c.modality).title}\n"
            f"- **sizes** {c.n_layer} layers, {c.n_head} heads, width {c.n_embd}\n"
            f"- **parameters** {c.parameter_estimate():,}\n"
            + (f"- **test** {test_loss(run)}, evaluated once after training\n" if run.test else "") +
            f"- **training** {run.train_config.get('epochs')} epochs, {run.train_config.get('optimizer')}, lr {run.train_config.get('lr')}\n"
            f"- **snapshots** {list(run.epochs)}"
        )
    with right:
        log_y = st.toggle("Logarithmic loss axis", value=False, key="home_log_loss",
                          help="The first epochs' loss can flatten the rest of the curve (image runs).")
        show_epoch_figure("training_curves", run, None, {"log_y": log_y})
st.markdown("**Where to start:** open the *Inspector*, keep the validation sample or upload your own "
            "image or text, and move the query position and the metric mode.")
