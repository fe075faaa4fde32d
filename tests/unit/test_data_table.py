"""The data table of validation inputs: its numbers equal the library's for every mechanism, and
the page sorts, filters, keeps the table on disk and opens a row in the Inspector."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from damcha.analysis import interventions as iv
from damcha.analysis.data_table import structure_summaries, validation_table
from damcha.analysis.inspection import inspect_input
from damcha.model.mechanisms import get_mechanism
from tests.support.layers import perturbed
from tests.support.models import ALL_VARIANTS, tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_every_column_is_what_the_library_computes(variant, causal):
    model = tiny_model(variant, causal, dtype=torch.float32)
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, 11, (5, 12), generator=gen)
    y = torch.randint(0, 5, (5,), generator=gen) if not causal else torch.randint(0, 11, (5, 12), generator=gen)
    labels = np.array([1, 0, 1, 2, 0])
    table = validation_table(model, x, y, labels, mean_inputs=5)
    rows, columns, constant = table["rows"], table["columns"], table["constant"]
    assert [r["input"] for r in rows] == list(range(5)) and [r["label"] for r in rows] == labels.tolist()
    unit = next(c for c in columns if c.startswith("loss ("))
    if not causal:  # a classifier's prediction where the eye lands first, not past every structure column
        assert list(rows[0])[:5] == ["input", "label", "prediction", "right", unit]
    base = iv.batch_losses(model, x, y)
    np.testing.assert_allclose([r[unit] for r in rows], base / math.log(2), rtol=1e-5)
    declared = [i for i in iv.available_interventions(model) if all(p.kind != "input" for p in i.params)]
    mbar = iv.mean_metric(model, x) if any(p.kind == "mean" for i in declared for p in i.params) else None
    for intervention in declared:
        acts_on = iv.default_parameters(intervention)  # the header says which block or head
        name = f"Δ {unit}: {intervention.title}" + (f" ({acts_on})" if acts_on else "")  # "Δ loss (bits per …)"
        changed = iv.batch_losses(model, x, y, iv.intervention_options(model, intervention, x[0], mbar=mbar))
        got = [r[name] for r in rows] if name in columns else [constant[name]] * 5
        # A difference of two float32 losses of about 3.5 nats resolves to a few ulps (2.4e-7 each, relative):
        # an intervention that changes nothing (M-bar of a static metric) may read 0 or 1e-6 bits.
        resolution = 8 * np.finfo(np.float32).eps * float(np.abs(base).max()) / math.log(2)
        np.testing.assert_allclose(got, (changed - base) / math.log(2), rtol=1e-4, atol=resolution, err_msg=name)
    for i in (0, 4):
        record = inspect_input(model, x[i], int(y[i]) if not causal else y[i], positions=[11] if causal else None)
        for name, value in structure_summaries(record).items():
            assert (rows[i][name] if name in columns else constant[name]) == pytest.approx(value, abs=1e-6), name
        if not causal:
            assert rows[i]["prediction"] == int(record.logits.argmax())
            assert rows[i]["right"] == (rows[i]["prediction"] == int(y[i]))
    for name, value in constant.items():  # the same for every input, and said once
        assert name not in columns and all(name not in r for r in rows) and isinstance(value, float)


def test_a_metric_mechanisms_table_has_the_adaptivity_gap_and_the_residue_share():
    model = tiny_model("damcha", dtype=torch.float32)
    x = torch.randint(0, 11, (6, 12))
    table = validation_table(model, x, torch.roll(x, -1, 1), mean_inputs=6)
    gap = iv.adaptivity_gap(model, x, torch.roll(x, -1, 1), iv.mean_metric(model, x))
    got = [r["Δ loss (bits per token): The validation mean M-bar"] for r in table["rows"]]
    np.testing.assert_allclose(got, gap / math.log(2), rtol=1e-4, atol=1e-6)
    assert "share of ‖M(x)‖² in residue (unidentifiable)" in table["columns"]
    assert table["constant"]["Δ loss (bits per token): Keep only the learned part"] == pytest.approx(0.0, abs=1e-6)


def test_the_page_filters_and_keeps_the_table_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=240)
    at.query_params["run"] = "digits-cls-damcha"
    at.session_state["table_rows"] = 120
    at.switch_page("../pages/table.py").run()
    assert not at.exception, [e.value for e in at.exception]
    df = at.dataframe[0].value
    assert len(df) == 120 and list(df["input"]) == list(range(120))
    assert (df["right"] == (df["prediction"] == df["label"])).all()
    assert all(link.endswith(f"&sample={i}") and "run=digits-cls-damcha" in link for i, link in zip(df["input"], df["open"]))
    assert list((tmp_path / "cache" / "validation_table").glob("*.json"))  # computed once, kept for every session
    at.toggle(key="table_wrong").set_value(True).run()
    wrong = at.dataframe[0].value
    assert len(wrong) == int((~df["right"]).sum()) and not wrong["right"].any()
    at.toggle(key="table_wrong").set_value(False).run()
    at.multiselect(key="table_labels").set_value([3]).run()
    assert set(at.dataframe[0].value["label"]) == {3}
    assert all(p.startswith("data:image/png;base64,") for p in df["preview"])  # each row shows its digit


def test_a_rows_preview_is_the_picture_the_model_sees_or_the_texts_first_characters():
    import base64
    import io

    from PIL import Image

    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_run
    from damcha.views.figure_sets import ink_dark
    from damcha.views.thumbnails import SNIPPET_CHARS, input_preview

    digit = validation_input(load_run(ROOT / "checkpoints" / "digits-damcha"), 5)
    kind, url = input_preview(digit)
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    assert kind == "image" and pixels.shape == (32, 32)
    np.testing.assert_array_equal(pixels[::4, ::4], ink_dark(digit.levels))  # each level a 4 x 4 block
    text = validation_input(load_run(ROOT / "checkpoints" / "text-damcha"), 0)
    kind, snippet = input_preview(text)
    assert kind == "text" and snippet.rstrip("…") == text.text.replace("\n", "⏎")[:SNIPPET_CHARS]


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_a_mechanism_that_declares_probabilities_gives_non_negative_attention(variant):
    """The entropy column relies on the declaration (not on the input at hand): check it holds."""
    model = perturbed(tiny_model(variant, dtype=torch.float64))
    record = inspect_input(model, list(range(10)), list(range(1, 11)))
    if not get_mechanism(record.mechanism).signed_attention:
        assert (record.attention >= 0).all()
