"""Inspection in bounded memory (issue 19): viewed positions only, attention on demand, chunked
sequence profiles, memory-bounded evaluation batches, and heatmaps thinned for display only."""

import numpy as np
import pytest
import torch

from damcha.analysis import inspection
from damcha.analysis.inspection import inspect_input, sequence_profile
from damcha.model.mechanisms.damcha.metric import block_norms, learned_and_residue
from damcha.runs.evaluation import bounded_batch, evaluate
from damcha.views.figures import block_means, display_copy, epoch_animation_figure, metric_heatmap_figure
from tests.support.models import tiny_model

TOKENS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


@pytest.mark.parametrize("variant", ["damcha", "damcha-unshared", "damcha-bilinear", "mha"])
def test_structures_at_viewed_positions_equal_the_full_record(variant):
    model = tiny_model(variant)
    full = inspect_input(model, TOKENS)
    viewed = inspect_input(model, TOKENS, positions=[3, 7])
    assert viewed.positions.tolist() == [3, 7]
    for s in full.structures:
        v = viewed.structure(s.name)
        if "position" in s.index_axes and s.size("position") > 1:
            np.testing.assert_allclose(v.values, s.values[:, [3, 7]], atol=1e-12)
        else:
            np.testing.assert_allclose(v.values, s.values, atol=1e-12)
    assert viewed.position_index(7) == 1 and full.position_index(7) == 7
    with pytest.raises(ValueError, match="not inspected"):
        viewed.position_index(5)


def test_defaults_stay_within_the_budget(monkeypatch):
    model = tiny_model("damcha")
    monkeypatch.setattr(inspection, "INSPECTION_BUDGET_BYTES", 1)
    record = inspect_input(model, TOKENS)
    assert record.positions.tolist() == [len(TOKENS) - 1]  # only the last position's matrices
    assert record.attention_layers == (0,) and record.attention.shape[0] == 1
    with pytest.raises(ValueError, match="not kept"):
        record.attention_map(1)
    other = inspect_input(model, TOKENS, attention_layers=[1])
    full = inspect_input(tiny_model("damcha"), TOKENS, attention_layers=[0, 1])
    np.testing.assert_allclose(other.attention_map(1), full.attention_map(1), atol=1e-12)


@pytest.mark.parametrize("variant", ["damcha", "damcha-unshared", "damcha-bilinear"])
def test_sequence_profile_matches_the_full_matrices_in_any_chunking(variant):
    model = tiny_model(variant)
    record = inspect_input(model, TOKENS)
    M = torch.as_tensor(record.values("metric"))  # (L_m, T, D, D)
    H = record.n_head
    total = M.pow(2).sum((-2, -1))
    residue = learned_and_residue(M, H)[1].pow(2).sum((-2, -1)) / total
    blocks = block_norms(M, H).pow(2)
    off = (blocks.sum((-2, -1)) - blocks.diagonal(dim1=-2, dim2=-1).sum(-1)) / total
    for chunk in (3, 64):
        steps = []
        profile = {s.name: s for s in sequence_profile(model, TOKENS, progress=lambda k, n, steps=steps: steps.append((k, n)),
                                                       chunk=chunk)}
        shares = profile["metric_shares"].values  # (L_m, T, 2)
        np.testing.assert_allclose(shares[..., 0], residue.numpy(), rtol=1e-9)
        np.testing.assert_allclose(shares[..., 1], off.numpy(), rtol=1e-9)
        norms = np.linalg.norm(record.values("head_metrics").reshape(*record.values("head_metrics").shape[:3], -1), axis=-1)
        np.testing.assert_allclose(profile["head_metric_norms"].values, norms, rtol=1e-9)
        assert steps[-1][0] == steps[-1][1] == M.shape[0] * -(-len(TOKENS) // chunk)


def test_profile_is_empty_where_one_metric_serves_the_whole_input():
    assert sequence_profile(tiny_model("damcha-static"), TOKENS) == ()
    assert sequence_profile(tiny_model("mha"), TOKENS) == ()


def test_evaluation_batches_shrink_with_the_metric_memory_and_give_the_same_loss(monkeypatch):
    from damcha.runs import evaluation

    model = tiny_model("damcha")
    x = torch.randint(0, 11, (9, 12))
    y = torch.randint(0, 11, (9, 12))
    whole = evaluate(model, x, y)
    monkeypatch.setattr(evaluation, "EVAL_BYTES", 1)
    assert bounded_batch(model, 12, 256) == 1
    assert bounded_batch(tiny_model("mha"), 12, 256) == 256
    assert evaluate(model, x, y)["nll"] == pytest.approx(whole["nll"], rel=1e-12)


def test_display_copy_thins_only_large_heatmaps_and_keeps_the_grid_aligned():
    small = metric_heatmap_figure(np.random.default_rng(0).normal(size=(16, 16)), 4)
    np.testing.assert_array_equal(np.asarray(display_copy(small).data[0].z), np.asarray(small.data[0].z))  # whole
    M = np.random.default_rng(1).normal(size=(512, 512))
    fig = metric_heatmap_figure(M, 8)
    shown = display_copy(fig)
    z = np.asarray(shown.data[0].z)
    assert z.size <= 256 * 256 and z.shape == (256, 256)
    np.testing.assert_allclose(z[3, 5], M[6:8, 10:12].mean())
    np.testing.assert_allclose(shown.data[0].x[:2], [0.5, 2.5])  # block centres in cell coordinates
    assert shown.layout.shapes == fig.layout.shapes  # head grid lines unchanged
    assert np.asarray(fig.data[0].z).shape == (512, 512)  # the exported original keeps full resolution
    frames = display_copy(epoch_animation_figure([M, -M], [0, 1], 8, "heatmap", "M"))
    assert all(np.asarray(f.data[0].z).shape == (256, 256) for f in frames.frames)
    np.testing.assert_allclose(block_means(np.arange(25.0).reshape(5, 5), 2)[2, 2], 24.0)


def test_every_panel_keeps_its_own_resolution_beside_a_large_one():
    """Compare's figures once pooled every panel by one factor: a 4 x 4 composition map lost its
    extreme entry beside a large attention map. Small panels now stay whole, the large pool alone."""
    from plotly.subplots import make_subplots

    small = np.array([[0.1, -0.939, 0.2, 0.0], [0.3, 0.5, 0.1, 0.2], [0.0, 0.1, 0.9, 0.4], [0.2, 0.2, 0.1, 0.7]])
    experts = np.random.default_rng(2).random((8, 8))
    big = np.random.default_rng(3).normal(size=(1024, 1024))
    fig = make_subplots(rows=1, cols=3)
    for col, z in enumerate((small, experts, big), 1):
        fig.add_heatmap(z=z, row=1, col=col)
    shown = display_copy(fig)
    np.testing.assert_array_equal(np.asarray(shown.data[0].z), small)  # -0.939 is still there
    np.testing.assert_array_equal(np.asarray(shown.data[1].z), experts)  # "expert 1 … expert 8", not pairs
    pooled = np.asarray(shown.data[2].z)
    assert pooled.size + small.size + experts.size <= 256 * 256 and pooled.shape[0] < 1024
    assert "small panels" in shown.layout.title.text
