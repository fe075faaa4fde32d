"""docs/design.md §2: under the row sum only m_i is learned; the within-row residue never moves."""

import numpy as np
import pytest
import torch

from damcha import inspect_input
from damcha.model.mechanisms.damcha.layer import metric_sources
from damcha.model.mechanisms.damcha.metric import within_row_residual
from tests.support.models import tiny_model, train_copy_task


def _residuals(model):
    cfg = model.config
    (src,) = metric_sources(model)
    weight, bias = src.last_layer()
    return [within_row_residual(t.detach().clone(), cfg.n_embd, cfg.n_head) for t in (weight, bias) if t is not None]


@pytest.mark.parametrize("variant", ["damcha", "damcha-bilinear", "damcha-static"])
def test_row_sum_residue_is_frozen_and_bilinear_residue_learns(variant):
    model = tiny_model(variant, True)
    w0 = metric_sources(model)[0].last_layer()[0].detach().clone()
    before = _residuals(model)
    train_copy_task(model)
    after = _residuals(model)
    w1 = metric_sources(model)[0].last_layer()[0].detach()
    assert (w1 - w0).abs().max() > 1e-2  # the layer did train
    change = max((a - b).abs().max().item() for a, b in zip(after, before))
    if variant == "damcha-bilinear":
        assert change > 1e-2
    else:
        assert change < 1e-10


def test_decoupled_weight_decay_shrinks_the_residue():
    """The freeze is a property of Adam without decoupled decay; AdamW's decay moves it."""
    model = tiny_model("damcha", True)
    before = _residuals(model)[0]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.5)
    for _ in range(20):
        opt.zero_grad()
        tokens = torch.randint(0, 11, (4, 8))
        model(tokens, targets=tokens).loss.backward()
        opt.step()
    after = _residuals(model)[0]
    assert after.norm() < before.norm() * 0.999


def test_inspection_residue_is_the_frozen_readout_of_the_generator_features():
    model = tiny_model("damcha", True)
    train_copy_task(model, steps=50)
    cfg = model.config
    tokens = [1, 5, 2, 7, 3, 3, 0]
    record = inspect_input(model, tokens)
    src = metric_sources(model)[0]
    res_w, res_b = _residuals(model)  # (H, d, H, d, w), (H, d, H, d, 1)
    with torch.no_grad():
        tok = torch.tensor(tokens)[None]
        h0 = model.tok_emb(tok) + model.pos_emb(torch.arange(len(tokens)))
        c = h0.cumsum(1)[0] / torch.arange(1, len(tokens) + 1, dtype=h0.dtype)[:, None]  # (T, D)
        feats = src.generator.features(c, False)  # (T, w)
        expected = torch.einsum("ipjqk,tk->tipjq", res_w, feats) + res_b[..., 0]  # (T, H, d, H, d)
    expected = expected.reshape(len(tokens), cfg.n_embd, cfg.n_embd).numpy()
    np.testing.assert_allclose(record.values("metric_residue")[0], expected, atol=1e-10)
    np.testing.assert_allclose(record.values("metric_learned")[0] + record.values("metric_residue")[0], record.values("metric")[0], atol=1e-12)
    blocks = record.values("metric_residue")[0].reshape(len(tokens), cfg.n_head, cfg.head_dim, cfg.n_head, cfg.head_dim)
    np.testing.assert_allclose(blocks.mean(axis=3), 0, atol=1e-12)  # zero row mean
    assert record.structure("metric_residue").identifiability == "unidentifiable"


@pytest.mark.parametrize("variant, mode, badge", [
    ("damcha", "full", "learned"), ("damcha", "diagonal", "partly identifiable"), ("damcha", "off_diagonal", "partly identifiable"),
    ("damcha", "diagonal_scaled", "partly identifiable"), ("damcha-bilinear", "diagonal", "learned"),
])
def test_the_per_head_metric_badge_follows_the_metric_mode(variant, mode, badge):
    """Under the row sum m_i is learned, but M_ii = m_i / H + R_ii is not: a mode that scores with
    single blocks is partly unidentifiable, and the badge says so (it once said 'learned' always)."""
    from damcha.model.mechanisms import DamchaOptions

    model = tiny_model(variant)
    tokens = torch.randint(0, 11, (10,)).numpy()
    record = inspect_input(model, tokens, None, options=DamchaOptions(mode))
    heads = record.structure("head_metrics")
    assert heads.identifiability == badge
    if variant == "damcha" and mode == "diagonal":  # what it draws is m_i / H plus the residue's diagonal block
        H, d = model.config.n_head, model.config.head_dim
        learned, residue = record.structure("metric_learned").values, record.structure("metric_residue").values
        for i in range(H):
            block = slice(i * d, (i + 1) * d)
            np.testing.assert_allclose(heads.values[0, -1, i], learned[0, -1, block, block] + residue[0, -1, block, block],
                                       atol=1e-10)
    if mode != "full":
        assert "does not change M(x) itself" in record.structure("metric").description
