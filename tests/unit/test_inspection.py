import numpy as np
import pytest
import torch

from damcha import identifiability_note, inspect_input
from tests.support.models import ALL_VARIANTS, tiny_model


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("variant", ALL_VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
def test_inspection_leaves_the_model_untouched_and_is_deterministic(variant, causal):
    model = tiny_model(variant, causal, dropout=0.2, generator_dropout=0.2)
    model.train()  # a model in training mode must stay in training mode
    before = _state(model)
    tokens = [1, 2, 3, 4, 5, 6, 7]
    targets = [2, 3, 4, 5, 6, 7, 8] if causal else 3
    a = inspect_input(model, tokens, targets)
    b = inspect_input(model, tokens, targets)
    assert model.training
    assert all(m.training for m in model.modules())
    after = _state(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    for field in a.__dataclass_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if field == "structures":
            assert [s.name for s in x] == [s.name for s in y]
            for sx, sy in zip(x, y):
                np.testing.assert_array_equal(sx.values, sy.values)
        elif isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y
    # eval-mode inspection: dropout is off even though the model is in training mode
    out = model(torch.tensor([tokens]), stochastic=False).logits[0].detach().numpy()
    np.testing.assert_allclose(a.logits, out, atol=1e-12)


def test_record_shapes_and_loss():
    model = tiny_model("damcha-unshared", True)
    T = 9
    tokens = list(range(T))
    targets = [1, 2, 3, 4, 5, 6, 7, 8, -100]
    rec = inspect_input(model, tokens, targets, positions=[0, 4, 8])
    L, H, D, d = 2, 4, 16, 4
    assert rec.values("metric").shape == (L, 3, D, D)
    assert rec.values("head_metrics").shape == (L, 3, H, d, d)
    assert rec.values("block_norms_learned").shape == rec.values("block_norms_residue").shape == (L, 3, H, H)
    assert rec.attention.shape == (L, H, T, T)
    assert rec.logits.shape == (T, 11)
    assert np.isnan(rec.token_loss[-1]) and np.isfinite(rec.token_loss[:-1]).all()
    assert rec.loss == pytest.approx(np.nanmean(rec.token_loss))
    np.testing.assert_allclose(rec.attention.sum(-1), 1.0, atol=1e-12)
    full = inspect_input(model, tokens)
    np.testing.assert_allclose(rec.values("metric"), full.values("metric")[:, [0, 4, 8]], atol=1e-12)
    for part in ("learned", "residue"):  # block norms of each part, apart: never of their mix
        values = full.values(f"metric_{part}")
        norms = np.sqrt((values.reshape(L, T, H, d, H, d) ** 2).sum(axis=(3, 5)))
        np.testing.assert_allclose(full.values(f"block_norms_{part}"), norms, atol=1e-12)
    learned = full.values("block_norms_learned")
    np.testing.assert_allclose(learned, learned[..., :1].repeat(H, -1), atol=1e-12)  # m_i / H along each row


def test_bad_positions_and_empty_input_are_clear_errors():
    model = tiny_model()
    with pytest.raises(ValueError, match="positions"):
        inspect_input(model, [1, 2, 3], positions=[3])
    with pytest.raises(ValueError, match="empty"):
        inspect_input(model, [])
    with pytest.raises(ValueError, match="block_size"):
        inspect_input(model, list(range(11)) * 2)


def test_mha_record_has_no_metric_and_notes_differ():
    rec = inspect_input(tiny_model("mha"), [1, 2, 3])
    assert rec.values("metric") is None and rec.structure("metric") is None
    assert [s.name for s in rec.structures] == ["qk_forms"]
    notes = {identifiability_note(tiny_model(v).config) for v in ("damcha", "damcha-bilinear", "mha")}
    assert len(notes) == 3
    assert "only the learned part" in identifiability_note(tiny_model("damcha").config)


def test_record_describes_itself():
    """Heads, modality, task, labels and structures come with the record; nobody guesses them."""
    model = tiny_model("damcha", True, modality="byte_text", vocab_size=256)
    rec = inspect_input(model, [72, 105, 10], [105, 10, -100])
    assert (rec.n_head, rec.head_dim, rec.task, rec.modality.name) == (4, 4, "next_token", "byte_text")
    assert rec.token_labels == ("H", "i", "⏎") and rec.target_labels == ("i", "⏎", "?")
    kinds = {s.name: (s.kind.value, s.identifiability.value) for s in rec.structures}
    assert kinds["metric_residue"] == ("head_grid_matrix", "unidentifiable")
    assert kinds["metric_learned"] == ("head_grid_matrix", "learned")
    assert kinds["block_norms_learned"][0] == "head_by_head" and kinds["head_metrics"][0] == "per_head_forms"
    bilinear = inspect_input(tiny_model("damcha-bilinear"), [1, 2, 3])
    assert bilinear.structure("metric_residue").identifiability == "learned"
    assert "learned" not in bilinear.structure("metric_learned").title  # every block is learned there
    assert "metric_residue" in repr(rec) and "Structure(" in repr(rec.structures[0])


def test_a_record_names_its_source_and_its_figures_say_the_epoch_without_being_told():
    """The run, epoch and snapshot hash travel with the record (set when the model is loaded), and the
    input's hash is the one provenance writes: nothing passes the epoch down again."""
    from pathlib import Path

    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.export import Provenance
    from damcha.views.figure_sets import build_figure

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / "digits-mha")
    epoch = run.epochs[0]
    inp = validation_input(run, 1)
    record = inspect_input(load_model(run, epoch), inp.tokens, inp.targets)
    prov = Provenance.of("attention", run, epoch, inp.tokens, inp.targets)
    assert (record.source.run, record.source.epoch) == (str(run.path), epoch)
    assert (record.source.snapshot_sha256, record.source.input_sha256) == (prov.checkpoint_sha256, prov.input_sha256)
    assert f"epoch {epoch}" in build_figure("attention", record, {}).layout.title.text
    unloaded = inspect_input(tiny_model("mha"), [1, 2, 3])
    assert unloaded.source.run is None and "epoch" not in build_figure("attention", unloaded, {}).layout.title.text
