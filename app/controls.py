"""The controls a page draws: the input picker, a mechanism's per-call choices, bounded sliders,
sections computed on request for paper-sized runs."""

from __future__ import annotations

import streamlit as st

from app.sharing import plain_text
from app.url_state import URL, bound, typed_text_area, url_number_input
from damcha.analysis.inspection import matrices_fit
from damcha.inputs.datasets import bundled
from damcha.inputs.model_inputs import (
    ModelInput,
    input_from_image,
    input_from_photo,
    input_from_text,
    input_from_token_ids,
    run_modality,
    validation_count,
    validation_input,
)
from damcha.inputs.uploads import MAX_UPLOAD_BYTES, InputError
from damcha.runs.checkpoints import Run

UPLOAD_TYPES = {"image": ["png", "jpg", "jpeg", "gif", "bmp", "webp"], "text": ["txt", "md", "py", "csv", "json", "text"]}


# The uploader refuses a larger file in the browser, before the page hears of it (a red mark on the file's
# name, its reason on hover): the page says so beforehand, in words.
UPLOAD_LIMIT_NOTE = (f"Files up to {MAX_UPLOAD_BYTES / 1e6:g} MB ({MAX_UPLOAD_BYTES:,} bytes); the uploader refuses "
                     "a larger one itself, marking its name in red (point at the mark for the reason), and this page "
                     "then keeps waiting for a file.")


def _validation_sample(run: Run) -> ModelInput:
    n = validation_count(run)
    return validation_input(run, url_number_input(st, f"Validation index (0..{n - 1})", 0, n - 1, 0, "sample"))


def _uploaded(label: str, kind: str, key: str, note: str, read) -> ModelInput | None:
    up = st.file_uploader(label, type=UPLOAD_TYPES[kind], key=key)
    if up is None:
        st.info(note + " " + UPLOAD_LIMIT_NOTE)
        return None
    return read(up)


def _uploaded_digit(run: Run) -> ModelInput | None:
    return _uploaded("Image of one handwritten digit (PNG, JPEG, GIF, BMP, WebP)", "image", "upload_image",
                     "Upload a photo or scan of one digit; it is cropped, centred and reduced to 8x8 grey levels.",
                     lambda up: input_from_image(run, up.getvalue(), up.name))


def _uploaded_photo(run: Run) -> ModelInput | None:
    return _uploaded("A colour photo (PNG, JPEG, GIF, BMP, WebP)", "image", "upload_photo",
                     "Upload any colour photo; it is turned upright, centre-cropped to a square and resized to "
                     f"32x32 (Lanczos), then read as {run_modality(run).title}.",
                     lambda up: input_from_photo(run, up.getvalue(), up.name))


def _uploaded_text(run: Run) -> ModelInput | None:
    return _uploaded("UTF-8 text file", "text", "upload_text",
                     "Upload a UTF-8 text file; the model reads its first bytes, up to its context length.",
                     lambda up: input_from_text(run, up.getvalue(), f"file {up.name}"))


def _typed_ids(run: Run) -> ModelInput:
    default = " ".join(str(i % run.model_config.vocab_size) for i in range(1, 33))
    return input_from_token_ids(run, typed_text_area(st, "Token ids (spaces or commas)", default, "ids"))


def _typed_text(run: Run) -> ModelInput:
    text = typed_text_area(st, "Text", "The metric of each head is computed from the context.", "text")
    return input_from_text(run, text.encode("utf-8"), "typed text")


INPUT_SOURCES = {"Validation sample": _validation_sample, "Upload an image": _uploaded_digit,
                 "Upload a colour photo": _uploaded_photo, "Upload a text file": _uploaded_text,
                 "Type token ids": _typed_ids, "Type text": _typed_text}
# A modality's upload kind: the sources offered before the validation sample, and after it.
SOURCES_OF_UPLOAD = {"image": ((), ("Upload an image",)), "photo": ((), ("Upload a colour photo",)),
                     "text": (("Type text", "Upload a text file"), ()), "ids": (("Type token ids",), ())}


def input_picker(run: Run) -> ModelInput | None:
    """Upload, type, or pick a validation sample, as the run's modality allows; returns the model
    input or None (with a message shown). The source, validation index and typed text are in the URL."""
    modality = run_modality(run)
    before, after = SOURCES_OF_UPLOAD.get(modality.upload, ((), ()))
    sources = [*before, *(["Validation sample"] if bundled(run.dataset) else []), *after]
    if not sources:
        st.info(f"{plain_text(run.name)} reads {modality.title} from local files ({plain_text(run.dataset)}) and takes no uploads.")
        return None
    source = st.radio("Input", sources, horizontal=True, **bound("source"))
    try:
        return INPUT_SOURCES[source](run)
    except InputError as e:
        st.error(f"Cannot use this input: {e}")
        return None


def option_choices(run: Run, container=None, horizontal: bool = False) -> dict[str, str]:
    """A control for each per-call choice the run's mechanism declares (DAMCHA: the metric mode),
    with its help, in the URL under its declared key: {choice name: chosen value}."""
    where = container or st
    return {c.name: where.radio(c.label, list(c.values), format_func=lambda v: str(v).replace("_", " "),
                                **bound(c.url_key), help=c.help, horizontal=horizontal)
            for c in run.model_config.mechanism.option_choices}


def bounded_slider(where, label: str, upper: int, key: str, bind: str | None = URL, **kw) -> int:
    """A slider over 0..upper (default: upper) whose kept value (session or URL) is clamped first:
    a new input may be shorter than the one the value was chosen for."""
    kept = st.session_state.get(key)
    if isinstance(kept, int) and kept > upper:
        st.session_state[key] = upper
    if bind is None:
        return where.slider(label, 0, upper, upper, key=key, **kw)
    return where.slider(label, 0, upper, upper, **bound(key), **kw)


def is_large(run: Run) -> bool:
    """A paper-sized run: its per-position matrices for a full-length input exceed the inspection
    budget, and one forward pass of such an input takes about a second on a CPU."""
    cfg = run.model_config
    return not matrices_fit(cfg, cfg.block_size)


def computed_on_request(run: Run, label: str, key: str) -> bool:
    """Whether to compute a section that runs the model over many inputs, snapshots or integration
    steps: always for small runs; for paper-sized ones only when asked, so the page answers at once."""
    if not is_large(run):
        return True
    on = st.toggle(label, value=False, key=key,
                   help="A paper-sized run: this runs the model many times (minutes on a CPU), so it waits to be asked.")
    if not on:
        st.caption("Not computed yet (paper-sized run): switch it on above.")
    return on


def holds_validation_inputs(run: Run) -> bool:
    """Whether the app holds the run's validation inputs (the data sets it bundles); for any other (read
    from the user's files, or none recorded, as in a Hugging Face folder) a caption says so."""
    if not bundled(run.dataset):
        st.caption(f"Needs the validation inputs of data set {plain_text(run.dataset)!r}, which the app does not "
                   "hold (read from local files, or not recorded with the run): not computed.")
        return False
    return True


def over_validation_inputs(run: Run, label: str, key: str) -> bool:
    """computed_on_request for a section over the run's validation inputs (see holds_validation_inputs)."""
    return holds_validation_inputs(run) and computed_on_request(run, label, key)


def position_in_context(labels, position: int, width: int = 40) -> str:
    """Markdown of the tokens around `position`, the one at it highlighted: where a query sits in a
    long input, readable where a slider alone is not."""
    def text(part) -> str:
        return plain_text("".join(part))

    before = text(labels[max(0, position - width):position])
    after = text(labels[position + 1:position + 1 + width])
    return (f"{'…' if position > width else ''}{before}:orange-background[**{text(labels[position:position + 1])}**]"
            f"{after}{'…' if position + 1 + width < len(labels) else ''}")
