"""The paper's comparison systems (THA, DCMHA, ColMHA and the DAMCHA authors' versions), each
re-computed from its parameters with plain loops written here, plus the identities that tie them
to MHA, causality, padding invariance and gradients."""

import math

import numpy as np
import pytest
import torch

from damcha import build_model, inspect_input
from damcha.model.mechanisms import ForwardOptions, LayerCall, attention_mask
from tests.support.layers import D, H, allowed, config, d, lin, mha_twin, perturbed, softmax_rows

COMPARISON = ("tha", "tha-identity", "dcmha", "dcmha-authors", "colmha", "colmha-authors")


def reference(attn, variant, x, real, causal):
    """y (B, T, D) of one attention layer, from its parameters, loop by loop."""
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    v = lin(attn.value, x).reshape(B, T, H, d)
    out = np.zeros((B, T, H, d))
    for b in range(B):
        xb = x[b]
        if variant.startswith("colmha") and variant != "colmha-authors":
            qs, ks = lin(attn.query, xb), lin(attn.key, xb)  # (T, dk) shared
            m = attn.mixing.detach().numpy()
            wb = attn.content_bias.weight.detach().numpy()  # (H, D)
            dk = qs.shape[1]
            logits = np.array([[[np.sum(qs[t] * m[h] * ks[s]) / math.sqrt(dk / H) + xb[s] @ wb[h]
                                 for s in range(T)] for t in range(T)] for h in range(H)])
        else:
            q = lin(attn.query, xb).reshape(T, H, d)
            k = lin(attn.key, xb).reshape(T, H, d)
            if variant == "colmha-authors":  # their CollaborativeAttention: combine_q and combine_k
                Cq, Ck = attn.query_mixing.detach().numpy(), attn.key_mixing.detach().numpy()
                assert attn.query.bias is None and attn.key.bias is None
                q = np.array([[sum(Cq[h, j] * q[t, j] for j in range(H)) for h in range(H)] for t in range(T)])
                k = np.array([[sum(Ck[h, j] * k[t, j] for j in range(H)) for h in range(H)] for t in range(T)])
            logits = np.array([[[q[t, h] @ k[s, h] / math.sqrt(d) for s in range(T)] for t in range(T)]
                               for h in range(H)])  # (H, T, T)
        if variant.startswith("tha"):
            Pl, Pw = attn.logits_mix.detach().numpy(), attn.weights_mix.detach().numpy()
            mixed = np.array([sum(logits[h] * Pl[h, g] for h in range(H)) for g in range(H)])
            probs = np.array([[softmax_rows(mixed[g, t], ok[b, t]) for t in range(T)] for g in range(H)])
            weights = np.array([sum(probs[h] * Pw[h, g] for h in range(H)) for g in range(H)])
        elif variant == "dcmha":
            dw = {k: tuple(t[b].detach().numpy() for t in val) for k, val in attn.dynamic(torch.as_tensor(x)).items()}

            def comp(A, qu, ke, dw=dw):
                (qw1, qw2, qdd), (kw1, kw2, kdd) = dw[qu], dw[ke]
                C = A.copy()
                for t in range(T):
                    for s in range(T):
                        a = A[:, t, s]
                        C[:, t, s] += sum(qw2[t, r] * (qw1[t, r] @ a) for r in range(2))
                        C[:, t, s] += sum(kw2[s, r] * (kw1[s, r] @ a) for r in range(2))
                        C[:, t, s] += qdd[t] * a + kdd[s] * a
                return C

            pre = comp(logits, "pre_q", "pre_k")
            probs = np.array([[softmax_rows(pre[h, t], ok[b, t]) for t in range(T)] for h in range(H)])
            weights = comp(probs, "post_q", "post_k")
        elif variant == "dcmha-authors":
            R = attn.router.weight.shape[0]
            r = np.tanh(lin(attn.router, xb))  # (T, R)
            alpha = lin(attn.mix, r).reshape(T, H, H)  # their view (B, T, H_in, H_out), softmax over H_in
            alpha = np.exp(alpha - alpha.max(1, keepdims=True))
            alpha /= alpha.sum(1, keepdims=True)
            mix = alpha.transpose(0, 2, 1)  # mix[t, h_out, j] = alpha[t, j, h_out]
            g = 1 / (1 + np.exp(-lin(attn.gate, xb)))  # (T, H)
            assert R == 4
            blended = np.array([[(1 - g[t, h]) * logits[h, t] + g[t, h] * sum(mix[t, h, j] * logits[j, t] for j in range(H))
                                 for t in range(T)] for h in range(H)])
            weights = np.array([[softmax_rows(blended[h, t], ok[b, t]) for t in range(T)] for h in range(H)])
        else:
            weights = np.array([[softmax_rows(logits[h, t], ok[b, t]) for t in range(T)] for h in range(H)])
        for h in range(H):
            out[b, :, h] = weights[h] @ v[b, :, h]
    return lin(attn.proj, out.reshape(B, T, D))


@pytest.mark.parametrize("variant", COMPARISON)
@pytest.mark.parametrize("causal", [True, False])
def test_each_layer_equals_its_independent_recomputation_with_padding(variant, causal):
    model = perturbed(build_model(config(variant, causal), seed=0).double())
    attn = model.blocks[0].attn
    T = 6
    x = torch.randn(2, T, D, dtype=torch.float64)
    real = torch.tensor([[True] * T, [True] * 4 + [False] * 2])
    mask = attention_mask(real, causal, T, x.device)
    with torch.no_grad():
        y = attn(x, LayerCall(real, mask, causal, model.mechanism.options(None), need_weights=True)).y.numpy()
        y_fast = attn(x, LayerCall(real, mask, causal, model.mechanism.options(None))).y.numpy()
    ref = reference(attn, variant, x.numpy(), real.numpy(), causal)
    rows = real.numpy()  # padded queries' outputs are never used
    np.testing.assert_allclose(y[rows], ref[rows], atol=1e-10)
    np.testing.assert_allclose(y_fast[rows], ref[rows], atol=1e-10)


@pytest.mark.parametrize("variant", COMPARISON)
def test_future_tokens_never_change_earlier_outputs(variant):
    model = perturbed(build_model(config(variant), seed=0).double())
    a = torch.randint(0, 11, (1, 10))
    b = a.clone()
    b[0, 6:] = (b[0, 6:] + 3) % 11
    with torch.no_grad():
        la, lb = model(a).logits, model(b).logits
    assert torch.allclose(la[:, :6], lb[:, :6], atol=1e-12)
    assert not torch.allclose(la[:, 6:], lb[:, 6:])


@pytest.mark.parametrize("variant", (*COMPARISON, "mma", "moa", "moa-authors"))
@pytest.mark.parametrize("causal", [True, False])
def test_padding_changes_nothing_for_real_tokens(variant, causal):
    model = perturbed(build_model(config(variant, causal, pad_token=10), seed=0).double())
    tokens = torch.randint(0, 10, (1, 7))
    padded = torch.cat([tokens, torch.full((1, 3), 10)], dim=1)
    with torch.no_grad():
        plain, more = model(tokens).logits, model(padded).logits
    assert torch.allclose(plain, more[:, :7] if causal else more, atol=1e-10)


def test_tha_with_identity_mixing_is_mha():
    model, mha, state, missing = mha_twin("tha-identity")
    assert not missing
    mha.load_state_dict(state)
    tokens = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        assert torch.allclose(model(tokens).logits, mha(tokens).logits, atol=1e-12)


def test_dcmha_at_initialisation_is_mha_and_can_leave_it():
    model, mha, state, missing = mha_twin("dcmha")
    assert not missing
    mha.load_state_dict(state)
    tokens = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        assert torch.allclose(model(tokens).logits, mha(tokens).logits, atol=1e-12)
    model(tokens, targets=tokens).loss.backward()
    dyn = model.blocks[0].attn.dynamic
    assert dyn.out.grad[:, :, 1].abs().sum() > 0  # the zero w2 half gets a gradient: learning can start
    assert dyn.diagonal.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("causal", [True, False])
def test_dcmha_fused_path_gives_the_definitions_values_and_gradients(causal):
    """The fused path (no (B, H, T, S) tensor) against compose -> softmax -> compose, padding included."""
    model = perturbed(build_model(config("dcmha", causal), seed=0).double())
    attn = model.blocks[0].attn
    x = torch.randn(2, 7, D, dtype=torch.float64)
    real = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    mask = attention_mask(real, causal, 7, x.device)
    options = model.mechanism.options(None)
    grads = []
    for explicit in (False, True):
        attn.zero_grad()
        y = attn(x, LayerCall(real, mask, causal, options, need_weights=explicit)).y
        (y[real] ** 2).sum().backward()
        grads.append((y.detach(), {n: p.grad.clone() for n, p in attn.named_parameters()}))
    (fast, gf), (slow, gs) = grads
    np.testing.assert_allclose(fast[real].numpy(), slow[real].numpy(), atol=1e-10)
    for n in gs:
        np.testing.assert_allclose(gf[n].numpy(), gs[n].numpy(), atol=1e-9, err_msg=n)


@pytest.mark.parametrize("causal", [True, False])
def test_colmha_concatenate_equals_mha_with_matching_weights(causal):
    model, mha, _, _ = mha_twin("colmha", causal)
    perturbed(mha)
    shared = {k: v for k, v in mha.state_dict().items() if k in model.state_dict()}
    model.load_state_dict({**model.state_dict(), **shared})
    with torch.no_grad():
        for blk, ref in zip(model.blocks, mha.blocks):
            a, r = blk.attn, ref.attn
            a.query.weight.copy_(r.query.weight)
            a.key.weight.copy_(r.key.weight)
            # q_h.k_h with biases: the query bias times the key projection is a content bias on keys;
            # terms that depend on the query only cancel in the softmax.
            bq = r.query.bias.view(H, d)
            wk = r.key.weight.view(H, d, D)
            a.content_bias.weight.copy_(torch.einsum("hd,hdi->hi", bq, wk) / math.sqrt(d))
    tokens = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        assert torch.allclose(model(tokens).logits, mha(tokens).logits, atol=1e-10)


def test_colmha_authors_mixes_queries_and_keys_from_near_identity():
    torch.manual_seed(0)
    attn = build_model(config("colmha-authors"), seed=0).blocks[0].attn
    for C in (attn.query_mixing, attn.key_mixing):  # I + 0.01 N(0, 1), as their combine_q / combine_k
        off = (C - torch.eye(H)).detach()
        assert 0.002 < off.std() < 0.03 and off.abs().max() < 0.1
    assert attn.query.bias is None and attn.key.bias is None and attn.value.bias is not None
    with torch.no_grad():  # key mixing acts: mixing the keys changes the output (the old version had none)
        x = torch.randn(1, 5, D)
        options = ForwardOptions()
        before = attn(x, LayerCall(None, None, True, options)).y.clone()
        attn.key_mixing.copy_(torch.eye(H).flip(0))
        assert not torch.allclose(before, attn(x, LayerCall(None, None, True, options)).y)


@pytest.mark.parametrize("variant", COMPARISON)
def test_structures_are_inspectable_and_consistent(variant):
    model = perturbed(build_model(config(variant), seed=0))
    record = inspect_input(model, [1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    assert record.structures and all(np.isfinite(s.values).all() for s in record.structures)
    if variant.startswith("tha"):
        np.testing.assert_array_equal(record.structure("logits_mix").at(layer=1),
                                      model.blocks[1].attn.logits_mix.detach().numpy())
    if variant == "dcmha":  # the drawn per-token maps are what the layer applies
        s = record.structure("compose_norms")
        assert s.values.shape == (2, 5, 4) and (s.values > 0).all()
    if variant == "colmha":
        forms = record.structure("qk_forms").at(layer=0)  # (H, D, D)
        a = model.blocks[0].attn
        x = torch.randn(3, D)
        with torch.no_grad():
            q, k = a.query(x), a.key(x)
            for h in range(H):
                direct = (q * a.mixing[h]) @ k.T
                np.testing.assert_allclose(direct.numpy(), (x @ torch.as_tensor(forms[h]) @ x.T).numpy(), atol=1e-5)


def test_mechanism_settings_are_validated_and_reach_the_layers():
    small = build_model(config("colmha", attention_options={"colmha_dk": 8, "colmha_init": "uniform"}))
    assert small.blocks[0].attn.query.weight.shape == (8, D)
    assert small.num_parameters() == small.config.parameter_estimate()
    assert small.config.variant == "colmha (custom)"  # not the registered preset any more
    assert torch.equal(build_model(config("tha-identity")).blocks[1].attn.weights_mix.detach(), torch.eye(H))
    with pytest.raises(ValueError, match="has no settings"):
        config("tha", attention_options={"colmha_dk": 8})
    with pytest.raises(ValueError, match="tha_init must be one of"):
        config("tha", attention_options={"tha_init": "zeros"})


def test_cli_trains_a_comparison_variant_with_a_setting(tmp_path, capsys):
    import json

    from damcha.__main__ import main

    out = tmp_path / "run"
    args = ["train", "--dataset", "digits", "--variant", "colmha", "--option", "colmha_dk=16", "--n-layer", "1",
            "--n-embd", "16", "--epochs", "1", "--train-limit", "64", "--completion-images", "4",
            "--completion-samples", "1"]
    assert main([*args, "--out", str(out)]) == 0
    model = json.loads((out / "config.json").read_text())["model"]
    assert model["attention"] == "colmha" and model["attention_options"] == {"colmha_dk": 16, "colmha_init": "concatenate"}
    capsys.readouterr()
    assert main([*args, "--option", "nope=1", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "has no settings ['nope']" in err and "Traceback" not in err
