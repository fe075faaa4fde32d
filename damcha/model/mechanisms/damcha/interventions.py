"""DAMCHA's interventions on its metric: what its mechanism declares to the interventions page.

Each is a forward option of an ordinary call (block scales, another metric as reference, the
learned part alone), computed exactly on the explicit path; `damcha.analysis.interventions`
evaluates them and builds curves and grids from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from damcha.model.batching import as_model_input
from damcha.model.mechanisms.base import Intervention, Param
from damcha.model.mechanisms.damcha.layer import DamchaOptions

if TYPE_CHECKING:  # annotations only: the transformer imports the registry that imports this module
    from damcha.model.transformer import Transformer


# What an adaptivity gap can and cannot say, in one sentence every page, the evidence and the docs share.
ADAPTIVITY_GAP_READING = ("A positive gap is expected for any model trained with M(x), input dependence helping or "
                          "not: the model is fitted to M(x), and its mean M-bar changes what every later layer sees. "
                          "It measures how much this trained model relies on its per-input metric; whether input "
                          "dependence helps is tested by training without it (w/o f(x), the Evidence page's Table 4).")


def block_scale_matrix(H: int, zero: tuple[int, int] | None = None, keep: tuple[int, int] | None = None,
                       head: int | None = None, off_diagonal: float | None = None) -> np.ndarray:
    """s_ij for one intervention on the blocks of M: zero (i, j); keep only (i, j); zero row i (head
    i's metric m_i, so the head attends uniformly); or scale every off-diagonal block by gamma."""
    S = np.ones((H, H))
    if zero is not None:
        S[zero] = 0.0
    if keep is not None:
        S = np.zeros((H, H))
        S[keep] = 1.0
    if head is not None:
        S[head] = 0.0
    if off_diagonal is not None:
        S = np.where(np.eye(H, dtype=bool), 1.0, off_diagonal)
    return S


@torch.no_grad()
def input_metric(model: Transformer, tokens) -> torch.Tensor:
    """M(x) of one input at every position, per metric source: (L_m, P, D, D) (P = T causal, 1 otherwise)."""
    device = next(model.parameters()).device
    tok = as_model_input(tokens, model.config, device)
    out = model(tok, options=DamchaOptions(explicit=True), need_intermediates=True, stochastic=False)
    layers = [out.layers[0]] if model.metric_source is not None else out.layers
    return torch.stack([layer.internals.full[0] for layer in layers])  # (L_m, P, D, D)


def alignment_note(P: int, T: int) -> str:
    """What align_reference does with a reference of P positions and an input of T ('' when it fits)."""
    if P in (1, T):
        return ""
    if P > T:
        return f"The reference has {P} positions and this input {T}: each position uses the reference at the same position."
    return (f"The reference has {P} positions and this input {T}: positions 0..{P - 1} use the reference at the same "
            f"positions, positions {P}..{T - 1} (which no reference input reaches) its last position's metric.")


def align_reference(model: Transformer, tokens, reference: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A reference metric (L_m, P, D, D) for an input of T tokens, and what was done to fit it.

    A causal model has one metric per query position. A reference of more positions than the input
    is cut to its first T (the per-position mean over inputs that reach each position); one of fewer
    positions is extended with its last position's metric (no reference input reaches further)."""
    T = len(np.asarray(tokens))
    P = reference.shape[1]
    if not model.config.causal or P in (1, T):
        return reference, ""
    if P > T:
        return reference[:, :T], alignment_note(P, T)
    tail = reference[:, -1:].expand(-1, T - P, -1, -1)
    return torch.cat([reference, tail], dim=1), alignment_note(P, T)


def metric_interventions(config) -> list[Intervention]:
    """DAMCHA's interventions on its metric, with their parameters (the page draws a control each)."""
    H = config.n_head
    head = Param("i", "head", 0, H - 1, 0)
    col = Param("j", "head", 0, H - 1, min(1, H - 1))

    def scales(kw: Callable[[dict], dict]):
        """Options whose block scales come from the intervention's parameters."""
        return lambda model, tokens, **p: DamchaOptions(block_scales=block_scale_matrix(H, **kw(p)))

    return [
        Intervention("zero_block", "Zero one block M_ij", "Under the row sum this removes M_ij from m_i; under the "
                     "bilinear form it removes head j's keys from head i's scores.", (head, col),
                     scales(lambda p: {"zero": (int(p["i"]), int(p["j"]))})),
        Intervention("keep_block", "Keep only block M_ij", "Every other block set to zero.", (head, col),
                     scales(lambda p: {"keep": (int(p["i"]), int(p["j"]))})),
        Intervention("ablate_head", "Ablate head i's metric m_i", "Head i then attends uniformly over its allowed keys.",
                     (head,), scales(lambda p: {"head": int(p["i"])})),
        Intervention("swap_metric", "M(x') of another input", "This input run with another input's metric, "
                     "position by position.", (Param("other", "input"),),
                     lambda model, tokens, other: DamchaOptions(
                         reference=align_reference(model, tokens, input_metric(model, other))[0], alpha=0.0)),
        Intervention("mean_metric", "The validation mean M-bar", "The adaptive model made static: every input gets "
                     "the validation set's mean metric (per position for a causal model). Its loss change is the "
                     "adaptivity gap. " + ADAPTIVITY_GAP_READING, (Param("mbar", "mean"),),
                     lambda model, tokens, mbar: DamchaOptions(reference=align_reference(model, tokens, mbar)[0],
                                                               alpha=0.0)),
        Intervention("drop_residue", "Keep only the learned part", "Each block replaced by its row mean m_i / H. "
                     "Under the row sum the outputs must not change.",
                     make=lambda model, tokens: DamchaOptions(drop_residue=True)),
        Intervention("scale_off_diagonal", "Scale the off-diagonal blocks by γ", "γ = 0 is the diagonal-only mode, "
                     "γ = 1 the model.", (Param("gamma", "fraction", 0.0, 1.0, 0.5),),
                     scales(lambda p: {"off_diagonal": float(p["gamma"])})),
    ]
