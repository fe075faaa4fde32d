"""Several runs on one input: which runs can read it, and a table of their losses on it and on the
validation set (the numbers of the comparison page, computed here so a notebook gets the same)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from damcha.analysis.inspection import InspectionRecord, next_token_probabilities
from damcha.inputs.modalities import loss_factor, loss_label
from damcha.runs.checkpoints import Run

QUANTILE_SUFFIXES = ("_q25", "_q75")


def why_input_does_not_fit(run: Run, modality_name: str, tokens: np.ndarray) -> str | None:
    """None when `run` can read an input of this modality and these tokens, else the reason."""
    cfg = run.model_config
    if cfg.modality != modality_name:
        return f"it reads {cfg.modality}, this input is {modality_name}"
    tokens = np.asarray(tokens)
    if len(tokens) > cfg.block_size:
        return f"its context holds {cfg.block_size} positions, this input has {len(tokens)}"
    if not cfg.input_dim and tokens.size and int(tokens.max()) >= cfg.vocab_size:
        return f"token id {int(tokens.max())} is outside its vocabulary of {cfg.vocab_size}"
    return None


def validation_columns(row: dict | None) -> dict[str, float]:
    """The validation metrics of an epoch's row ('validation bits per pixel', …), without the quartile
    columns, and without the loss in nats where the row has it in bits (the page's unit)."""
    row = row or {}
    in_bits = any(k.startswith("val_bits_per_") for k in row)
    return {f"validation {k[4:].replace('_', ' ')}{' (nats)' if k == 'val_nll' else ''}": float(v)
            for k, v in row.items()
            if k.startswith("val_") and not k.endswith(QUANTILE_SUFFIXES) and isinstance(v, int | float)
            and not (k == "val_nll" and in_bits)}


def comparison_table(entries: Sequence[tuple[Run, int, InspectionRecord]]) -> list[dict]:
    """One row per (run, epoch, record): the run, its variant, the epoch, its loss on this input in
    the unit the app shows (bits per … or squared error), and its validation metrics at that epoch. (The
    mechanism's full title is the panels' business: as a column it pushed the losses past the page's right edge.)"""
    rows = []
    for run, epoch, record in entries:
        cfg = run.model_config
        loss = None if record.loss is None else record.loss * loss_factor(cfg)
        row = {"run": run.name, "variant": run.variant, "epoch": epoch}
        if record.task == "classification":  # an upload has no label, so no loss: what each run answers instead
            probabilities = next_token_probabilities(record, 0)
            row.update({"predicted class": int(probabilities.argmax()), "its probability": float(probabilities.max())})
        if loss is not None or record.task != "classification":
            row[f"loss on this input ({loss_label(cfg)})"] = loss
        rows.append({**row, **validation_columns(run.metrics_at(epoch))})
    return rows
