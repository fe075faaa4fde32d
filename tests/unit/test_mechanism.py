"""The mechanism against docs/design.md section 2, computed independently where it matters."""

import math

import numpy as np
import pytest
import torch

from damcha import DamchaOptions, MetricMode, ModelConfig, inspect_input, variant_config
from damcha.model.mechanisms.damcha.metric import MetricGenerator, context_means
from tests.support.models import ALL_VARIANTS, METRIC_VARIANTS, logits_and_grads, opts, tiny_model

MODES = [m.value for m in MetricMode]


@pytest.mark.parametrize("variant", METRIC_VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_fused_and_explicit_paths_agree_in_values_and_gradients(variant, causal, mode):
    model = tiny_model(variant, causal)
    tokens = torch.randint(0, 11, (3, 12))
    targets = torch.randint(0, 11, (3, 12)) if causal else torch.randint(0, 5, (3,))
    logits_f, grads_f = logits_and_grads(model, tokens, targets, mode, explicit=False)
    logits_e, grads_e = logits_and_grads(model, tokens, targets, mode, explicit=True)
    assert torch.allclose(logits_f, logits_e, atol=1e-10, rtol=0)
    assert grads_f.keys() == grads_e.keys()
    for name in grads_f:
        assert torch.allclose(grads_f[name], grads_e[name], atol=1e-10, rtol=0), name


def test_fused_row_sum_never_builds_the_full_metric(monkeypatch):
    model = tiny_model("damcha", True)

    def forbidden(*args, **kwargs):
        raise AssertionError("full M(x) built on the fused path")

    monkeypatch.setattr(MetricGenerator, "full_metric", forbidden)
    model(torch.randint(0, 11, (2, 10)), targets=torch.randint(0, 11, (2, 10))).loss.backward()
    with pytest.raises(AssertionError, match="fused path"):
        model(torch.randint(0, 11, (2, 10)), options=opts(model, explicit=True))


def _independent_first_layer_attention(model, tokens, bilinear):
    """Scores of layer 0 recomputed from the generator's raw output with plain numpy loops."""
    cfg = model.config
    H, d, D = cfg.n_head, cfg.head_dim, cfg.n_embd
    T = len(tokens)
    with torch.no_grad():
        tok = torch.tensor(tokens)[None]
        h0 = model.tok_emb(tok) + model.pos_emb(torch.arange(T))  # stack input
        x = model.blocks[0].ln_1(h0)[0].numpy()  # (T, D) what layer 0 scores
        gen = model.metric_source.generator
        h0n = h0[0].numpy()
        raw = [gen.out(gen.features(torch.tensor(h0n[: t + 1].mean(0)), False)).numpy() for t in range(T)]
    A = np.zeros((H, T, T))
    for i in range(H):
        for t in range(T):
            M = raw[t].reshape(D, D)  # row-major read of f's D*D output
            xi = x[t, i * d:(i + 1) * d]
            s = np.full(T, -np.inf)
            for u in range(t + 1):
                if bilinear:
                    s[u] = sum(xi @ M[i * d:(i + 1) * d, j * d:(j + 1) * d] @ x[u, j * d:(j + 1) * d] for j in range(H))
                else:
                    m_i = sum(M[i * d:(i + 1) * d, j * d:(j + 1) * d] for j in range(H))
                    s[u] = xi @ m_i @ x[u, i * d:(i + 1) * d]
                s[u] /= math.sqrt(d)
            e = np.exp(s - s.max())
            A[i, t] = e / e.sum()
    return A


@pytest.mark.parametrize("variant", ["damcha", "damcha-bilinear"])
def test_attention_weights_match_an_independent_recomputation(variant):
    model = tiny_model(variant, True)
    tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    expected = _independent_first_layer_attention(model, tokens, bilinear=variant == "damcha-bilinear")
    record = inspect_input(model, tokens)
    np.testing.assert_allclose(record.attention[0], expected, atol=1e-10)


@pytest.mark.parametrize("variant", [v for v in METRIC_VARIANTS if variant_config(ModelConfig(), v).setting("score_form") == "row_sum"])
@pytest.mark.parametrize("causal", [True, False])
def test_metric_modes_use_exactly_the_named_blocks(variant, causal):
    model = tiny_model(variant, causal)
    H, d = model.config.n_head, model.config.head_dim
    tokens = [1, 2, 3, 4, 5, 6]
    for mode in MODES:
        # Per-layer metrics depend on earlier layers, hence on the mode: compare within one pass.
        record = inspect_input(model, tokens, options=opts(model, mode))
        M = record.values("metric")  # (L_m, P, D, D)
        blocks = M.reshape(*M.shape[:2], H, d, H, d)
        diag = np.stack([blocks[:, :, i, :, i, :] for i in range(H)], axis=2)  # (L_m, P, H, d, d)
        total = blocks.sum(axis=4)  # (L_m, P, H, d, d)
        expected = {"full": total, "diagonal": diag, "off_diagonal": total - diag, "diagonal_scaled": H * diag}[mode]
        np.testing.assert_allclose(record.values("head_metrics"), expected, atol=1e-12)


def test_bilinear_metric_modes_scale_the_named_blocks():
    model = tiny_model("damcha-bilinear", True)
    H, d = model.config.n_head, model.config.head_dim
    rec_full = inspect_input(model, [1, 2, 3])
    rec_diag = inspect_input(model, [1, 2, 3], options=opts(model, "diagonal"))
    rows = rec_full.values("head_metrics").reshape(*rec_full.values("head_metrics").shape[:4], H, d)  # (L, P, H, d, H, d)
    for i in range(H):
        for j in range(H):
            got = rec_diag.values("head_metrics").reshape(rows.shape)[:, :, i, :, j, :]
            np.testing.assert_allclose(got, rows[:, :, i, :, j, :] if i == j else 0 * got, atol=1e-12)


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_future_tokens_change_no_earlier_output(variant):
    model = tiny_model(variant, True)
    a = torch.randint(0, 11, (2, 12))
    b = a.clone()
    b[:, 7:] = torch.randint(0, 11, (2, 5))
    assert not torch.equal(a, b)
    for explicit in (False, True):
        la = model(a, options=opts(model, explicit=explicit)).logits
        lb = model(b, options=opts(model, explicit=explicit)).logits
        assert torch.allclose(la[:, :7], lb[:, :7], atol=1e-12)
        assert not torch.allclose(la[:, 7:], lb[:, 7:])  # the test can fail: later outputs do change
    if model.mechanism.metric(model.config) is not None:
        ma = inspect_input(model, a[0]).values("head_metrics")[:, :7]
        mb = inspect_input(model, b[0]).values("head_metrics")[:, :7]
        np.testing.assert_allclose(ma, mb, atol=1e-12)


@pytest.mark.parametrize("variant", ALL_VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
def test_appended_padding_changes_no_real_output_or_metric(variant, causal):
    pad = 10
    model = tiny_model(variant, causal, pad_token=pad)
    real = torch.randint(0, 10, (1, 7))
    padded = torch.cat([real, torch.full((1, 5), pad)], dim=1)
    for explicit in (False, True):
        out_r = model(real, options=opts(model, explicit=explicit), need_intermediates=True)
        out_p = model(padded, options=opts(model, explicit=explicit), need_intermediates=True)
        got = out_p.logits[:, :7] if causal else out_p.logits
        want = out_r.logits if causal else out_r.logits
        assert torch.allclose(got, want, atol=1e-12)
        assert torch.isfinite(out_p.logits).all()
        if model.mechanism.metric(model.config) is not None:
            hr, hp = out_r.layers[0].internals.head, out_p.layers[0].internals.head
            assert torch.allclose(hp[:, : hr.shape[1]], hr, atol=1e-12)
    # In a batch, a short padded row gives the same outputs as alone.
    batch = torch.cat([padded, torch.randint(0, 10, (1, 12))])
    got = model(batch).logits[0, :7] if causal else model(batch).logits[0]
    want = model(real).logits[0] if causal else model(real).logits[0]
    assert torch.allclose(got, want, atol=1e-12)


def test_context_means_are_prefix_means_over_real_tokens():
    x = torch.arange(12.0, dtype=torch.float64).view(1, 4, 3)
    real = torch.tensor([[True, False, True, True]])
    c = context_means(x, real, causal=True)
    torch.testing.assert_close(c[0, 1], x[0, 0])
    torch.testing.assert_close(c[0, 2], (x[0, 0] + x[0, 2]) / 2)
    torch.testing.assert_close(context_means(x, real, causal=False)[0, 0], (x[0, 0] + x[0, 2] + x[0, 3]) / 3)


def test_mha_rejects_metric_modes_and_explicit_scores_match_sdpa():
    model = tiny_model("mha", True)
    tokens = torch.randint(0, 11, (2, 9))
    with pytest.raises(ValueError, match="no option 'metric_mode'"):
        model(tokens, options=opts(model, "diagonal"))
    with pytest.raises(ValueError, match="takes ForwardOptions, not DamchaOptions"):
        model(tokens, options=DamchaOptions("diagonal"))
    fast = model(tokens).logits
    slow = model(tokens, need_intermediates=True).logits
    assert torch.allclose(fast, slow, atol=1e-12)


def test_unknown_metric_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown metric mode"):
        tiny_model()(torch.zeros(1, 3, dtype=torch.long), options=DamchaOptions("both"))


def test_inference_fold_memo_follows_weight_changes():
    model = tiny_model("damcha", True).requires_grad_(False)  # frozen: the only case the fold is memoised
    tokens = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        before = model(tokens).logits
        model.metric_source.generator.out.weight.mul_(1.5)  # an in-place change, as an optimiser step makes
        after = model(tokens).logits
        explicit = model(tokens, options=opts(model, explicit=True)).logits
    assert not torch.allclose(before, after)
    assert torch.allclose(after, explicit, atol=1e-10)
    with torch.no_grad():
        assert torch.allclose(model(tokens, options=opts(model, "diagonal")).logits,
                              model(tokens, options=opts(model, "diagonal", True)).logits, atol=1e-10)


def test_fold_is_fresh_after_a_fused_optimiser_step():
    """Fused Adam rewrites parameters without bumping their version counter: evaluation after a
    step must still use the new weights (a memo keyed on versions would not)."""
    model = tiny_model("damcha", True)
    tokens = torch.randint(0, 11, (2, 9))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    with torch.no_grad():
        model(tokens)  # an evaluation before the step
    model(tokens, targets=tokens).loss.backward()
    opt.step()
    with torch.no_grad():
        assert torch.allclose(model(tokens).logits, model(tokens, options=opts(model, explicit=True)).logits, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_chunked_inference_equals_unchunked(monkeypatch, mode):
    """Per-layer causal metrics at inference are built a chunk of tokens at a time; with chunks of
    5 tokens (several per sequence, crossing sequence boundaries) the outputs must not change."""
    import damcha.model.mechanisms.damcha.metric as metric

    model = tiny_model("damcha-unshared", True, pad_token=10)
    tokens = torch.randint(0, 10, (3, 13))
    tokens[1, 9:] = 10  # padding inside the batch
    with torch.no_grad():
        reference = model(tokens, options=opts(model, mode, True)).logits
        monkeypatch.setattr(metric, "CHUNK_TOKENS", 5)
        chunked = model(tokens, options=opts(model, mode)).logits
        monkeypatch.setattr(metric, "CHUNK_TOKENS", 1024)
        whole = model(tokens, options=opts(model, mode)).logits
    assert torch.allclose(chunked, reference, atol=1e-10)
    assert torch.allclose(whole, reference, atol=1e-10)


def test_the_identity_start_changes_only_fs_last_bias_and_starts_each_head_at_a_dot_product():
    """generator_start='identity' (an implementation choice, docs/evidence.md): the same random stream as
    the default start, with f's last bias at vec(I), so with the read-out silenced every m_i is I_d."""
    import dataclasses

    from damcha.model.transformer import build_model

    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=32)
    uniform = build_model(cfg, seed=0).state_dict()
    identity = build_model(dataclasses.replace(cfg, attention_options={"generator_start": "identity"}), seed=0)
    changed = [k for k, v in identity.state_dict().items() if not torch.equal(v, uniform[k])]
    assert changed == ["metric_source.generator.out.bias"]
    generator = identity.metric_source.generator
    assert torch.equal(generator.out.bias, torch.eye(32).flatten())
    with torch.no_grad():
        generator.out.weight.zero_()
    m = generator.fused_row_sum(torch.randn(3, 32), "full")  # (3, H, d, d)
    assert torch.equal(m, torch.eye(8).expand_as(m))
    assert cfg.setting("generator_start") == "uniform"  # every shipped run's start
