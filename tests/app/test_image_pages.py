"""Every page on a colour-image patch run (a tiny one trained here), uploads of photos included."""

import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from damcha.inputs.datasets.sample_images import sample_image_crops
from tests.support.app_views import APP, in_every_view
from tests.support.images import encode
from tests.support.training import tiny_patch_run
from tests.support.units import losses_without_unit, shown_texts


@pytest.fixture(scope="module")
def patch_run(tmp_path_factory):
    return tiny_patch_run(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("page", ["inspector", "dynamics", "gradients", "ablation", "interventions"])
def test_every_page_works_on_a_patch_run(patch_run, page):
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["checkpoint_root"] = str(patch_run.path.parent)
    at.switch_page(f"../pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error
    assert len(at.get("plotly_chart")) >= (1 if page == "ablation" else 2)
    texts = in_every_view(at, shown_texts)
    assert not losses_without_unit(texts), losses_without_unit(texts)
    if page == "inspector":
        specs = " ".join(in_every_view(at, lambda view: [c.proto.spec for c in view.get("plotly_chart")]))
        assert "What the model sees (32x32" in specs and "Completion from the top half" in specs
        assert "over the image" in specs  # attention over the patch grid
        at.radio(key="source").set_value("Upload a colour photo").run()
        raw = encode(Image.fromarray(sample_image_crops(0)["val"][2]).resize((120, 80)), "JPEG")
        at.file_uploader(key="upload_photo").upload("photo.jpg", raw, "image/jpeg").run()
        assert not at.exception and any("photo photo.jpg" in m.value for m in at.markdown)
        at.file_uploader(key="upload_photo").upload("bad.jpg", b"not an image", "image/jpeg").run()
        assert any("Cannot use this input" in e.value for e in at.error)
    if page == "ablation":
        for toggle in [t for t in at.toggle if t.key == "table_on"]:  # on request, unless an earlier test cached it
            toggle.set_value(True).run()
        table = at.dataframe[-1].value
        assert {"val_completion_mse", "val_completion_mse_q25", "val_completion_mse_q75"} <= set(table.columns)
