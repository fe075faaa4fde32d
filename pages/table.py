"""Data table: every validation input of a run, sortable and filterable; a row opens in the Inspector."""

from pathlib import Path
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from app.cached_tables import input_previews, validation_table
from app.run_picker import run_page
from app.sharing import plain_text
from damcha.analysis.data_table import ROWS, default_rows
from damcha.inputs.datasets import bundled
from damcha.inputs.model_inputs import validation_count

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ()

run, epoch = run_page("Data table", "One row per validation input. Click a column to sort; a row's link (or "
                                    "selecting it) opens it in the Inspector.")
if not bundled(run.dataset):
    st.info(f"The validation inputs of {plain_text(run.dataset)} need its local files; the table is for the bundled data sets.")
    st.stop()
total = validation_count(run)
n = int(st.number_input(f"Validation inputs in the table (the first n of {total})", 1, min(ROWS, total),
                        default_rows(run), key="table_rows"))
table = validation_table(run, epoch, n)
df = pd.DataFrame(table["rows"])
if table["constant"]:
    st.caption("The same for every input, so not columns: " + "; ".join(
        f"{k} = {v:.4g}" for k, v in table["constant"].items()))

c1, c2, c3 = st.columns([1, 1, 2])
if "label" in df:
    labels = sorted(df["label"].unique().tolist())
    keep = c1.multiselect("Classes", labels, default=labels, key="table_labels")
    df = df[df["label"].isin(keep)]
if "right" in df and c2.toggle("Only wrong predictions", key="table_wrong"):
    df = df[~df["right"]]
numeric = [c for c in df.columns if c not in ("input", "label", "prediction", "right") and df[c].dtype.kind == "f"]
if numeric and len(df):
    column = c3.selectbox("Filter by", numeric, key="table_filter_column")
    low, high = float(df[column].min()), float(df[column].max())
    if high > low:
        chosen = c3.slider(column, low, high, (low, high), key=f"table_range_{column}", format="%.4f")
        df = df[df[column].between(*chosen)]
link = "inspector?" + urlencode({"dataset": run.dataset, "run": run.name, "epoch": epoch, "source": "Validation sample"}) + "&sample="
df.insert(1, "open", [link + str(i) for i in df["input"]])
preview_kind, previews = input_previews(run, n)
if preview_kind != "none":  # what each input is, beside its numbers
    df.insert(2, "preview", [previews[int(i)] for i in df["input"]])
st.caption(f"{len(df)} of {n} inputs shown.")
help_of = table["columns"]
config = {c: st.column_config.Column(c, help=help_of.get(c)) for c in df.columns if c in help_of}
config["open"] = st.column_config.LinkColumn("open", display_text="inspect", help="this input in the Inspector")
if preview_kind == "image":
    config["preview"] = st.column_config.ImageColumn("preview", help="what the model sees", width="small")
elif preview_kind == "text":
    config["preview"] = st.column_config.TextColumn("preview", help="the input's first characters (⏎: a line break)")
picked = st.dataframe(df, hide_index=True, column_config=config, on_select="rerun", selection_mode="single-row",
                      key="validation_table", width="stretch", height=480)
rows = picked.selection.rows if picked is not None else []
if rows:
    i = int(df.iloc[rows[0]]["input"])
    st.page_link(Path(__file__).parent / "inspector.py", label=f"Open validation input {i} in the Inspector",
                 icon=":material/search:", query_params={"dataset": run.dataset, "run": run.name, "epoch": epoch,
                                                         "source": "Validation sample", "sample": i})
