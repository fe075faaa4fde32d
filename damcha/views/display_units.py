"""Numbers in the unit a run's pages show its losses in (bits per pixel, byte, image…, or the
squared error of image patches): the library computes in nats, and every page, table and export
asks here instead of scaling a loss itself."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from damcha.inputs.modalities import loss_factor, loss_factor_for, loss_label, loss_label_for

# One palette for losses on every page and in every export (colour-blind safe, Okabe-Ito): training blue,
# validation orange; the loss of one input is drawn in the training blue.
LOSS_COLOURS = {"train": "#0072B2", "validation": "#E69F00"}
LOSS_COLOUR = LOSS_COLOURS["train"]


def loss_colour(name: str) -> str:
    """The palette's colour for a loss series named `name` (train_nll, val_nll, validation, ...)."""
    return LOSS_COLOURS["validation"] if name.startswith("val") else LOSS_COLOUR


@dataclass(frozen=True)
class LossUnit:
    """A loss in nats (or a squared error) times `factor` is one in `label`'s unit."""

    factor: float
    label: str

    @classmethod
    def of(cls, config) -> LossUnit:
        """The unit of a run with this model config (see damcha.inputs.modalities.loss_label)."""
        return cls(loss_factor(config), loss_label(config))

    @classmethod
    def of_record(cls, record) -> LossUnit:
        """The unit of an inspection record's losses (its task and what a loss term is about)."""
        return cls(loss_factor_for(record.task), loss_label_for(record.task, record.loss_unit))

    def value(self, nats):
        """A loss (a number, an array, or None for none) in this unit."""
        if nats is None:
            return None
        return nats * self.factor if np.isscalar(nats) else np.asarray(nats, dtype=float) * self.factor

    def text(self, nats, signed: bool = False, digits: int = 4) -> str:
        """A loss as the page writes it ("—" for none)."""
        if nats is None:
            return "—"
        return f"{self.value(nats):{'+' if signed else ''}.{digits}f}"

    def rows(self, rows: Iterable[dict], columns: Sequence[str]) -> list[dict]:
        """Table rows with the loss `columns` in this unit, each column named with it."""
        return [{(f"{k} ({self.label})" if k in columns else k): (self.value(v) if k in columns else v)
                 for k, v in row.items()} for row in rows]


def test_loss(run) -> str:
    """A run's test-split loss with its unit and the epoch it is of, or "—" (no test split, or not
    reached): evaluated once, after the last epoch."""
    test = run.test or {}
    unit = LossUnit.of(run.model_config)
    value = test.get("test_mse" if run.model_config.input_dim else "test_nll")
    return "—" if value is None else f"{unit.text(value)} {unit.label} (epoch {test['epoch']})"


def final_validation_loss(run) -> str:
    """A run's validation loss at its last logged epoch with its unit ("—" when none was logged):
    runs of different units share the Home table, so each cell names its own."""
    last = run.metrics[-1] if run.metrics else {}
    unit = LossUnit.of(run.model_config)
    value = last.get("val_mse" if run.model_config.input_dim else "val_nll")
    return "—" if value is None else f"{unit.text(value)} {unit.label}"


def mode_outcome_rows(outcomes, config) -> list[dict]:
    """One row per metric mode of damcha.analysis.ablation's outcomes on one input: its loss in the
    run's unit, and a classifier's predicted class and probability."""
    unit = LossUnit.of(config)
    rows = []
    for o in outcomes:
        row = {"metric mode": o.title, unit.label: unit.value(o.loss)}
        if o.predicted_class is not None:
            row["predicted class"] = o.predicted_class
            row["p(class)"] = o.class_probability
        rows.append(row)
    return rows


def attribution_sentence(attribution, target: str, config) -> str:
    """What Integrated Gradients explained and that its attributions add up (completeness), the loss
    in the run's unit (a scalar of M(x) as it is)."""
    unit = LossUnit.of(config) if target == "loss" else LossUnit(1.0, "")
    a = attribution.scaled(unit.factor)
    u = f" {unit.label}" if unit.label else ""
    return (f"F(input) = {a.value:.4g}{u}, F(baseline) = {a.baseline_value:.4g}{u}; the attributions add up to "
            f"{a.values.sum():.4g}{u} (captum's convergence delta {a.delta:.2g}).")


def head_metric_ablation_sentence(changes: Sequence[float], config) -> str:
    """The loss change when each head's metric m_i is ablated, in the run's unit."""
    unit = LossUnit.of(config)
    return (f"Loss change ({unit.label}) when head i's metric m_i is ablated (the head attends uniformly): "
            + ", ".join(f"head {i + 1}: **{unit.text(v, signed=True)}**" for i, v in enumerate(changes)))


def residue_check_sentence(check, config) -> str:
    """What keeping only the learned part of M(x) changed (damcha.analysis.interventions.residue_check),
    the loss change in the run's unit."""
    unit = LossUnit.of(config)
    row_sum = not check.residue_learned
    kept = (f"Keeping only the learned part of M(x) (each block m_i / H, the unidentifiable residue dropped; {check.form} "
            "form)" if row_sum else "Keeping only each block row's mean m_i / H (its learned deviation from the mean "
            f"dropped; {check.form} form)")
    unchanged = check.max_logit_change <= rounding_bound(check.largest_output)
    verdict = ("unchanged up to float rounding, as the identifiability statement says" if unchanged and row_sum
               else "unchanged up to float rounding" if unchanged
               else "changed: the model uses what was dropped" + ("" if row_sum else ", which this form learns"))
    return (f"{kept}: largest {output_word(config)} change "
            f"{output_change_text(check.max_logit_change, check.largest_output)}, loss change "
            f"{unit.value(check.loss_change):+.3g} {unit.label} — {verdict}.")


def output_word(config) -> str:
    """What one output of the model is: a patch model regresses vectors, it has no logits."""
    return "predicted-vector entry" if config.input_dim else "logit"


def rounding_bound(largest_output: float) -> float:
    """How far two float32 forwards of the same arithmetic in another order may differ on outputs of this size
    (16 units in the last place of the largest): a change within it is rounding, not the intervention."""
    return 16 * float(np.finfo(np.float32).eps) * largest_output


def output_change_text(change: float, largest_output: float) -> str:
    """The largest change of an output to the precision a float32 forward has: the same change reads the same
    wherever it is shown, whichever order of arithmetic computed it (the page's metric, the residue check)."""
    bound = rounding_bound(largest_output)
    return f"below float32 rounding (< {bound:.1g})" if change <= bound else f"{change:.3g}"
