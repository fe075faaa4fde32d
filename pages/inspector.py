"""Inspector: the cross-head structures one input induces in any mechanism, and what the model does with it."""

import streamlit as st

from app.cache import input_familiarity, inspection, sequence_profile, validation_losses
from app.controls import bounded_slider, holds_validation_inputs, input_picker, option_choices, position_in_context
from app.named_figures import not_placed, show_model_figure, show_record_figure
from app.run_picker import run_page
from app.sharing import plain_text
from app.url_state import bound
from damcha.analysis.familiarity import loss_standing
from damcha.analysis.inspection import (
    matrices_fit,
)
from damcha.inputs.model_inputs import validation_input
from damcha.inputs.uploads import InputError
from damcha.views.display_units import LossUnit
from damcha.views.figure_sets import (
    RECORD_FIGURES,
    available_figures,
    fixed_position_note,
    grid_matrices,
    input_thumbnail,
    predicted_class,
    prediction_takes_position,
    uses_positions,
)
from damcha.views.model_figures import MODEL_FIGURES, named_figure_applies
from damcha.views.readings import decomposition_readings
from damcha.views.token_view import TOKEN_VIEW_TITLE, token_view_html

# The named figures this page places itself (app.named_figures.not_placed: the others go under "More figures").
PLACED_FIGURES = ("attention", "attention_grid", "completion", "contour", "decomposition", "input", "patch_error",
                  "prediction", "sequence_profile", "surface", "token_loss")

STANDING_INPUTS = 256  # validation inputs an upload's loss is placed among

run, epoch = run_page("Inspector")

left, right = st.columns([1, 1])
with left:
    inp = input_picker(run)
if inp is None:
    st.stop()

c1, c2, c3, c4 = st.columns(4)
choices = option_choices(run, c1)
options = run.model_config.mechanism.options_from(choices)
cfg = run.model_config
T = len(inp.tokens)
# A long input of a wide model: full matrices and attention maps only where viewed (bounded memory).
viewed_only = cfg.causal and not matrices_fit(cfg, T)
POSITION_HELP = "A causal model has one metric per query position: M(c_t), c_t = mean of tokens 1..t."
if viewed_only:
    pos = bounded_slider(c2, "Query position", T - 1, "position", help=POSITION_HELP)
with st.status("Running the model on this input…", expanded=False) as status:
    record = inspection(run, epoch, inp, options, (pos,) if viewed_only else None)
    status.update(label="Model run on this input", state="complete")
figures_here = available_figures(record)

with right:
    st.markdown(f"**Input:** {plain_text(inp.source)}. {inp.note}")
    input_slot = st.container()  # the input is drawn once the query position is known
    if inp.text is not None:
        st.markdown("**The bytes the model reads**, as text (the figures label a newline ⏎ and a space ␣):")
        st.code(inp.text, language=None, wrap_lines=True)

first_screen = st.columns(3)
if record.loss is not None:
    unit = LossUnit.of(cfg)
    first_screen[0].metric(f"Loss on this input ({unit.label})", unit.text(record.loss),
                           help=f"mean over known targets, per {record.loss_unit}" + ("" if cfg.input_dim else
                                                                                      f"; {record.loss:.4f} nats"))
if record.task == "classification":
    predicted, confidence = predicted_class(record)
    first_screen[1].metric("Predicted class", str(predicted), f"p = {confidence:.2f}", delta_color="off", delta_arrow="off",
                           help="The classifier's most probable class and its probability (all of them: the "
                                "'Loss & prediction' tab).")
if record.modality.grid and inp.validation_index is None:
    try:
        near = input_familiarity(run, inp)
    except (InputError, ValueError) as e:
        st.caption(f"Not compared with the validation inputs: {e}")
    else:
        (st.warning if near.unfamiliar else st.caption)(near.sentence())
        thumbnail = input_thumbnail(inp)
        if thumbnail is not None:
            with st.expander("This input beside its nearest validation inputs"):
                cells = st.columns(1 + len(near.nearest))
                cells[0].image(thumbnail, caption="this input, as the model reads it", width=120)
                for cell, index, distance in zip(cells[1:], near.nearest, near.distances):
                    other = validation_input(run, index)
                    cell.image(input_thumbnail(other), caption=f"{plain_text(other.source)}: {distance:.3g}", width=120)

if inp.validation_index is None and record.loss is not None and holds_validation_inputs(run):
    # Every modality, texts included: the model's own loss on the upload among its losses on validation inputs.
    standing = loss_standing(record.loss, validation_losses(run, epoch, STANDING_INPUTS))
    (st.warning if standing.unusual else st.caption)(standing.sentence(lambda v: f"{unit.text(v)} {unit.label}"))

if viewed_only or uses_positions(record):
    if not viewed_only:
        pos = bounded_slider(c2, "Query position", T - 1, "position", help=POSITION_HELP)
    c2.caption(f"position {pos}: `{record.token_labels[pos]}`")
    if not record.modality.grid:
        st.markdown("**Query position in its context:** " + position_in_context(record.token_labels, pos))
else:
    pos = 0
    c2.caption(fixed_position_note(record))
n_layers = record.structure_layers
layer = c3.selectbox("Layer", list(range(1, n_layers + 1)), **bound("layer")) - 1 if n_layers > 1 else 0
shared_scale = c4.toggle("One colour scale for all panels", value=True, key="shared_scale")
params = {"layer": layer, "position": pos, "shared_scale": shared_scale, "options": choices}
for note in record.notes:
    st.info(note)
if "input" in figures_here:
    with input_slot:
        named_input = {"position": pos, "highlight": bool(viewed_only or uses_positions(record))}
        show_record_figure("input", record, run, epoch, inp, named_input, width="content")


def named(name: str, rec=record, **extra) -> None:
    """A named figure (regenerable from its provenance by `damcha figures`), shown with export buttons."""
    p = {**params, **extra}
    label = name + "".join(f"_{v}" for v in extra.values())
    show_record_figure(name, rec, run, epoch, inp, p, label)


profile = sequence_profile(run, epoch, inp, options) if record.causal else ()


matrices = grid_matrices(record)
# Tabs keyed by what they show (a structure's name, or a view), labelled for people.
tab_labels = {"structures": "Structures"} if record.structures else {}
if "decomposition" in figures_here:
    tab_labels["decomposition"] = "Decomposition"
if matrices:
    tab_labels["contour_3d"] = "Contour & 3D"
if profile:
    tab_labels["along_input"] = "Along the input"
tab_labels["attention"] = "Attention"
if not record.modality.grid and record.attention_layers:
    tab_labels["tokens"] = "Attention as text"
tab_labels["loss"] = "Loss & prediction"
more_figures = [n for n in not_placed(RECORD_FIGURES) if n in figures_here]
more_model_figures = [n for n in not_placed(MODEL_FIGURES) if named_figure_applies(n, record, cfg)]
if more_figures or more_model_figures:
    tab_labels["more"] = "More figures"
# Decomposition (M(x), its learned part and its residue on one scale) first where it exists: it is the view
# that says what a reader may take from every other.
first_tab = tab_labels.get("decomposition", next(iter(tab_labels.values())))
tabs = dict(zip(tab_labels, st.tabs(list(tab_labels.values()), default=first_tab, **bound("tab"))))


DRAWINGS = {"contours": ("contour",), "3D surface": ("surface",), "both": ("contour", "surface")}


def opened(name: str) -> bool:
    """Whether a tab is the one shown: the tabs are bound to the URL, so only the open one builds its figures."""
    return name in tabs and tabs[name].open is not False


if opened("structures"):
    with tabs["structures"]:
        titled = {s.title: s for s in record.structures}
        shown = titled[st.radio("Structure", list(titled), horizontal=True, **bound("shown"))]
        st.caption(f"{shown.description} **{shown.identifiability.capitalize()}.** Axes: "
                   f"{', '.join(shown.axis_title(a) for a in shown.drawn)}.")
        named(shown.name)
if opened("decomposition"):
    with tabs["decomposition"]:
        st.caption(" + ".join(s.title for s in matrices[1:]) + f" = {matrices[0].title}, side by side on one scale.")
        named("decomposition")
        for line in decomposition_readings(record, layer, pos):
            st.markdown(line)
if opened("contour_3d"):
    with tabs["contour_3d"]:
        c1, c2 = st.columns([3, 2])
        part = c1.radio("Matrix", [s.name for s in matrices], horizontal=True, key="part",
                        format_func=lambda n: record.structure(n).title)
        # One drawing by default: a browser without a GPU takes seconds over a WebGL surface.
        drawn = DRAWINGS[c2.radio("Drawn as", list(DRAWINGS), horizontal=True, **bound("drawn"))]
        for column, name in zip(st.columns(len(drawn)), drawn):
            with column:
                named(name, part=part)
if opened("along_input"):
    with tabs["along_input"]:
        st.caption("Summaries at every query position, computed a chunk of positions at a time (the full "
                   "matrices above are taken at the viewed position only when the input is long).")
        for s in profile:
            st.caption(f"{s.description} **{s.identifiability.capitalize()}.**")
            along = {"structure": s.name, "layer": layer, "position": pos, "options": choices}
            show_model_figure("sequence_profile", run, epoch, inp, along, {"structure": s, "record": record},
                              file_name=s.name)
if opened("attention"):
    with tabs["attention"]:
        st.caption("Attention probabilities per head (rows: queries, columns: keys, labelled with the tokens).")
        a_layer = st.selectbox("Attention layer", list(range(record.n_layer)), key="attn_layer",
                               format_func=lambda i: f"layer {i + 1}")
        attention_record = record
        if a_layer not in record.attention_layers:  # fetched on demand: every layer's maps would not fit
            with st.spinner(f"Attention of layer {a_layer + 1}…"):
                attention_record = inspection(run, epoch, inp, options, tuple(record.positions.tolist()), (a_layer,))
        named("attention", attention_record, attn_layer=a_layer)
        if "attention_grid" in figures_here:
            st.caption(f"The same attention of query position {pos}, each key drawn at the patch or pixel it holds.")
            named("attention_grid", attention_record, attn_layer=a_layer)
if opened("tokens"):
    with tabs["tokens"]:
        st.caption("Point at a token, or click it to keep it: the stripes under every token show, per head in its "
                   "colour, the attention it receives from that query (or, reversed, gives). Self-contained: the "
                   "download opens offline in any browser, interactive.")
        page = token_view_html(record, f"{run.name}, epoch {epoch}: {inp.source}")
        st.iframe(page, height=560, alt=TOKEN_VIEW_TITLE)
        st.download_button("Download as standalone HTML", page, f"{run.name}_e{epoch}_tokens.html", "text/html",
                           key="dl_token_view", icon=":material/download:", on_click="ignore")
if opened("loss"):
    with tabs["loss"]:
        if "token_loss" in figures_here:
            named("token_loss")
        if "patch_error" in figures_here:
            named("patch_error")
        if "prediction" in figures_here:
            if prediction_takes_position(record):
                nxt = bounded_slider(st, "Next-token distribution after position", T - 1, "next_position", bind=None)
                named("prediction", next_position=nxt)
            else:
                st.caption("Teacher-forced prediction: each position predicted from the true ones before it."
                           if record.task != "classification" else "Predicted class probabilities.")
                named("prediction")
        if named_figure_applies("completion", record, run.model_config):
            st.caption("Generation as in the paper: the bottom half completed from the true top half, each predicted "
                       "patch fed back as the next input.")
            show_model_figure("completion", run, epoch, inp, {"options": choices})
if opened("more"):
    with tabs["more"]:
        st.caption("Every other named figure that applies to this input, as its table declares it.")
        for name in more_figures:
            named(name)
        for name in more_model_figures:
            show_model_figure(name, run, epoch, inp, {**params, "options": choices})
