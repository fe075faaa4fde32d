"""MMA and MoA (and the DAMCHA authors' MoA) against recomputations written here; causality for every
head type and expert; padding; gradients; the auxiliary losses; the top-k selection."""

import math

import numpy as np
import pytest
import torch

from damcha import build_model, inspect_input
from damcha.model.mechanisms import LayerCall, attention_mask
from damcha.model.mechanisms.mma import TYPES, head_types
from tests.support.layers import D, H, allowed, config, d, lin, perturbed, softmax_rows

VARIANTS = ("mma", "moa", "moa-authors")


def mma_reference(attn, x, real, causal, window=5):
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    types = head_types(H)
    out = np.zeros((B, T, H, d))
    for b in range(B):
        q, k, v = (lin(m, x[b]).reshape(T, H, d) for m in (attn.query, attn.key, attn.value))
        for h in range(H):
            kind = TYPES[types[h]]
            for t in range(T):
                sees = np.array([ok[b, t, s] and {"global": True, "local": abs(s - t) <= window // 2,
                                                   "forward": s <= t, "backward": s >= t}[kind] for s in range(T)])
                if not sees.any():
                    sees[t] = True
                w = softmax_rows(np.array([q[t, h] @ k[s, h] / math.sqrt(d) for s in range(T)]), sees)
                out[b, t, h] = w @ v[:, h]
    return lin(attn.proj, out.reshape(B, T, D))


def moa_reference(attn, x, real, causal):
    """MoA (Zhang et al. 2022): shared K, V; top-k softmax gates, not renormalised; one W_o^i per expert."""
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    E, kk = attn.E, attn.k
    Wo = attn.out.detach().numpy()
    y = np.zeros((B, T, D))
    for b in range(B):
        logits = lin(attn.router, x[b])  # (T, E)
        q = lin(attn.query, x[b]).reshape(T, E, d)
        k, v = lin(attn.key, x[b]), lin(attn.value, x[b])  # (T, d): one head for every expert
        for t in range(T):
            p = np.exp(logits[t] - logits[t].max())
            p /= p.sum()
            chosen = np.argsort(-p)[:kk]
            for e in chosen:
                w = softmax_rows(np.array([q[t, e] @ k[s] / math.sqrt(d) for s in range(T)]), ok[b, t])
                y[b, t] += p[e] * ((w @ v) @ Wo[e])
        y[b] += attn.out_bias.detach().numpy()
    return y


def moa_authors_reference(attn, x, real, causal):
    """The DAMCHA authors' MoAAttention (models/baselines.py at ffa99807), read and rewritten here as loops:
    router with bias; top-k logits, softmax over them; every expert's own Q, K, V (x @ W[e], no bias);
    the gated outputs of the chosen experts concatenated in rank order into one Linear(k d, D)."""
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    E, kk = attn.E, attn.k
    Wq, Wk, Wv = (w.detach().numpy() for w in (attn.query, attn.key, attn.value))  # (E, D, d)
    y = np.zeros((B, T, D))
    for b in range(B):
        logits = lin(attn.router, x[b])  # (T, E)
        for t in range(T):
            ranked = sorted(range(E), key=lambda e: -logits[t, e])[:kk]
            top = np.array([logits[t, e] for e in ranked])
            g = np.exp(top - top.max())
            g /= g.sum()
            slots = []
            for r, e in enumerate(ranked):
                q = x[b, t] @ Wq[e]
                w = softmax_rows(np.array([q @ (x[b, s] @ Wk[e]) / math.sqrt(d) for s in range(T)]), ok[b, t])
                slots.append(g[r] * sum(w[s] * (x[b, s] @ Wv[e]) for s in range(T)))
            y[b, t] = lin(attn.out, np.concatenate(slots))
    return y


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
def test_layer_equals_its_independent_recomputation_with_padding(variant, causal):
    model = perturbed(build_model(config(variant, causal), seed=0).double())
    attn = model.blocks[0].attn
    T = 7
    x = torch.randn(2, T, D, dtype=torch.float64)
    real = torch.tensor([[True] * T, [True] * 5 + [False] * 2])
    with torch.no_grad():
        y = attn(x, LayerCall(real, attention_mask(real, causal, T, x.device), causal, model.mechanism.options(None))).y.numpy()
    ref = {"mma": mma_reference, "moa": moa_reference, "moa-authors": moa_authors_reference}[variant](
        attn, x.numpy(), real.numpy(), causal)
    rows = real.numpy()
    np.testing.assert_allclose(y[rows], ref[rows], atol=1e-10)


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_head_type_and_no_expert_sees_the_future(variant):
    model = perturbed(build_model(config(variant), seed=0).double()).eval()  # no sampling (MoA noise) in evaluation
    a = torch.randint(0, 11, (1, 10))
    b = a.clone()
    b[0, 5:] = (b[0, 5:] + 4) % 11
    with torch.no_grad():
        ra, rb = (model(t, need_intermediates=True) for t in (a, b))
    assert torch.allclose(ra.logits[:, :5], rb.logits[:, :5], atol=1e-12)
    for la, lb in zip(ra.layers, rb.layers):  # per head (and per expert): earlier rows untouched
        assert torch.allclose(la.weights[..., :5, :], lb.weights[..., :5, :], atol=1e-12)
        assert la.weights[..., :5, 5:].abs().max() == 0


def test_mma_masks_in_a_decoder_and_in_a_classifier():
    decoder = inspect_input(build_model(config("mma", True), seed=0), list(range(8)))
    masks = decoder.structure("head_masks").values  # (H, T, T)
    lower = np.tril(np.ones((8, 8), dtype=bool))
    types = [TYPES[t] for t in head_types(H)]
    assert types == ["global", "local", "forward", "backward"]
    np.testing.assert_array_equal(masks[types.index("forward")], masks[types.index("global")])  # equal in a decoder
    np.testing.assert_array_equal(masks[types.index("backward")], np.eye(8, dtype=bool))  # only the query itself
    assert not (masks & ~lower).any()  # never a future key
    assert any("backward heads can only see the query itself" in n for n in decoder.notes)
    encoder = inspect_input(build_model(config("mma", False), seed=0), list(range(8)), 1)
    m = encoder.structure("head_masks").values
    assert len({m[h].tobytes() for h in range(H)}) == 4  # four different types without the causal mask
    np.testing.assert_array_equal(m[types.index("backward")], np.triu(np.ones((8, 8), dtype=bool)))


def test_moa_auxiliary_losses_equal_a_direct_computation():
    """Each balance term as the official MoA code writes it (moe.py's compute_switchloss and
    compute_cvloss), and the project's former cv-load pair, recomputed here with numpy."""
    torch.manual_seed(0)
    assert build_model(config("moa")).blocks[0].attn.aux["balance"] == "switch"  # the official run's choice
    for balance in ("switch", "cv", "cv-load"):
        options = {"moa_balance": balance, "moa_balance_weight": 0.3, "moa_z_weight": 0.05}
        model = perturbed(build_model(config("moa", attention_options=options), seed=0).double())
        tokens = torch.randint(0, 11, (3, 9))
        out = model(tokens, targets=tokens, stochastic=False)  # the clean logits (no gating noise)
        x = model.tok_emb(tokens) + model.pos_emb(torch.arange(9))
        expected = 0.0
        for block in model.blocks:  # replay the stack to get each layer's router input
            logits = block.attn.router(block.ln_1(x)).reshape(-1, 8).detach().numpy()
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            top = np.argsort(-p, axis=1)[:, :4]
            gates = np.zeros_like(p)
            np.put_along_axis(gates, top, np.take_along_axis(p, top, 1), 1)
            freqs = (gates > 0).sum(0).astype(float)
            if balance == "switch":  # E * sum(normalize(probs.sum(0), p=1) * normalize(freqs, p=1))
                bal = 8 * np.sum(p.sum(0) / p.sum() * freqs / freqs.sum())
            elif balance == "cv":  # cv_squared(normalize(gates.sum(0), p=1)), torch's unbiased variance
                imp = gates.sum(0) / gates.sum()
                bal = imp.var(ddof=1) / (imp.mean() ** 2 + 1e-10)
            else:
                def cv2(v):
                    return v.var() / (v.mean() ** 2 + 1e-10)
                bal = cv2(gates.sum(0)) + cv2(freqs)
            z = (np.log(np.exp(logits).sum(1)) ** 2).mean()
            expected += 0.3 * bal + 0.05 * z
            x = block(x, LayerCall(None, None, True, model.mechanism.options(None)))[0]
        assert out.aux_loss.item() == pytest.approx(expected, rel=1e-6)
        assert out.loss.item() == pytest.approx(out.task_loss.item() + expected, rel=1e-9)
    with torch.no_grad():
        assert model(tokens, targets=tokens).aux_loss is None  # only training adds them
    assert build_model(config("moa-authors"))(tokens, targets=tokens).aux_loss is None


def test_moa_authors_slot_weights_serve_whichever_expert_ranks_there():
    model = perturbed(build_model(config("moa-authors"), seed=0).double())
    attn = model.blocks[0].attn
    assert attn.out.weight.shape == (D, attn.k * d) and attn.router.bias is not None
    assert all(not isinstance(m, torch.nn.Linear) or m is attn.out or m is attn.router for m in attn.modules())
    x = torch.randn(1, 6, D, dtype=torch.float64)
    options = model.mechanism.options(None)
    with torch.no_grad():
        rec = attn(x, LayerCall(None, None, True, options, need_weights=True))
        slots = rec.internals["slots"][0]  # (T, k), best first
        before = rec.y.clone()
        attn.out.weight[:, d:].zero_()  # slot 2..k silenced: only each token's best expert is left
        only_first = attn(x, LayerCall(None, None, True, options)).y
    assert not torch.allclose(before, only_first) and slots.shape == (6, attn.k)
    assert len({int(e) for e in slots[:, 0]}) > 1  # one slot-1 weight served different experts in this input


def test_an_unchosen_expert_contributes_exactly_nothing():
    model = perturbed(build_model(config("moa"), seed=0).double())
    attn = model.blocks[0].attn
    x = torch.randn(1, 6, D, dtype=torch.float64)
    options = model.mechanism.options(None)
    with torch.no_grad():
        gates = attn(x, LayerCall(None, None, True, options, need_weights=True)).internals["gates"][0]  # (T, E)
        t = 3
        unchosen = int((gates[t] == 0).nonzero()[0])
        assert (gates[t] > 0).sum() == attn.k
        before = attn(x, LayerCall(None, None, True, options)).y[0, t].clone()
        attn.out[unchosen].mul_(1000)
        attn.query.weight.view(attn.E, d, D)[unchosen].mul_(-50)
        after = attn(x, LayerCall(None, None, True, options)).y[0, t]
    assert torch.equal(before, after)


def test_moa_structures_describe_the_routing():
    record = inspect_input(perturbed(build_model(config("moa"), seed=0)), list(range(9)), list(range(1, 10)))
    gates = record.structure("gates").values  # (L, T, E)
    assert ((gates > 0).sum(-1) == 4).all()
    co = record.structure("co_selection").at(layer=0)
    np.testing.assert_allclose(np.diag(co), record.structure("experts_used").at(layer=0)[0])
    np.testing.assert_allclose(np.diag(co).sum(), 4)  # each token chose four experts


def test_moa_official_router_starts_at_zero_and_gates_on_noisy_logits_in_training():
    """The official code's noisy top-k gating, recomputed: logits x W_g + ε (softplus(x W_noise) + 0.01),
    softmax, top k (not renormalised); in evaluation the clean logits."""
    model = perturbed(build_model(config("moa"), seed=0).double())
    fresh = build_model(config("moa"), seed=0)
    assert all(float(b.attn.router.weight.abs().max()) == 0 and float(b.attn.noise.weight.abs().max()) == 0
               for b in fresh.blocks)
    attn = model.blocks[0].attn
    x = torch.randn(2, 7, D, dtype=torch.float64)
    options = model.mechanism.options(None)
    E, k = attn.E, attn.k

    def reference(eps):
        xs = x.numpy()
        clean = xs @ attn.router.weight.detach().numpy().T
        scale = np.log1p(np.exp(xs @ attn.noise.weight.detach().numpy().T)) + 0.01
        logits = clean + (0 if eps is None else eps * scale)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        gates = np.zeros_like(probs)
        for b in range(2):
            for t in range(7):
                top = np.argsort(-probs[b, t])[:k]
                gates[b, t, top] = probs[b, t, top]
        return gates

    torch.manual_seed(5)
    noisy = attn(x, LayerCall(None, None, True, options, need_weights=True, stochastic=True)).internals["gates"].detach().numpy()
    torch.manual_seed(5)
    eps = torch.randn(2, 7, E, dtype=torch.float64).numpy()  # the layer's first draw (its dropout is 0 here)
    np.testing.assert_allclose(noisy, reference(eps), atol=1e-12)
    clean = attn(x, LayerCall(None, None, True, options, need_weights=True)).internals["gates"].detach().numpy()
    np.testing.assert_allclose(clean, reference(None), atol=1e-12)
    assert np.abs(noisy - clean).max() > 1e-3  # negative control: the noise changes the gates


def test_moa_random_router_keeps_the_earlier_start_without_noise():
    model = build_model(config("moa", attention_options={"moa_router": "random"}), seed=0)
    attn = model.blocks[0].attn
    assert attn.noise is None and float(attn.router.weight.abs().max()) > 0
