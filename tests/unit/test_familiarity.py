"""Upload diagnostics: the nearest validation inputs and the out-of-distribution flag, in the
library and on the Inspector's first screen."""

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from damcha.analysis.familiarity import familiarity
from tests.support.images import handwritten_digit

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")


def test_nearest_inputs_and_the_flag_follow_the_validation_spread():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 12)) * 10
    validation = np.repeat(centres, 20, axis=0) + rng.normal(size=(100, 12))  # (100, 12)
    near = familiarity(validation[7] + 0.01, validation)
    assert near.nearest[0] == 7 and not near.unfamiliar and near.distances == tuple(sorted(near.distances))
    far = familiarity(centres.mean(0) + 100, validation)
    assert far.unfamiliar and "Far in raw values" in far.sentence()
    with pytest.raises(ValueError, match="not comparable"):
        familiarity(np.zeros(5), validation)


def upload(run: str, name: str, data: bytes) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = run
    at.switch_page("../pages/inspector.py")
    at.run()
    at.radio(key="source").set_value("Upload an image").run()
    at.file_uploader(key="upload_image").upload(name, data, "image/png").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_classifier_shows_its_prediction_and_whether_the_upload_is_familiar_on_the_first_screen():
    at = upload("digits-cls-damcha", "seven.png", handwritten_digit("7"))
    predicted = next(m for m in at.metric if m.label == "Predicted class")
    assert predicted.value.isdigit() and predicted.delta.startswith("p = ")
    said = [c.value for c in at.caption] + [w.value for w in at.warning]
    assert any("nearest validation input" in s for s in said)
    noise = Image.fromarray(np.random.default_rng(1).integers(0, 256, (120, 100), dtype=np.uint8))
    buffer = io.BytesIO()
    noise.save(buffer, format="PNG")
    at = upload("digits-cls-damcha", "noise.png", buffer.getvalue())
    assert any("Far in raw values" in w.value for w in at.warning), [w.value for w in at.warning]


def test_the_models_own_loss_places_an_input_among_the_validation_inputs():
    from damcha.analysis.familiarity import loss_standing

    validation = np.linspace(1.0, 3.0, 201)
    middle, high, low = (loss_standing(x, validation) for x in (2.0, 9.0, 0.1))
    assert not middle.unusual and middle.below == pytest.approx(0.5, abs=0.01)
    assert high.unusual and high.below == 1.0 and "worse than almost any" in high.sentence(lambda v: f"{v:.2f} nats")
    assert low.unusual and low.below == 0.0 and "better than almost any" in low.sentence(lambda v: f"{v:.2f} nats")
    with pytest.raises(ValueError, match="no validation losses"):
        loss_standing(1.0, np.array([]))


def typed(run: str, text: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = run
    at.switch_page("../pages/inspector.py")
    at.run()
    at.text_area(key="text").set_value(text).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_text_unlike_the_training_text_is_flagged_by_the_models_own_loss():
    at = typed("text-damcha", "Ünïcödé façade — 日本語のテキストと中文的文字, ßßß ЖЖЖ " * 3)
    said = [w.value for w in at.warning]
    # The model reads bytes: a loss term is a byte's (this text's characters are up to three bytes each).
    assert any("worse than almost any it was validated on" in s and "bits per byte" in s for s in said), said
    shown = [e.value for kind in ("warning", "caption", "markdown", "info", "metric") for e in getattr(at, kind)]
    assert not [s for s in shown if "per char" in str(s)]
    at = typed("text-damcha", "Return the number of items in a container. The argument may be a sequence "
                              "(such as a string, bytes, tuple, list, or range) or a collection.")
    assert any("Within the range of the validation inputs' losses" in c.value for c in at.caption), \
        [c.value for c in at.caption]


def test_a_flat_photo_is_placed_by_what_each_check_measures():
    """Both checks are worded as what they measured: a distance in raw values (with its weakness said) and
    the model's own loss among its validation losses; neither says 'within the validation data's range'."""
    flat = Image.new("RGB", (64, 64), (250, 200, 40))
    buffer = io.BytesIO()
    flat.save(buffer, format="PNG")
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "images-damcha"
    at.switch_page("../pages/inspector.py")
    at.run()
    at.radio(key="source").set_value("Upload a colour photo").run()
    at.file_uploader(key="upload_photo").upload("flat.png", buffer.getvalue(), "image/png").run()
    assert not at.exception, [e.value for e in at.exception]
    said = [c.value for c in at.caption] + [w.value for w in at.warning]
    assert not any("Within the validation data's range" in s for s in said)
    raw = next(s for s in said if "in raw values" in s)
    assert "says little across this many dimensions" in raw
    own = next(s for s in said if s.startswith("The model's loss on this input"))
    assert "squared error per patch" in own and "of its losses on 256 validation inputs" in own


def test_compare_on_a_classifier_upload_shows_each_runs_answer_and_the_familiarity_flag():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "digits-cls-damcha"
    at.switch_page("../pages/compare.py")
    at.run()
    at.radio(key="source").set_value("Upload an image").run()
    at.file_uploader(key="upload_image").upload("seven.png", handwritten_digit("7"), "image/png").run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert {"predicted class", "its probability"} <= set(table.columns), list(table.columns)
    assert table["its probability"].between(0, 1).all() and len(table) >= 2
    assert not any(c.startswith("loss on this input") for c in table.columns)  # no label, no loss: not a None column
    said = [c.value for c in at.caption] + [w.value for w in at.warning]
    assert any("in raw values" in s for s in said)


def test_where_a_loss_stands_is_counted_not_rounded_to_a_percentage():
    from damcha.analysis.familiarity import loss_standing

    validation = np.arange(256, dtype=float)
    assert "above all of its losses on 256 validation inputs" in loss_standing(300.0, validation).sentence(str)
    assert "above 255 of its losses on 256 validation inputs" in loss_standing(254.5, validation).sentence(str)
    assert "at or below all of its losses on 256 validation inputs" in loss_standing(-1.0, validation).sentence(str)


def test_a_residues_caption_says_unidentifiable_once():
    from damcha.analysis.inspection import inspect_input
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.comparison import head_grid_caption

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / "digits-damcha")
    inp = validation_input(run, 0)
    record = inspect_input(load_model(run), inp.tokens, inp.targets)
    residue = next(s.name for s in record.structures if "residue" in s.title)
    caption = head_grid_caption([("digits-damcha", record, residue)])
    assert "residue (unidentifiable)" in caption and "(unidentifiable) (unidentifiable)" not in caption
