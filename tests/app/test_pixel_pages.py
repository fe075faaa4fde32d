"""The app on pixel-token runs (CIFAR-10 as 1024 pixel tokens, tiny runs trained here): an uploaded photo becomes
the runs' 1024 tokens, and the Inspector, Compare (with the paper's Figure 8 under its more figures) and Training
dynamics show their structures."""

import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from damcha.inputs.datasets.sample_images import sample_image_crops
from tests.support.app_views import APP, in_every_view
from tests.support.images import encode
from tests.support.training import tiny_pixel_runs


@pytest.fixture(scope="module")
def pixel_runs(tmp_path_factory):
    return tiny_pixel_runs(tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("data"))


def _with_photo(runs, page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["checkpoint_root"] = str(runs[0].path.parent)
    at.switch_page(f"../pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="source").options == ["Upload a colour photo"]  # CIFAR is the user's: no validation sample
    raw = encode(Image.fromarray(sample_image_crops(0)["val"][2]).resize((120, 80)), "JPEG")
    at.file_uploader(key="upload_photo").upload("photo.jpg", raw, "image/jpeg").run()
    assert not at.exception, [e.value for e in at.exception]
    said = [m.value for m in [*at.markdown, *at.caption]]
    if page == "inspector":  # the Inspector says what it read, and how
        assert any("photo photo.jpg" in m and "1024 pixel tokens" in m for m in said), said
    return at


def _specs(view) -> list[str]:
    return [c.proto.spec for c in view.get("plotly_chart")]


@pytest.mark.parametrize("page", ["inspector", "compare", "dynamics"])
def test_the_pages_read_an_uploaded_photo_as_the_pixel_runs_1024_tokens(pixel_runs, page):
    at = _with_photo(pixel_runs, page)
    assert not at.error, [e.value for e in at.error]
    specs = " ".join(in_every_view(at, lambda view: [" ".join(_specs(view))]))
    assert "M(x)" in specs or "metric" in specs.lower()
    if page == "inspector":
        assert "What the model sees (32x32 pixels in 3-3-2 colour)" in specs
    if page == "compare":
        assert all(r.name in specs for r in pixel_runs)  # both runs read the photo
        at.multiselect(key="compare_runs").set_value([pixel_runs[0].name]).run()  # the paper's figures: DAMCHA's
        at.toggle(key="compare_more_on").set_value(True).run()
        assert not at.exception, [e.value for e in at.exception]
        drawn = " ".join(_specs(at))
        assert "first against last snapshot (paper fig. 8)" in drawn, [i.value for i in at.info]
