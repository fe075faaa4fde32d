"""A mechanism is one module plus a registry entry: a toy mechanism defined here trains, saves,
loads, inspects and shows its structures in the app through the generic path alone."""

from pathlib import Path

import pytest
import torch

from damcha import ModelConfig, build_model, inspect_input, mechanisms, variant_config
from damcha.views.figure_sets import available_figures, build_figure
from tests.support.app_views import in_every_view
from tests.support.toy_mechanism import TOY_VARIANT, Tied, TiedOptions

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")


@pytest.fixture
def tied():
    mechanisms.register(Tied(), TOY_VARIANT)
    yield
    mechanisms.unregister("tied")


def test_a_registered_toy_mechanism_builds_runs_and_is_inspected_generically(tied):
    cfg = variant_config(ModelConfig(vocab_size=11, block_size=16, n_layer=2, n_head=4, n_embd=16), "tied")
    assert cfg.attention == "tied" and cfg.variant == "tied" and "tied" in mechanisms.variant_names()
    model = build_model(cfg, seed=0)
    assert model.num_parameters() == cfg.parameter_estimate()
    tokens = torch.randint(0, 11, (2, 9))
    out = model(tokens, targets=tokens)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    hot = model(tokens, options=TiedOptions(temperature=5.0)).logits
    assert not torch.allclose(hot, model(tokens).logits)  # the typed option reaches the layer
    with pytest.raises(ValueError, match="takes TiedOptions"):
        model(tokens, options=mechanisms.DamchaOptions())

    record = inspect_input(model.eval(), [1, 2, 3, 4], [2, 3, 4, 5])
    assert [s.name for s in record.structures] == ["mix", "forms"]
    assert record.structure("mix").at(layer=1).shape == (4, 4) and record.values("metric") is None
    for name in available_figures(record):
        fig = build_figure(name, record, {"layer": 1})
        assert fig.data, name
    assert "Head mixing" in build_figure("mix", record, {"layer": 1}).layout.title.text


def test_the_toy_trains_saves_and_shows_its_structures_in_the_app(tied, tmp_path):
    from streamlit.testing.v1 import AppTest

    from damcha.runs.checkpoints import load_model, load_run
    from damcha.runs.train import TrainConfig, train

    base = ModelConfig(n_layer=1, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)})
    train(variant_config(base, "tied"), TrainConfig(dataset="digits", epochs=1, train_limit=64, batch_size=32,
                                                    completion_images=4, completion_samples=1),
          tmp_path / "digits-tied", progress=False)
    run = load_run(tmp_path / "digits-tied")
    assert run.variant == "tied" and run.model_config.modality == "digit_image"
    assert load_model(run).mechanism.name == "tied"

    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["checkpoint_root"] = str(tmp_path)
    at.switch_page("../pages/inspector.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    specs = in_every_view(at, lambda view: [c.proto.spec for c in view.get("plotly_chart")])
    assert any("Head mixing" in s for s in specs) and any("Tied forms" in s for s in specs)
    assert any("tied" in c.value for c in at.sidebar.caption)


def test_unknown_mechanisms_and_variants_are_clear_errors():
    with pytest.raises(ValueError, match="attention must be one of"):
        ModelConfig(attention="nope")
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        variant_config(ModelConfig(), "nope")
