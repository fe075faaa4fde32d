"""Interventions: what a model actually uses of its cross-head structures.

Heatmaps show what M(x) looks like; an intervention changes one thing in the forward pass and
measures the loss. Every intervention here is a forward option of an ordinary model call (never
state on the shared model) and is computed exactly:

- DAMCHA: zero one block M_ij, or keep only it (an H x H grid of loss changes); ablate a head's
  metric m_i (the head then attends uniformly over its allowed keys); run input x with the metric of
  another input x', or with the validation mean M-bar (the adaptive model made static); interpolate
  M_alpha = M-bar + alpha (M(x) - M-bar); keep only the learned part (under the row sum the outputs
  must not change: the identifiability statement, checked); scale the off-diagonal blocks by gamma.
- Other mechanisms: what their `Mechanism.interventions` declare (THA with the identity for P_l or
  P_w, DCMHA without its dynamic weights, ColMHA with "concatenate" mixing, MMA with a head type
  turned global, MoA with uniform gates or a fixed expert choice).

The adaptivity gap of an input is loss(M-bar) - loss(M(x)): how much the input dependence of the
metric is worth on it.
"""


from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from damcha.model.batching import as_model_input
from damcha.model.mechanisms import ForwardOptions, Intervention, MetricAccess, metric_access_of
from damcha.model.mechanisms.metric_interventions import (  # noqa: F401 — part of this module's API
    ADAPTIVITY_GAP_READING,
    align_reference,
    alignment_note,
    block_scale_matrix,
    input_metric,
)
from damcha.model.transformer import Transformer, sequence_losses

MEAN_INPUTS = 256  # validation inputs the mean metric M-bar is taken over, in the app and the figures CLI
ALPHAS = tuple(np.round(np.linspace(0.0, 1.5, 16), 2))
GAMMAS = tuple(np.round(np.linspace(0.0, 1.0, 11), 2))


@dataclass(frozen=True)
class Outcome:
    """One forward pass under some options: mean loss over known targets, per-token loss, logits."""

    loss: float
    token_loss: np.ndarray
    logits: np.ndarray


@torch.no_grad()
def evaluate(model: Transformer, tokens, targets, options: ForwardOptions | None = None) -> Outcome:
    """One input (batch of one) under `options`, in eval mode without gradients."""
    cfg = model.config
    device = next(model.parameters()).device
    tok = as_model_input(tokens, cfg, device)
    tgt = as_model_input(targets, cfg, device)
    tgt = tgt[:, 0] if cfg.n_classes else tgt
    out = model(tok, targets=tgt, options=options, stochastic=False)
    return Outcome(float(out.task_loss), out.token_loss[0].cpu().numpy(), out.logits[0].cpu().numpy())


@torch.no_grad()
def batch_losses(model: Transformer, inputs, targets, options: ForwardOptions | None = None,
                 batch_size: int = 128) -> np.ndarray:
    """Per-input mean loss of many inputs of one length under `options`. (N,)"""
    cfg = model.config
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32 if cfg.input_dim else torch.long)
    y = torch.as_tensor(np.asarray(targets))
    out = []
    for i in range(0, len(x), batch_size):
        xb, yb = x[i:i + batch_size], y[i:i + batch_size]
        tl = model(xb, targets=yb, options=options, stochastic=False).token_loss  # (B, T) or (B,)
        out.append(sequence_losses(tl, yb).numpy())
    return np.concatenate(out)


# ----------------------------------------------------------------------------- a D x D metric (DAMCHA's M(x))

def _access(model: Transformer) -> MetricAccess:
    return metric_access_of(model.mechanism)


@torch.no_grad()
def mean_metric(model: Transformer, inputs, batch_size: int = 128,
                progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """M-bar: the mean of M(x) over inputs of one length, per metric source and position: (L_m, P, D, D)."""
    cfg, access = model.config, _access(model)
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32 if cfg.input_dim else torch.long)
    total, n = None, 0
    for i in range(0, len(x), batch_size):
        xb = x[i:i + batch_size]
        out = model(xb, options=access.explicit(), need_intermediates=True, stochastic=False)
        M = torch.stack([r.full.expand(len(xb), *r.full.shape[1:]) for r in access.records(model, out.layers)])
        total = M.sum(1) if total is None else total + M.sum(1)  # (L_m, P, D, D)
        n += len(xb)
        if progress:
            progress(min(i + batch_size, len(x)), len(x))
    if total is None:
        raise ValueError("the mean metric needs at least one input")
    return total / n


def block_grid(model: Transformer, tokens, targets, keep: bool = False,
               progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """(H, H) loss change when block M_ij is zeroed (or is the only block kept), for one input."""
    H = model.config.n_head
    base = evaluate(model, tokens, targets).loss
    grid = np.zeros((H, H))
    for k, (i, j) in enumerate((i, j) for i in range(H) for j in range(H)):
        S = block_scale_matrix(H, keep=(i, j)) if keep else block_scale_matrix(H, zero=(i, j))
        grid[i, j] = evaluate(model, tokens, targets, _access(model).blocks_scaled(S)).loss - base
        if progress:
            progress(k + 1, H * H)
    return grid


def block_grid_over(model: Transformer, inputs, targets, keep: bool = False,
                    progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """(H, H) mean loss change over many inputs when block M_ij is zeroed (or kept alone)."""
    H = model.config.n_head
    base = batch_losses(model, inputs, targets).mean()
    grid = np.zeros((H, H))
    for k, (i, j) in enumerate((i, j) for i in range(H) for j in range(H)):
        S = block_scale_matrix(H, keep=(i, j)) if keep else block_scale_matrix(H, zero=(i, j))
        grid[i, j] = batch_losses(model, inputs, targets, _access(model).blocks_scaled(S)).mean() - base
        if progress:
            progress(k + 1, H * H)
    return grid


def head_ablation(model: Transformer, tokens, targets) -> np.ndarray:
    """(H,) loss change when head i's metric m_i is zeroed (the head then attends uniformly)."""
    H = model.config.n_head
    base = evaluate(model, tokens, targets).loss
    scaled = _access(model).blocks_scaled
    return np.array([evaluate(model, tokens, targets, scaled(block_scale_matrix(H, head=i))).loss - base for i in range(H)])


def metric_swap(model: Transformer, tokens, targets, reference: torch.Tensor, alpha: float = 0.0) -> Outcome:
    """The input run with M' = reference + alpha (M(x) - reference): alpha 0 is the reference's metric
    (another input's, or M-bar), alpha 1 the input's own (positions aligned as align_reference says)."""
    reference, _ = align_reference(model, tokens, reference)
    return evaluate(model, tokens, targets, _access(model).with_reference(reference, alpha))


def interpolation_curve(model: Transformer, tokens, targets, reference: torch.Tensor,
                        alphas: Sequence[float] = ALPHAS) -> np.ndarray:
    """Loss at M_alpha = reference + alpha (M(x) - reference) for each alpha. (len(alphas),)"""
    reference, _ = align_reference(model, tokens, reference)
    access = _access(model)
    return np.array([evaluate(model, tokens, targets, access.with_reference(reference, float(a))).loss for a in alphas])


def off_diagonal_curve(model: Transformer, tokens, targets, gammas: Sequence[float] = GAMMAS) -> np.ndarray:
    """Loss when every off-diagonal block is scaled by gamma (1: the model, 0: diagonal-only)."""
    H, scaled = model.config.n_head, _access(model).blocks_scaled
    return np.array([evaluate(model, tokens, targets, scaled(block_scale_matrix(H, off_diagonal=float(g)))).loss
                     for g in gammas])


@dataclass(frozen=True)
class ResidueCheck:
    """Dropping the residue (keeping only the learned part of M): the largest change of any logit
    and the change of the loss. Where the loss cannot reach the residue (DAMCHA's row sum) both are float
    rounding; where it is learned (the bilinear form) not. form: the metric's scoring form in words."""

    max_logit_change: float
    loss_change: float
    residue_learned: bool
    form: str
    largest_output: float = 0.0  # the largest |logit| of the model's own forward: what float rounding is relative to


def residue_check(model: Transformer, tokens, targets) -> ResidueCheck:
    access = _access(model)
    plain = evaluate(model, tokens, targets, access.explicit())
    dropped = evaluate(model, tokens, targets, access.learned_only())
    return ResidueCheck(float(np.abs(dropped.logits - plain.logits).max()), dropped.loss - plain.loss,
                        access.residue_learned(model.config), access.scoring_form(model.config),
                        float(np.abs(plain.logits).max()))


def adaptivity_gap(model: Transformer, inputs, targets, mbar: torch.Tensor) -> np.ndarray:
    """loss(M-bar) - loss(M(x)) for each input (N,): > 0 where the input dependence of M helps."""
    with_mean = batch_losses(model, inputs, targets, _access(model).with_reference(mbar, 0.0))
    return with_mean - batch_losses(model, inputs, targets)


def interval(values: np.ndarray, level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean and a percentile bootstrap interval of it."""
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = rng.choice(values, (n_boot, len(values))).mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(values.mean()), float(lo), float(hi)


# ----------------------------------------------------------------------------- what the page offers

def intervention_options(model: Transformer, intervention: Intervention, tokens, params: dict | None = None,
                         other_tokens=None, mbar: torch.Tensor | None = None) -> ForwardOptions:
    """The forward options of one intervention on one input, its parameters given by name (an "input"
    parameter takes `other_tokens`, a "mean" parameter `mbar`)."""
    params = dict(params or {})
    for p in intervention.params:
        if p.kind == "input":
            if other_tokens is None:
                raise ValueError(f"{intervention.title} needs another input")
            params[p.name] = other_tokens
        elif p.kind == "mean":
            if mbar is None:
                raise ValueError(f"{intervention.title} needs the validation mean metric")
            params[p.name] = mbar
        else:
            params.setdefault(p.name, p.default)
    return intervention.make(model, tokens, **params)


def validation_effects(model: Transformer, inputs, targets, interventions: Sequence[Intervention],
                       mbar: torch.Tensor | None = None,
                       progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Mean loss change over many inputs for each intervention that needs no other input (its
    parameters at their defaults), with a 95% bootstrap interval."""
    base = batch_losses(model, inputs, targets)
    rows = []
    chosen = [iv for iv in interventions if all(p.kind != "input" for p in iv.params)]
    for k, iv in enumerate(chosen):
        options = intervention_options(model, iv, inputs[0], mbar=mbar)
        mean, lo, hi = interval(batch_losses(model, inputs, targets, options) - base)
        rows.append({"intervention": iv.title, "mean loss change": mean, "95% low": lo, "95% high": hi,
                     "parameters": default_parameters(iv)})
        if progress:
            progress(k + 1, len(chosen))
    return rows


def default_parameters(intervention: Intervention) -> str:
    """The block, head or fraction an intervention acts on when run at its defaults, as words
    ("head i=1, head j=2"; heads counted from 1), or '' when it has none."""
    return ", ".join(f"head {p.name}={int(p.default) + 1}" if p.kind == "head" else f"{p.name}={p.default:g}"
                     for p in intervention.params if p.kind in ("head", "fraction"))


def available_interventions(model_or_config) -> list[Intervention]:
    """Every intervention the model's mechanism supports."""
    config = getattr(model_or_config, "config", model_or_config)
    return config.mechanism.interventions(config)


__all__ = ["ALPHAS", "GAMMAS", "MEAN_INPUTS", "Outcome", "ResidueCheck", "adaptivity_gap", "available_interventions",
           "align_reference", "alignment_note", "batch_losses", "block_grid", "block_grid_over", "block_scale_matrix",
           "default_parameters", "evaluate", "head_ablation",
           "intervention_options", "validation_effects",
           "input_metric", "interpolation_curve", "interval", "mean_metric", "metric_swap",
           "off_diagonal_curve", "residue_check"]
