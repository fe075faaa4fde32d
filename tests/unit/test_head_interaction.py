"""The head-interaction mechanisms newer than the paper (differential attention, interleaved head
attention, knocking heads), each re-computed from its definition with plain loops written here:
causal and not, with padding; the identities that tie them to MHA; λ's depth schedule."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from damcha import ModelConfig, build_model, inspect_input, variant_config
from damcha.model.mechanisms import LayerCall, attention_mask
from tests.support.layers import D, H, allowed, config, d, lin, mha_twin, perturbed, softmax_rows

VARIANTS = ("diff", "iha", "knocking")


def diff_reference(attn, x, real, causal):
    """A_h = softmax(Q1 K1ᵀ/√d') − λ softmax(Q2 K2ᵀ/√d'); O_h = (1 − λ_init) RMSNorm(A_h V_h); λ per layer."""
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    H, e = attn.n_head, attn.half_width  # differential heads (n_head, or half under the official protocol), map width
    d = 2 * e
    p = {n: getattr(attn, n).detach().numpy() for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")}
    lam = np.exp((p["lambda_q1"] * p["lambda_k1"]).sum(-1)) - np.exp((p["lambda_q2"] * p["lambda_k2"]).sum(-1)) \
        + attn.lambda_init  # (1|H,)
    g = attn.norm.weight.detach().numpy()
    out = np.zeros((B, T, H, d))
    for b in range(B):
        q, k = lin(attn.query, x[b]).reshape(T, 2 * H, e), lin(attn.key, x[b]).reshape(T, 2 * H, e)
        v = lin(attn.value, x[b]).reshape(T, H, d)
        for h in range(H):
            lh = lam[h if len(lam) > 1 else 0]
            for t in range(T):
                a1 = softmax_rows(np.array([q[t, 2 * h] @ k[s, 2 * h] / math.sqrt(e) for s in range(T)]), ok[b, t])
                a2 = softmax_rows(np.array([q[t, 2 * h + 1] @ k[s, 2 * h + 1] / math.sqrt(e) for s in range(T)]), ok[b, t])
                o = sum((a1[s] - lh * a2[s]) * v[s, h] for s in range(T))
                out[b, t, h] = o / np.sqrt((o ** 2).mean() + 1e-5) * g * (1 - attn.lambda_init)
    return lin(attn.proj, out.reshape(B, T, D))


def iha_reference(attn, x, real, causal):
    """P pseudo-heads per head mixed from all heads; attention over the pseudo-tokens of the visible tokens
    (flat mask: pseudo-token (t, p) sees (s, r) only at places s P + r <= t P + p); collapse."""
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    P = attn.P
    mq, mk, mv = (m.detach().numpy() for m in (attn.mix_q, attn.mix_k, attn.mix_v))  # (H, H, P)
    c = attn.collapse.detach().numpy()  # (H, P)
    out = np.zeros((B, T, H, d))
    for b in range(B):
        q, k, v = (lin(m, x[b]).reshape(T, H, d) for m in (attn.query, attn.key, attn.value))
        for h in range(H):
            pq = {(t, p): sum(mq[h, j, p] * q[t, j] for j in range(H)) for t in range(T) for p in range(P)}
            pk = {(t, p): sum(mk[h, j, p] * k[t, j] for j in range(H)) for t in range(T) for p in range(P)}
            pv = {(t, p): sum(mv[h, j, p] * v[t, j] for j in range(H)) for t in range(T) for p in range(P)}
            keys = [(s, r) for s in range(T) for r in range(P)]
            for t in range(T):
                for p in range(P):
                    sees = np.array([real[b][s] and (not causal or not attn.flat or s * P + r <= t * P + p)
                                     if attn.flat else ok[b, t, s] for s, r in keys])
                    w = softmax_rows(np.array([pq[t, p] @ pk[key] / math.sqrt(d) for key in keys]), sees)
                    out[b, t, h] += c[h, p] * sum(wi * pv[key] for wi, key in zip(w, keys))
    return lin(attn.proj, out.reshape(B, T, D))


def knocking_reference(attn, x, real, causal):
    """MHA with every head's q, k, v multiplied by the layer's shared d x d matrices where it has them."""
    B, T, _ = x.shape
    ok = allowed(real, causal, T)
    K = {t: attn.knock[t].detach().numpy() for t in attn.knock}
    out = np.zeros((B, T, H, d))
    for b in range(B):
        qkv = {n: lin(m, x[b]).reshape(T, H, d) for n, m in zip("qkv", (attn.query, attn.key, attn.value))}
        for n in K:
            qkv[n] = np.array([[qkv[n][t, h] @ K[n] for h in range(H)] for t in range(T)])
        if attn.value_mlp is not None:  # v + (SiLU(v W_gate) * (v W_up)) W_down, per head and token
            g, u, dn = (getattr(attn.value_mlp, n).detach().numpy() for n in ("gate", "up", "down"))
            silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
            qkv["v"] = np.array([[v + (silu(v @ g) * (v @ u)) @ dn for v in qkv["v"][t]] for t in range(T)])
        for h in range(H):
            for t in range(T):
                w = softmax_rows(np.array([qkv["q"][t, h] @ qkv["k"][s, h] / math.sqrt(d) for s in range(T)]), ok[b, t])
                out[b, t, h] = w @ qkv["v"][:, h]
    return lin(attn.proj, out.reshape(B, T, D))


REFERENCES = {"diff": diff_reference, "iha": iha_reference, "knocking": knocking_reference}
IHA_AS_MHA = {"iha_mask": "token", "iha_start": "mha"}  # the settings under which IHA starts as MHA
SETTINGS = {"diff": [{}, {"diff_lambda": "head"}, {"diff_heads": "half"}, {"diff_heads": "half", "diff_lambda": "head"}],
            "iha": [{}, {"iha_pseudo": 2}, IHA_AS_MHA, {"iha_mask": "token", "iha_pseudo": 3}],
            "knocking": [{}, {"knock_targets": "qkv"}, {"knock_form": "mlp"}, {"knock_form": "mlp", "knock_targets": "qkv"}]}


@pytest.mark.parametrize("variant,options", [(v, o) for v in VARIANTS for o in SETTINGS[v]])
@pytest.mark.parametrize("causal", [True, False])
def test_layer_equals_its_recomputation_from_the_definition(variant, options, causal):
    model = perturbed(build_model(config(variant, causal, **({"attention_options": options} if options else {})), seed=0).double())
    attn = model.blocks[1].attn
    T = 6
    x = torch.randn(2, T, D, dtype=torch.float64)
    real = torch.tensor([[True] * T, [True] * 4 + [False] * 2])
    mask = attention_mask(real, causal, T, x.device)
    with torch.no_grad():
        slow = attn(x, LayerCall(real, mask, causal, model.mechanism.options(None), need_weights=True)).y.numpy()
        fast = attn(x, LayerCall(real, mask, causal, model.mechanism.options(None))).y.numpy()
    ref = REFERENCES[variant](attn, x.numpy(), real.numpy(), causal)
    rows = real.numpy()
    np.testing.assert_allclose(slow[rows], ref[rows], atol=1e-10)
    np.testing.assert_allclose(fast[rows], ref[rows], atol=1e-10)


@pytest.mark.parametrize("variant,options", [("iha", IHA_AS_MHA), ("knocking", {}), ("knocking", {"knock_form": "mlp"})])
@pytest.mark.parametrize("causal", [True, False])
def test_at_initialisation_it_is_mha_and_the_intervention_restores_mha(variant, options, causal):
    model, mha, state, missing = mha_twin(variant, causal, attention_options=options)
    assert not missing
    mha.load_state_dict(state)
    tokens = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        assert torch.allclose(model(tokens).logits, mha(tokens).logits, atol=1e-10)
        perturbed(model)
        mha.load_state_dict({k: v for k, v in model.state_dict().items() if k in mha.state_dict()})
        moved = model(tokens).logits
        off = model(tokens, options=model.mechanism.interventions(model.config)[0].make(model, tokens)).logits
    assert not torch.allclose(moved, mha(tokens).logits, atol=1e-6)  # the learned mixes matter
    assert torch.allclose(off, mha(tokens).logits, atol=1e-10)


def test_differential_lambda_follows_the_depth_schedule_and_maps_subtract():
    model = build_model(config("diff", n_layer=3), seed=0)
    inits = [b.attn.lambda_init for b in model.blocks]
    assert inits == pytest.approx([0.8 - 0.6 * math.exp(-0.3 * i) for i in range(3)])
    assert inits[0] == pytest.approx(0.2)
    for b in model.blocks:
        assert b.attn.query.bias is None and b.attn.proj.bias is None
        assert b.attn.lambdas().shape == (1,)
    record = inspect_input(model, list(range(7)), list(range(1, 8)))
    first, second = record.structure("first_maps").values, record.structure("second_maps").values
    lam = record.structure("lambda").values  # (L, 1)
    np.testing.assert_allclose(record.structure("differential_maps").values, first - lam[:, :, None, None] * second,
                               atol=1e-6)
    np.testing.assert_allclose(first.sum(-1), 1, atol=1e-5)
    np.testing.assert_allclose(record.attention[0], record.structure("differential_maps").values[0], atol=1e-6)
    per_head = build_model(config("diff", attention_options={"diff_lambda": "head"}), seed=0)
    assert per_head.blocks[0].attn.lambdas().shape == (H,)
    with pytest.raises(ValueError, match="must be even"):
        config("diff", n_head=16)  # head width 1


def test_iha_structures_fold_the_interleaved_attention():
    model = perturbed(build_model(config("iha"), seed=0))
    record = inspect_input(model, list(range(6)), list(range(1, 7)))
    folded = record.attention[0]  # (H, T, T)
    c = model.blocks[0].attn.collapse.detach().numpy().sum(-1)  # (H,): each row of head h sums to sum_p c[h, p]
    np.testing.assert_allclose(folded.sum(-1), np.broadcast_to(c[:, None], folded.shape[:2]), rtol=1e-5)
    assert (np.triu(folded[0], 1) == 0).all()  # no future token, through any pseudo-slot
    np.testing.assert_allclose(record.structure("slot_attention").values.sum(-1), 1, atol=1e-5)
    coupling = record.structure("coupling_q").at(layer=0)  # (P, H, H)
    np.testing.assert_array_equal(coupling, model.blocks[0].attn.mix_q.detach().numpy().transpose(2, 0, 1))


def test_knocking_shares_parameters_but_never_mixes_heads():
    model = perturbed(build_model(config("knocking", attention_options={"knock_targets": "qkv"}), seed=0).double())
    attn = model.blocks[0].attn
    assert set(attn.knock) == {"q", "k", "v"} and attn.knock["v"].shape == (d, d)
    x = torch.randn(1, 5, D, dtype=torch.float64)
    options = model.mechanism.options(None)
    with torch.no_grad():  # head 1's output (before the projection) depends on head 1's slices only
        heads = {}
        for name in ("before", "after"):
            captured = {}
            hook = attn.proj.register_forward_hook(lambda m, i, o, c=captured: c.setdefault("in", i[0].clone()))
            try:
                attn(x, LayerCall(None, None, True, options))
            finally:
                hook.remove()
            heads[name] = captured["in"].view(1, 5, H, d)
            for lin_ in (attn.query, attn.key, attn.value):
                lin_.weight.view(H, d, D)[2].mul_(3.0)  # change head 3's projections only
    assert torch.allclose(heads["before"][..., [0, 1, 3], :], heads["after"][..., [0, 1, 3], :], atol=1e-12)
    assert not torch.allclose(heads["before"][..., 2, :], heads["after"][..., 2, :])


def _slot_spread_after_training(options: dict) -> float:
    """The issue's repro: 40 Adam steps at 1e-2 on random tokens, dropout 0; the largest difference
    between a pseudo-slot's mixes and slot 1's."""
    cfg = dataclasses.replace(variant_config(ModelConfig(vocab_size=11, block_size=8, n_layer=2, n_head=4, n_embd=16,
                                                         dropout=0.0), "iha"), attention_options=options)
    model = build_model(cfg, seed=0)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        loss = model(torch.randint(0, 11, (8, 8), generator=g), targets=torch.randint(0, 11, (8, 8), generator=g)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return max((m - m[..., :1]).abs().max().item() for b in model.blocks for m in (b.attn.mix_q, b.attn.mix_k, b.attn.mix_v))


@pytest.mark.parametrize("options", [{}, {"iha_mask": "token"}, {"iha_start": "mha"}])
def test_iha_slots_separate_from_the_papers_start_without_dropout(options):
    """The flat mask, or the start that selects one pseudo-head, each break the slots' symmetry."""
    assert _slot_spread_after_training(options) > 0.05


def test_iha_slots_stay_interchangeable_under_the_token_mask_and_the_mha_start():
    """Negative control: the symmetry the issue found (slots identical after training)."""
    assert _slot_spread_after_training(IHA_AS_MHA) < 1e-12


def test_a_run_saved_before_the_iha_settings_loads_as_it_was_trained(tmp_path):
    from damcha.model.config import with_saved_defaults

    old = variant_config(config("iha"), "iha").to_dict()
    assert old["attention_options"] == {"iha_mask": "flat", "iha_start": "paper"}  # named from now on
    del old["attention_options"]
    loaded = ModelConfig.from_dict(with_saved_defaults(old))
    assert (loaded.setting("iha_mask"), loaded.setting("iha_start")) == ("token", "mha")
    assert ModelConfig.from_dict(with_saved_defaults(variant_config(config("iha"), "iha").to_dict())).setting(
        "iha_mask") == "flat"


def test_diff_official_protocol_has_half_the_heads_each_map_at_mhas_head_width():
    model = build_model(config("diff-official"), seed=0)
    attn = model.blocks[0].attn
    assert model.config.variant == "diff-official" and build_model(config("diff")).config.variant == "diff"
    assert (attn.n_head, attn.half_width) == (H // 2, d)  # maps score with d-wide queries, values 2d wide
    assert sum(getattr(attn, n).weight.numel() for n in ("query", "key", "value", "proj")) == 4 * D * D  # MHA's
    assert model.mechanism.head_output_site(attn, model.config) is None  # n_head slices would cut its heads in two


def test_a_knocking_reference_without_the_value_mlp_misses_it():
    """Negative control: the recomputation above fails when it skips the MLP the layer applies."""
    model = perturbed(build_model(config("knocking", attention_options={"knock_form": "mlp"}), seed=0).double())
    attn = model.blocks[0].attn
    x = torch.randn(1, 5, D, dtype=torch.float64)
    with torch.no_grad():
        y = attn(x, LayerCall(None, None, True, model.mechanism.options(None))).y.numpy()
    mlp, attn.value_mlp = attn.value_mlp, None
    skipped = knocking_reference(attn, x.numpy(), np.ones((1, 5), bool), True)
    attn.value_mlp = mlp
    assert np.abs(y - skipped).max() > 1e-3
    np.testing.assert_allclose(y, knocking_reference(attn, x.numpy(), np.ones((1, 5), bool), True), atol=1e-10)


def test_a_reference_that_reads_diff_official_with_the_default_layout_is_caught():
    """Negative control: recomputed as if its heads were n_head half-width ones (the `diff` layout),
    a diff-official layer does not match; recomputed with its own layout, it does."""
    from types import SimpleNamespace

    model = perturbed(build_model(config("diff-official"), seed=0).double())
    attn = model.blocks[1].attn
    x = torch.randn(1, 6, D, dtype=torch.float64)
    real = np.ones((1, 6), bool)
    with torch.no_grad():
        y = attn(x, LayerCall(None, None, True, model.mechanism.options(None))).y.numpy()
    wrong = SimpleNamespace(**{n: getattr(attn, n) for n in ("query", "key", "value", "proj", "lambda_q1", "lambda_k1",
                                                             "lambda_q2", "lambda_k2", "lambda_init")},
                            n_head=H, half_width=d // 2, norm=SimpleNamespace(weight=torch.ones(d, dtype=torch.float64)))
    assert np.abs(y - diff_reference(wrong, x.numpy(), real, True)).max() > 1e-3
    np.testing.assert_allclose(y, diff_reference(attn, x.numpy(), real, True), atol=1e-10)
