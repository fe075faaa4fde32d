"""Gradient contributions with captum: of each entry of M(x) to the loss, and of each input token
to the loss or to a scalar of M(x).

Captum attaches hooks to the module it attributes. The model the app serves is shared by
every session, so every function here works on a private copy of it: the hooks live and die
on that copy inside one call (captum removes them in `finally`), and the shared model is
never touched.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from damcha.inputs.modalities import modality_named
from damcha.model.batching import as_model_input
from damcha.model.mechanisms import metric_access_of
from damcha.model.transformer import Transformer, sequence_losses

TARGETS = ("loss", "off_diagonal_energy", "block_norm", "head_metric_norm")
TARGET_NAMES = {"loss": "the loss", "off_diagonal_energy": "off-diagonal energy of M(x)",
                "block_norm": "one block's norm ‖M_ij‖", "head_metric_norm": "one head's ‖m_i‖"}


def attribution_targets(config) -> tuple[str, ...]:
    """What Integrated Gradients can explain for this model: the loss, and scalars of M(x) when the
    metric depends on the input."""
    if config.mechanism.metric(config) == "adaptive":
        return TARGETS
    return ("loss",)


def baseline_description(config) -> str:
    """What the Integrated-Gradients baseline of this model's inputs is, in words."""
    return modality_named(config.modality).blank_description


def baseline_token(config) -> int:
    """The 'absent' input of a modality: a blank pixel for digits, a space for text, 0 otherwise."""
    return modality_named(config.modality).blank_token


def per_cell(values: np.ndarray, tokens: np.ndarray, modality) -> np.ndarray:
    """(T,) token attributions of an image input -> (rows, cols) per pixel or patch. After a start
    token, token t holds cell t-1, and the last cell is never an input: that cell is NaN."""
    rows, cols = modality.grid
    starts = modality.token_labels(np.asarray(tokens))[:1] == ["start"]
    out = np.full(rows * cols, np.nan)
    cells = np.asarray(values, dtype=float)[1:] if starts else np.asarray(values, dtype=float)
    out[:len(cells)] = cells
    return out.reshape(rows, cols)


@dataclass(frozen=True)
class MetricContribution:
    """(L_m, P, D, D) per-entry contribution of M(x) to the loss at each query position
    (P = T for causal models, else 1): gradient x metric, or the plain gradient."""

    values: np.ndarray
    method: str  # "gradient_x_metric" | "gradient"

    def map(self, layer: int = 0, position: int | None = None) -> np.ndarray:
        """(D, D) contributions of one metric layer at one query position index, or summed over
        positions (None); the plain gradient is shown as its magnitude."""
        vals = self.values[min(layer, self.values.shape[0] - 1)]  # (P, D, D)
        vals = vals.sum(0) if position is None or vals.shape[0] == 1 else vals[position]
        return vals if self.method == "gradient_x_metric" else np.abs(vals)


def block_sums(values: np.ndarray, n_head: int) -> np.ndarray:
    """(D, D) -> (H, H): the sum over each head block."""
    d = values.shape[-1] // n_head
    return values.reshape(n_head, d, n_head, d).sum(axis=(1, 3))


@dataclass(frozen=True)
class TokenAttribution:
    """(T,) Integrated-Gradients attribution of a scalar to each input token (summed over the
    embedding), with captum's convergence delta: sum(values) = F(x) - F(baseline) + delta."""

    values: np.ndarray
    target: str
    delta: float
    value: float  # F(x)
    baseline_value: float  # F(baseline)

    def scaled(self, factor: float) -> TokenAttribution:
        """The same attribution of factor · F (IG is linear in F): the loss in another unit."""
        return dataclasses.replace(self, values=self.values * factor, delta=self.delta * abs(factor),
                                   value=self.value * factor, baseline_value=self.baseline_value * factor)


def _private_copy(model: Transformer) -> Transformer:
    clone = copy.deepcopy(model)
    for p in clone.parameters():
        p.requires_grad_(True)
    return clone


def metric_contributions(model: Transformer, tokens, targets, choices: dict | None = None,
                         method: str = "gradient_x_metric") -> MetricContribution:
    """Contribution of each entry of M(x) to the loss under the mechanism's named per-call choices, with
    captum's LayerGradientXActivation (multiply_by_inputs=False for the plain gradient)."""
    if model.mechanism.metric(model.config) is None:
        raise ValueError(f"{model.mechanism.title} has no metric M(x)")
    if method not in ("gradient_x_metric", "gradient"):
        raise ValueError("method must be 'gradient_x_metric' or 'gradient'")
    net = _private_copy(model)
    device = next(net.parameters()).device
    tok = as_model_input(tokens, net.config, device)
    tgt = as_model_input(targets, net.config, device)
    if net.config.n_classes:
        tgt = tgt[:, 0]
    D = net.config.n_embd
    access = metric_access_of(net.mechanism)
    options = access.explicit(choices)

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        return net(x, targets=tgt, options=options, stochastic=False).loss.reshape(1)

    from captum.attr import LayerGradientXActivation

    out = []
    for module in access.output_modules(net):
        attr = LayerGradientXActivation(loss_of, module, multiply_by_inputs=method == "gradient_x_metric")
        a = attr.attribute(tok)  # (1, P, D*D) for f, (D, D) for a static metric
        out.append(a.detach().reshape(-1, D, D).cpu().numpy())  # (P, D, D)
    return MetricContribution(np.stack(out), method)


def metric_scalar(model: Transformer, tokens: torch.Tensor, target: str, position: int = -1, layer: int = 0,
                  block: tuple[int, int] = (0, 1), head: int = 0, targets: torch.Tensor | None = None,
                  choices: dict | None = None) -> torch.Tensor:
    """A scalar of M(x) per sequence, differentiable in the embeddings: (B,).

    loss: the model's loss; off_diagonal_energy: Σ_{i≠j} ‖M_ij‖²; block_norm: ‖M_ij‖;
    head_metric_norm: ‖m_i‖ (under the mechanism's named per-call `choices`). Taken at query `position`
    (causal) of metric `layer`.
    """
    if target == "loss":  # the model's own loss per sequence: the mean over the positions that have a target
        out = model(tokens, targets=targets, options=model.mechanism.options_from(choices or {}), stochastic=False)
        if targets is None or out.token_loss is None:
            raise ValueError("the loss needs the targets")
        return sequence_losses(out.token_loss, targets)  # (B,): a short text has no target at its end
    access = metric_access_of(model.mechanism)
    out = model(tokens, options=access.explicit(choices), need_intermediates=True, stochastic=False)
    hm = access.records(model, out.layers)[layer]
    H = model.config.n_head
    full = hm.full[:, position] if hm.full.shape[1] > 1 else hm.full[:, 0]  # (B or 1, D, D)
    full = full.expand(tokens.shape[0], *full.shape[1:])
    d = full.shape[-1] // H
    blocks = full.reshape(-1, H, d, H, d)  # (B, H, d, H, d): block (i, j) is [:, i, :, j, :]
    norms = blocks.pow(2).sum(dim=(2, 4))  # (B, H, H) squared block norms
    if target == "off_diagonal_energy":
        eye = torch.eye(H, dtype=torch.bool, device=norms.device)
        return norms.masked_fill(eye, 0).sum(dim=(1, 2))  # (B,)
    if target == "block_norm":
        return norms[:, block[0], block[1]].sqrt()  # (B,)
    if target == "head_metric_norm":
        m = hm.head[:, position] if hm.head.shape[1] > 1 else hm.head[:, 0]  # (B or 1, H, d, d)
        m = m.expand(tokens.shape[0], *m.shape[1:])
        return m[:, head].pow(2).sum(dim=(-2, -1)).sqrt()  # (B,)
    raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")


def token_attributions(model: Transformer, tokens, baseline_token: int, target: str = "loss", targets=None,
                       n_steps: int = 32, progress: Callable[[int, int], None] | None = None, **scalar_kw) -> TokenAttribution:
    """Integrated Gradients of a scalar of the model, per input position: captum's
    LayerIntegratedGradients on the token embedding, from a baseline made of `baseline_token`
    everywhere; for continuous inputs (image patches) IntegratedGradients on the input vectors,
    from a black image (`baseline_token` ignored). A start token is kept in the baseline."""
    if target != "loss" and model.mechanism.metric(model.config) != "adaptive":
        raise ValueError("this model's metric does not depend on the input: only the loss can be attributed to tokens")
    net = _private_copy(model)
    device = next(net.parameters()).device
    tok = as_model_input(tokens, net.config, device)
    tgt = None
    if targets is not None:
        tgt = as_model_input(targets, net.config, device)
        tgt = tgt[:, 0] if net.config.n_classes else tgt
    if target == "loss" and tgt is None:
        raise ValueError("the loss needs targets")
    base = torch.zeros_like(tok) if net.config.input_dim else torch.full_like(tok, baseline_token)
    if modality_named(net.config.modality).token_labels(tok[0].cpu().numpy())[:1] == ["start"]:
        base[0, 0] = tok[0, 0]  # keep the start token: attribute to the pixels or patches only
    calls = {"n": 0}
    total_calls = n_steps + 1

    def forward(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        if progress:
            progress(min(calls["n"], total_calls), total_calls)
        t = None if tgt is None else tgt.expand(x.shape[0], *tgt.shape[1:])
        return metric_scalar(net, x, target, targets=t, **scalar_kw)

    from captum.attr import IntegratedGradients, LayerIntegratedGradients

    ig = IntegratedGradients(forward) if net.config.input_dim else LayerIntegratedGradients(forward, net.tok_emb)
    attr, delta = ig.attribute(tok, baselines=base, n_steps=n_steps, internal_batch_size=1,
                               return_convergence_delta=True)
    with torch.no_grad():
        value = float(metric_scalar(net, tok, target, targets=tgt, **scalar_kw)[0])
        base_value = float(metric_scalar(net, base, target, targets=tgt, **scalar_kw)[0])
    return TokenAttribution(attr.detach().sum(-1)[0].cpu().numpy(), target, float(delta.abs().max()), value, base_value)


def has_hooks(model: torch.nn.Module) -> bool:
    """True if any module of `model` carries a forward, pre-forward or backward hook."""
    return any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
               for m in model.modules())
