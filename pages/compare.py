"""Compare mechanisms: one input through every run of a data set, each at its chosen epoch, side by side."""

import streamlit as st

from app.cache import input_familiarity, inspection, model_for, validation_losses
from app.controls import bounded_slider, input_picker, over_validation_inputs
from app.named_figures import not_placed, show_run_set_figure, shown_input
from app.run_picker import each_run, listing, selected_run
from app.sharing import plain_text
from app.url_state import bound
from damcha.analysis.comparison import comparison_table, why_input_does_not_fit
from damcha.inputs.uploads import InputError
from damcha.views.comparison import PANELS, compared_run, head_grid_caption, metric_parts
from damcha.views.run_set_figures import RUN_SET_FIGURES, taken_from

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("comparison", "comparison_panel", "losses_against")

st.title("Compare mechanisms")
run, epoch = selected_run()
runs = listing().runs
siblings = [r for r in runs if r.dataset == run.dataset]
st.caption(f"One input through the runs of data set **{plain_text(run.dataset)}**: each run's main cross-head structure (the "
           "first its mechanism declares), the attention of one layer and head, and the loss at each position.")

inp = input_picker(run)
if inp is None:
    st.stop()
names = [r.name for r in siblings]
chosen = st.multiselect("Runs", names, default=names, **bound("compare_runs"))  # a link reopens the same runs
if not chosen:
    st.info("Pick at least one run.")
    st.stop()
by_name = {r.name: r for r in siblings}
with st.expander("Epoch of each run (default: its last snapshot; the sidebar's run at the sidebar's epoch)"):
    epochs = {n: st.select_slider(n, options=list(by_name[n].epochs), key=f"compare_epoch_{n}",
                                  value=epoch if n == run.name else by_name[n].epochs[-1]) for n in chosen}

readable, unfit = [], []
for n in chosen:
    why = why_input_does_not_fit(by_name[n], inp.modality.name, inp.tokens)
    if why:
        unfit.append(f"{n} ({why})")
    else:
        readable.append(by_name[n])
if unfit:
    st.warning("Cannot read this input: " + "; ".join(unfit))
bar = st.progress(0.0, text="Running each run on this input…")


def record_of(r):
    k = readable.index(r) + 1
    bar.progress(k / len(readable), text=f"{r.name} ({k}/{len(readable)})")
    return inspection(r, epochs[r.name], inp, None)


results = each_run(readable, record_of)
bar.empty()
if not results:
    st.stop()

c1, c2, c3 = st.columns(3)
n_layer = max(rec.n_layer for _, rec in results)
n_head = max(rec.n_head for _, rec in results)
layer = c1.selectbox("Layer", list(range(n_layer)), format_func=lambda i: f"layer {i + 1}", key="compare_layer")
head = c2.selectbox("Head", list(range(n_head)), format_func=lambda i: f"head {i + 1}", key="compare_head")
T = len(inp.tokens)
causal = any(rec.causal for _, rec in results)
position = bounded_slider(c3, "Query position (per-position structures)", T - 1, "compare_position",
                          bind=None) if causal else -1
parts = metric_parts([rec for _, rec in results])
part = st.radio("M(x) panels show", list(parts), format_func=parts.get, horizontal=True, **bound("compare_part"),
                help="Under the row sum only the learned part is trained; the residue is what initialisation left.") \
    if len(parts) > 1 else None
with st.expander("Structure drawn for each run (default: its main one)"):
    structure = {r.name: st.selectbox(plain_text(r.name), names_of, key=f"compare_structure_{r.name}_{part}",
                                      index=names_of.index(part) if part in names_of else 0,
                                      format_func=lambda s, rec=rec: rec.structure(s).title)
                 for r, rec in results if (names_of := [s.name for s in rec.structures])}

results = [(r, inspection(r, epochs[r.name], inp, None, tuple(rec.positions.tolist()), (layer,)))
           if layer < rec.n_layer and layer not in rec.attention_layers else (r, rec)
           for r, rec in results]  # a layer beyond the inspection budget, fetched on demand

st.subheader("The input and the losses")
with st.columns([2, 3])[0]:  # the picture at a readable size; the table below it, the page's whole width
    shown_input(results[0][0], epochs[results[0][0].name], results[0][1], inp)
st.dataframe(comparison_table([(r, epochs[r.name], rec) for r, rec in results]), hide_index=True, width="stretch")
if inp.validation_index is None and results[0][1].modality.grid:  # how far the upload is, as the Inspector says
    try:
        near = input_familiarity(results[0][0], inp)
    except (InputError, ValueError) as e:
        st.caption(f"Not compared with the validation inputs: {e}")
    else:
        (st.warning if near.unfamiliar else st.caption)(near.sentence())
compared = [compared_run(rec, f"{r.name} @{epochs[r.name]}", layer, head, position, structure.get(r.name))
            for r, rec in results if rec.structures]
drawn_here = head_grid_caption([(plain_text(r.name), rec, structure.get(r.name)) for r, rec in results])
if drawn_here:
    st.caption(drawn_here)
if len(compared) < len(results):
    st.caption("Without cross-head structures, not drawn: " + ", ".join(r.name for r, rec in results if not rec.structures))
params = {"layer": layer, "head": head, "position": position, "structures": structure}
taken = [(r, epochs[r.name], rec) for r, rec in results]
st.subheader("Side by side")
show_run_set_figure("comparison", taken, inp, params)

st.subheader("One panel on its own")
a, b = st.columns(2)
pick = a.selectbox("Run", list(range(len(compared))), format_func=lambda i: compared[i].label, key="compare_panel_run")
panel = b.selectbox("Panel", [p for p in PANELS if p != "attention" or compared[pick].attention is not None],
                    key="compare_panel")
show_run_set_figure("comparison_panel", taken, inp, {**params, "panel": panel, "panel_run": compared[pick].label},
                    f"comparison_{panel}")

st.subheader("Per-input loss, one run against another")
st.caption("Every validation input's loss under two runs: where one mechanism wins, input by input, and by how much "
           "(LIT's per-example comparison).")
if len(results) > 1:
    a, b = st.columns(2)
    first = a.selectbox("Across", [r for r, _ in results], format_func=lambda r: r.name, key="compare_scatter_a")
    second = b.selectbox("Up", [r for r, _ in results if r.name != first.name], format_func=lambda r: r.name,
                         key="compare_scatter_b")
    if over_validation_inputs(first, "Compute the loss of 256 validation inputs under both runs", "compare_scatter_on"):
        losses = [(r, epochs[r.name], validation_losses(r, epochs[r.name], 256)) for r in (first, second)]
        show_run_set_figure("losses_against", losses, inp, {"inputs": 256})
else:
    st.caption("Pick two runs or more.")

more = not_placed(RUN_SET_FIGURES)
if more:
    st.subheader("More figures of these runs")
    st.caption(f"Every other named figure of several runs ({'; '.join(RUN_SET_FIGURES[n].title for n in more)}), as "
               "its table declares it, of the runs above at their epochs.")
    if st.toggle("Draw them (each inspects every run again, some at several snapshots)", value=False,
                 key="compare_more_on"):
        runs, taken_by = [r for r, _ in results], {}  # figures that take the same from each run take it once
        for more_name in more:
            try:
                per_run = RUN_SET_FIGURES[more_name].per_run
                if per_run not in taken_by:
                    taken_by[per_run] = taken_from(more_name, runs, [epochs[r.name] for r in runs], inp.tokens,
                                                   inp.targets, params, load=model_for)
                show_run_set_figure(more_name, taken_by[per_run], inp, params)
            except ValueError as e:  # a figure that does not apply to these runs says why
                st.info(f"{RUN_SET_FIGURES[more_name].title}: {e}")
