"""How the generic analyses (attribution, interventions, dynamics) reach DAMCHA's metric M(x): the
`MetricAccess` its mechanism declares, so no module outside this package holds DAMCHA's types."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from damcha.model.mechanisms.base import ForwardOptions, MetricAccess
from damcha.model.mechanisms.damcha.layer import DamchaOptions, metric_sources
from damcha.model.mechanisms.damcha.metric import within_row_residual

if TYPE_CHECKING:
    from damcha.model.transformer import Transformer


class DamchaMetricAccess(MetricAccess):
    def explicit(self, choices: dict[str, Any] | None = None) -> ForwardOptions:
        return DamchaOptions(**(choices or {}), explicit=True)

    def blocks_scaled(self, scales: np.ndarray) -> ForwardOptions:
        return DamchaOptions(block_scales=scales)

    def with_reference(self, reference: torch.Tensor, alpha: float) -> ForwardOptions:
        return DamchaOptions(reference=reference, alpha=alpha)

    def learned_only(self) -> ForwardOptions:
        return DamchaOptions(drop_residue=True)

    def scoring_form(self, config) -> str:
        return config.setting("score_form").replace("_", " ")

    def residue_learned(self, config) -> bool:
        return config.setting("score_form") != "row_sum"  # the row sum reaches each block only through its row's mean m_i

    def output_modules(self, model: Transformer) -> list[nn.Module]:
        return [src.generator if src.static else src.generator.out for src in metric_sources(model)]

    def records(self, model: Transformer, layers: Sequence[Any]) -> list[Any]:
        return [layer.internals for layer in ([layers[0]] if model.metric_source is not None else layers)]

    def metrics_at(self, model: Transformer, layers: Sequence[Any], position: int, batch: int) -> torch.Tensor:
        mats = []
        for src, record in zip(metric_sources(model), self.records(model, layers)):
            ctx = record.context
            if ctx is None:  # a static metric: one M for every input
                mats.append(src.full_metric(torch.zeros(batch, model.config.n_embd)))  # (B, D, D)
            else:
                c = ctx[:, position] if ctx.shape[1] > 1 else ctx[:, 0]  # (B, D)
                mats.append(src.full_metric(c))  # (B, D, D)
        return torch.stack(mats, dim=1)  # (B, L_m, D, D)

    def parameter_split(self, model: Transformer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        cfg = model.config
        residual, row_mean = [], []
        for src in metric_sources(model):
            for t in src.last_layer():
                if t is None:
                    continue
                r = within_row_residual(t.detach().double(), cfg.n_embd, cfg.n_head)
                residual.append(r)
                row_mean.append(t.detach().double().reshape(r.shape) - r)
        return residual, row_mean
