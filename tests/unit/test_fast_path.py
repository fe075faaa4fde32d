"""The fast path's building blocks against their definitions, values and gradients (float64).

Each rewrites a step of the maths for speed (written-out gradients, a reduction in place of an
einsum, plain means without padding); each must agree with the plain formula it replaces.
"""

import pytest
import torch

from damcha import MetricMode
from damcha.model.mechanisms.damcha.metric import block_scales, context_means, fold_rows, per_position_queries
from damcha.runs.allocator import keep_freed_memory
from tests.support.models import METRIC_VARIANTS, logits_and_grads, tiny_model

MODES = list(MetricMode)


def _value_and_grads(fn, *inputs):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    weights = torch.randn_like(out)  # a random linear read-out reaches every output entry
    grads = torch.autograd.grad((out * weights).sum(), leaves)
    return out.detach(), grads, weights


@pytest.mark.parametrize("e", [4, 12])  # e = d: row sum; e = D: bilinear rows
def test_per_position_queries_match_a_plain_matmul(e):
    x = torch.randn(2, 5, 3, 4, dtype=torch.float64)  # (B, T, H, d)
    m = torch.randn(2, 5, 3, 4, e, dtype=torch.float64)  # (B, T, H, d, e)
    fast, fast_grads, w = _value_and_grads(per_position_queries, x, m)
    xl, ml = x.clone().requires_grad_(True), m.clone().requires_grad_(True)
    plain = torch.einsum("bthp,bthpq->bthq", xl, ml)
    plain_grads = torch.autograd.grad((plain * w).sum(), [xl, ml])
    torch.testing.assert_close(fast, plain.detach(), atol=1e-12, rtol=0)
    for a, b in zip(fast_grads, plain_grads):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(per_position_queries, (x[:1, :2].requires_grad_(), m[:1, :2].requires_grad_()))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [None, 7])  # a bias (D*D,) and a weight (D*D, k)
def test_fold_rows_is_the_scaled_sum_over_column_heads(mode, k):
    H, d = 3, 2
    D = H * d
    shape = (D * D,) if k is None else (D * D, k)
    w = torch.randn(*shape, dtype=torch.float64)
    fast, fast_grads, r = _value_and_grads(lambda t: fold_rows(t, H, d, mode), w)
    wl = w.clone().requires_grad_(True)
    s = block_scales(H, mode, w)  # (H, H)
    plain = torch.einsum("ipjqk,ij->ipqk", wl.reshape(H, d, H, d, -1), s).reshape(H, d, -1)
    (plain_grad,) = torch.autograd.grad((plain * r).sum(), [wl])
    torch.testing.assert_close(fast, plain.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(fast_grads[0], plain_grad, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
def test_context_means_without_padding_equal_the_weighted_form(causal):
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    all_real = torch.ones(3, 7, dtype=torch.bool)
    torch.testing.assert_close(context_means(x, None, causal), context_means(x, all_real, causal), atol=1e-14, rtol=0)


@pytest.mark.parametrize("variant", METRIC_VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("mode", [m.value for m in MODES])
def test_fast_and_explicit_paths_agree_under_padding(variant, causal, mode):
    """Padding inside the batch (a boolean attention mask, context means over real tokens only)."""
    model = tiny_model(variant, causal, pad_token=10)
    tokens = torch.randint(0, 10, (3, 12))
    tokens[0, 7:] = 10
    tokens[2, 3:] = 10
    targets = torch.randint(0, 10, (3, 12)) if causal else torch.randint(0, 5, (3,))
    lf, gf = logits_and_grads(model, tokens, targets, mode, explicit=False)
    le, ge = logits_and_grads(model, tokens, targets, mode, explicit=True)
    torch.testing.assert_close(lf, le, atol=1e-10, rtol=0)
    assert gf.keys() == ge.keys()
    for name in gf:
        torch.testing.assert_close(gf[name], ge[name], atol=1e-10, rtol=0, msg=name)


def test_keep_freed_memory_applies_on_glibc():
    import platform

    applied = keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert applied
    x = torch.randn(4096, 4096)  # 64 MB: allocation and arithmetic still work
    assert torch.isfinite(x @ x[:, :8]).all()
