"""torch.compile(fullgraph=True) captures every registered mechanism whole — forward and backward,
with and without padding, decoder and classifier — or the mechanism declares why it cannot
(`Mechanism.graph_break`) and is held to it. Captured with the aot_eager backend (AOTAutograd traces
the backward too, without generating code, so the walk takes seconds); inductor's generated code is
checked against eager for DAMCHA's training step (the train CLI's --compile) at the end."""

import pytest
import torch

from damcha import ModelConfig, variant_config, variant_names
from damcha.model.transformer import build_model
from tests.support.models import tiny_model

PAD = 10


def _case(variant: str, causal: bool, padded: bool):
    base = ModelConfig(n_layer=1, n_head=4, n_embd=16, attention_options={"generator_widths": (8,)}, block_size=12, vocab_size=11,
                       causal=causal, n_classes=0 if causal else 3, pad_token=PAD if padded else None)
    model = build_model(variant_config(base, variant), seed=0)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, PAD, (3, 12), generator=g)
    if padded:
        x[0, -4:] = PAD  # a padded tail: the masks stay in the graph
    y = torch.randint(0, PAD, (3, 12), generator=g) if causal else torch.randint(0, 3, (3,), generator=g)
    return model, x, y


def _loss_and_grads(model, x, y):
    model.zero_grad(set_to_none=True)
    out = model(x, targets=y, stochastic=False)  # the same computation both ways (MoA's noisy routing draws)
    out.loss.backward()
    return out.loss.detach(), {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()
                               if p.grad is not None}


# Both heads and both mask paths in two cases: a decoder without padding (no masks), a classifier with it.
CASES = {"decoder": (True, False), "padded-classifier": (False, True)}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", variant_names())
def test_every_mechanism_compiles_as_one_graph(variant, case):
    causal, padded = CASES[case]
    model, x, y = _case(variant, causal, padded)
    why = model.mechanism.graph_break
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    if why:  # a declared break must be real: the whole-graph capture fails, a capture with breaks works
        with pytest.raises(Exception):  # noqa: B017 — dynamo raises several types for an unsupported construct
            compiled(x, targets=y)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="aot_eager")
    eager_loss, eager_grads = _loss_and_grads(model, x, y)
    loss, grads = _loss_and_grads(compiled, x, y)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == eager_grads.keys() and grads
    for name in grads:
        torch.testing.assert_close(grads[name], eager_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_compiled_training_step_matches_eager():
    """torch.compile (the train CLI's --compile) must change speed only: same loss and gradients."""
    model = tiny_model("damcha", True, dtype=torch.float32, dropout=0.0)
    tokens = torch.randint(0, 11, (4, 12))
    compiled = torch.compile(model)
    results = []
    for m in (model, compiled):
        model.zero_grad()
        loss = m(tokens, targets=tokens).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (le, ge), (lc, gc) = results
    torch.testing.assert_close(lc, le, atol=1e-5, rtol=1e-5)
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
