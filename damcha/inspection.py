"""One forward pass on one input -> a plain record of everything the app shows about M(x)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .config import MetricMode
from .metric import block_norms, learned_and_residue
from .model import IGNORE_INDEX, Transformer


@dataclass(frozen=True)
class InspectionRecord:
    """Internals of one input, as numpy arrays (no batch axis).

    L_m = number of metrics (1 when shared or static-shared, n_layer when per layer);
    P = number of query positions the metric was taken at (one per sequence if not causal).
    Arrays are None where the model has no metric (MHA).

    tokens: (T,) input tokens; positions: (P,) query positions of the metric (-1: the
        whole sequence, non-causal models).
    metric: (L_m, P, D, D) full M(x) at those positions.
    metric_learned / metric_residue: (L_m, P, D, D), metric = learned + residue. Under the
        row sum, block M_ij = m_i / H (learned) + residue with zero row mean; only the
        learned part reaches the loss. Under the bilinear form every block is learned.
    head_metrics: (L_m, P, H, d, d) per-head metrics m_i under `metric_mode`
        (bilinear: (L_m, P, H, d, D), the scaled rows of head i).
    block_norms: (L_m, P, H, H) Frobenius norm of each block M_ij.
    attention: (n_layer, H, T, T) attention probabilities.
    logits: (T, V) next-token logits, or (C,) class logits.
    token_loss: (T,) per-token loss (NaN where no target), or (1,) for a classifier.
    """

    variant: str
    score_form: str
    metric_mode: str
    identifiable: str
    causal: bool
    tokens: np.ndarray
    positions: np.ndarray
    metric: np.ndarray | None
    metric_learned: np.ndarray | None
    metric_residue: np.ndarray | None
    head_metrics: np.ndarray | None
    block_norms: np.ndarray | None
    attention: np.ndarray
    logits: np.ndarray
    token_loss: np.ndarray | None
    loss: float | None


def identifiability_note(score_form: str | None) -> str:
    """One sentence, for every view of M, on which part of it training can determine."""
    if score_form == "row_sum":
        return (
            "Row-sum form (paper Eq. 4): every block of row i reaches the loss only through "
            "m_i = sum_j M_ij, so only the learned part (each block = m_i / H) is identifiable; "
            "the residue (zero row mean) is a fixed random read-out of the generator's "
            "features set at initialisation, and the diagonal/off-diagonal split it creates "
            "is not learned."
        )
    if score_form == "bilinear":
        return (
            "Bilinear form (an extension beyond the paper): each block M_ij scores head i's "
            "queries against head j's keys, so every block, and the diagonal/off-diagonal "
            "split, is learned."
        )
    return "Standard multi-head attention has no metric M(x)."


@torch.no_grad()
def inspect_input(
    model: Transformer,
    tokens: torch.Tensor | np.ndarray | list[int],
    targets: torch.Tensor | np.ndarray | list[int] | int | None = None,
    positions: list[int] | np.ndarray | None = None,
    metric_mode: MetricMode | str = MetricMode.FULL,
) -> InspectionRecord:
    """Run one input through `model` in eval mode without gradients and record its internals.

    tokens: (T,) ints. targets: (T,) next tokens (IGNORE_INDEX to skip) or a class id.
    positions: query positions at which to take M(x) (causal models; default: all).
    The model is not changed: dropout is switched off by argument, not by model.eval().
    """
    cfg = model.config
    mode = MetricMode.parse(metric_mode)
    device = next(model.parameters()).device
    tok = as_model_input(tokens, cfg, device)  # (1, T) ids or (1, T, input_dim) vectors
    T = tok.shape[1]
    if T == 0:
        raise ValueError("cannot inspect an empty input")
    tgt = None
    if targets is not None:
        tgt = as_model_input(targets, cfg, device)  # (1, T), (1, 1) class id, or (1, T, input_dim)
        tgt = tgt[:, 0] if cfg.n_classes else tgt
    out = model(tok, targets=tgt, metric_mode=mode, need_intermediates=True, stochastic=False)
    attention = torch.stack([layer.attention[0] for layer in out.layers])  # (L, H, T, T)

    metric = learned = residue = heads = norms = None
    if cfg.causal:
        pos = np.arange(T) if positions is None else np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= T):
            raise ValueError(f"positions must lie in [0, {T - 1}]")
    else:
        pos = np.array([-1])
    if cfg.is_damcha:
        sources = model.metric_sources()
        shared = model.metric_source is not None
        layer_metrics = [out.layers[0].metric] if shared else [layer.metric for layer in out.layers]
        fulls, head_list = [], []
        sel = torch.as_tensor(pos if cfg.causal else [0], device=device)  # (P,)
        for source, hm in zip(sources, layer_metrics):
            head = hm.head[0]  # (1 or T, H, d, d|D): one metric per sequence (or static) or per position
            head = head[sel] if head.shape[0] > 1 else head.expand(len(sel), *head.shape[1:])  # (P, H, d, d|D)
            ctx = hm.context[0] if hm.context is not None else torch.zeros(1, cfg.n_embd, device=device)
            ctx = ctx[sel] if ctx.shape[0] > 1 else ctx.expand(len(sel), cfg.n_embd)  # (P, D)
            fulls.append(source.full_metric(ctx))  # (P, D, D)
            head_list.append(head)
        M = torch.stack(fulls)  # (L_m, P, D, D)
        learned_t, residue_t = learned_and_residue(M, cfg.n_head)  # (L_m, P, D, D) each
        metric, learned, residue = _np(M), _np(learned_t), _np(residue_t)
        heads = _np(torch.stack(head_list))  # (L_m, P, H, d, d|D)
        norms = _np(block_norms(M, cfg.n_head))  # (L_m, P, H, H)

    token_loss = None
    if out.token_loss is not None:
        token_loss = _np(out.token_loss[0]).astype(np.float64)
        if not cfg.n_classes and not cfg.input_dim:
            token_loss[_np(tgt[0]) == IGNORE_INDEX] = np.nan
        token_loss = np.atleast_1d(token_loss)
    return InspectionRecord(
        variant=cfg.variant,
        score_form=cfg.score_form if cfg.is_damcha else "mha",
        metric_mode=mode.value,
        identifiable=_identifiable(cfg),
        causal=cfg.causal,
        tokens=_np(tok[0]),
        positions=pos,
        metric=metric,
        metric_learned=learned,
        metric_residue=residue,
        head_metrics=heads,
        block_norms=norms,
        attention=_np(attention),
        logits=_np(out.logits[0]),
        token_loss=token_loss,
        loss=None if out.loss is None else float(out.loss),
    )


def as_model_input(values, cfg, device) -> torch.Tensor:
    """One input (or its targets) as a batch of one: (1, T) token ids, or (1, T, input_dim) floats."""
    if cfg.input_dim:
        return torch.as_tensor(np.asarray(values), dtype=torch.float32, device=device).reshape(1, -1, cfg.input_dim)
    return torch.as_tensor(np.asarray(values), dtype=torch.long, device=device).reshape(1, -1)


def _identifiable(cfg) -> str:
    if not cfg.is_damcha:
        return "none"
    return "learned" if cfg.score_form == "row_sum" else "all"


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


def next_token_probabilities(record: InspectionRecord, position: int) -> np.ndarray:
    """Softmax of the logits at `position` (decoders) or of the class logits. (V,) or (C,)."""
    logits = record.logits if record.logits.ndim == 1 else record.logits[position]
    p = np.exp(logits - logits.max())
    return p / p.sum()


def expected_digit(record: InspectionRecord, levels: int = 17) -> np.ndarray:
    """Teacher-forced prediction of each pixel of a digit decoder: the expected grey level of
    p(pixel | the true pixels before it). (64, V) logits -> (8, 8)."""
    logits = record.logits[:, :levels]  # (64, 17)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ np.arange(levels)).reshape(8, 8)
