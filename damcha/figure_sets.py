"""Named figures of one inspection record: what the inspector shows and what `damcha figures` exports.

Every figure is figures.<function>(slice of an InspectionRecord), chosen by a name and a few
parameters, so a provenance JSON ({figure, run, epoch, input, params}) regenerates it exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from . import figures
from .checkpoints import Run, load_model, load_run
from .export import ExportItem, provenance
from .inspection import InspectionRecord, expected_digit, inspect_input, next_token_probabilities

PARTS = {"M(x)": "metric", "learned part": "metric_learned", "residue": "metric_residue"}
METRIC_FIGURES = ("metric", "decomposition", "block_norms", "head_metrics", "contour", "surface")
ALL_FIGURES = (*METRIC_FIGURES, "attention", "token_loss", "prediction")


def _where(record: InspectionRecord, p: int) -> str:
    return f"position {int(record.positions[p])}" if record.causal else "whole input"


def build_figure(name: str, record: InspectionRecord, n_head: int, params: dict, epoch: int | None = None) -> go.Figure:
    """params: layer (metric layer), position (index into record.positions), part, shared_scale, attn_layer."""
    layer = int(params.get("layer", 0))
    p = int(params.get("position", -1)) % len(record.positions)
    part = params.get("part", "M(x)")
    shared = bool(params.get("shared_scale", True))
    at = f", epoch {epoch}" if epoch is not None else ""
    where = _where(record, p)
    if name in METRIC_FIGURES and record.metric is None:
        raise ValueError("standard multi-head attention has no metric M(x)")
    if name == "metric":
        return figures.metric_heatmap_figure(record.metric[layer, p], n_head, f"M(x): {where}, layer {layer + 1}{at}")
    if name == "decomposition":
        panels = {"M(x)": record.metric[layer, p], "learned (m_i / H)": record.metric_learned[layer, p],
                  "residue": record.metric_residue[layer, p]}
        return figures.metric_panels_figure(panels, n_head, f"Decomposition at {where}{at}", shared)
    if name == "block_norms":
        return figures.block_norm_figure(record.block_norms[layer, p], f"Block norms, {where}{at}")
    if name == "head_metrics":
        title = "Per-head metrics m_i" if record.score_form == "row_sum" else "Scaled rows of each head (bilinear)"
        return figures.head_metrics_figure(record.head_metrics[layer, p], f"{title} ({record.metric_mode}){at}", shared)
    if name in ("contour", "surface"):
        mat = getattr(record, PARTS[part])[layer, p]
        if name == "contour":
            return figures.contour_figure(mat, n_head, f"Contours of {part}, {where}{at}")
        return figures.surface_figure(mat, f"{part} as a surface, {where}{at}")
    if name == "attention":
        a = int(params.get("attn_layer", 0))
        return figures.attention_figure(record.attention[a], None, f"Attention, layer {a + 1}{at}")
    if name == "token_loss":
        if record.token_loss is None or record.logits.ndim == 1:
            raise ValueError("this input has no per-token loss")
        loss = np.where(np.isnan(record.token_loss), 0.0, record.token_loss)
        return figures.token_loss_figure(loss, [str(int(t)) for t in record.tokens], f"Loss per position{at}")
    if name == "prediction":
        if record.logits.ndim == 1:
            probs = next_token_probabilities(record, 0)
            return figures.probabilities_figure(np.arange(len(probs)), probs, f"Predicted class: {int(probs.argmax())}{at}")
        if record.logits.shape == (64, 18):
            return figures.digit_figure(np.round(expected_digit(record), 1), f"Model's expected pixels{at}")
        raise ValueError("the prediction figure is drawn for digits only")
    raise ValueError(f"unknown figure {name!r}; expected one of {ALL_FIGURES}")


def available_figures(record: InspectionRecord) -> list[str]:
    names = list(METRIC_FIGURES) if record.metric is not None else []
    names.append("attention")
    if record.token_loss is not None and record.logits.ndim == 2:
        names.append("token_loss")
    if record.logits.ndim == 1 or record.logits.shape == (64, 18):
        names.append("prediction")
    return names


def figure_set(run: Run, epochs: Sequence[int], tokens: np.ndarray, targets, mode: str = "full",
               params: dict | None = None, names: Sequence[str] | None = None, input_source: str = "",
               progress: Callable[[int, int], None] | None = None) -> list[ExportItem]:
    """Every named figure (or `names`) of one input at each epoch, with provenance."""
    params = dict(params or {})
    items = []
    for k, epoch in enumerate(epochs):
        model = load_model(run, epoch)
        record = inspect_input(model, tokens, targets, metric_mode=mode)
        for name in names or available_figures(record):
            fig = build_figure(name, record, run.model_config.n_head, params, epoch)
            prov = provenance(name, run.path, epoch, run.snapshot_path(epoch), tokens, targets, input_source,
                              {**params, "mode": mode})
            items.append(ExportItem(f"{run.name}_e{epoch:04d}_{name}", fig, prov))
        if progress:
            progress(k + 1, len(epochs))
    return items


def regenerate(prov: dict, run_root: str | Path | None = None) -> ExportItem:
    """The figure a provenance JSON describes, rebuilt from its run, epoch and input."""
    run_path = Path(prov["run"])
    if run_root is not None and not run_path.is_absolute():
        run_path = Path(run_root) / run_path
    run = load_run(run_path)
    if "input_tokens" not in prov:
        raise ValueError("this provenance does not carry its input tokens (input too large); pass the input instead")
    tokens = np.asarray(prov["input_tokens"], dtype=np.int64)
    targets = prov.get("input_targets")
    if isinstance(targets, list):
        targets = np.asarray(targets, dtype=np.int64)
    params = dict(prov.get("params", {}))
    mode = params.pop("mode", "full")
    (item,) = figure_set(run, [int(prov["epoch"])], tokens, targets, mode, params, [prov["figure"]],
                         prov.get("input_source", ""))
    return item


