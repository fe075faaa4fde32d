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

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app" / "streamlit_app.py")


def test_nearest_inputs_and_the_flag_follow_the_validation_spread():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 12)) * 10
    validation = np.repeat(centres, 20, axis=0) + rng.normal(size=(100, 12))  # (100, 12)
    near = familiarity(validation[7] + 0.01, validation)
    assert near.nearest[0] == 7 and not near.unfamiliar and near.distances == tuple(sorted(near.distances))
    far = familiarity(centres.mean(0) + 100, validation)
    assert far.unfamiliar and "Out of distribution" in far.sentence()
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
    assert any("Out of distribution" in w.value for w in at.warning), [w.value for w in at.warning]
