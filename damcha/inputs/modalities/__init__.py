"""What a token is: the registry of modalities, the one place that decides how a run's inputs are
read, labelled, uploaded and drawn.

A modality is named in the model config (`ModelConfig.modality`, filled in from the data set at
training, and for runs saved before the field existed, when the run is loaded). Records, figures
and pages ask the modality's declarations (`damcha.inputs.modalities.base`); none of them asks
its name, a data-set name, a vocabulary size or a shape. A new modality is one module here
defining `MODALITY` and one line in `MODALITY_MODULES` (see docs/extending.md, "Adding a modality").
"""

from __future__ import annotations

import math

from damcha.inputs.modalities import byte_text, digit_image, image_patches, patches_in_place, pixel_tokens, tokens
from damcha.inputs.modalities.base import Modality
from damcha.inputs.modalities.byte_text import printable

MODALITY_MODULES = (tokens, digit_image, byte_text, image_patches, patches_in_place, pixel_tokens)
MODALITIES: dict[str, Modality] = {m.MODALITY.name: m.MODALITY for m in MODALITY_MODULES}
DEFAULT = tokens.MODALITY.name

__all__ = ["MODALITIES", "Modality", "completion_kind", "loss_factor", "loss_label", "loss_unit", "modality_named", "printable", "register",
           "task_of", "unregister"]


def register(modality: Modality) -> None:
    """Add a modality (replacing one of the same name)."""
    MODALITIES[modality.name] = modality


def unregister(name: str) -> None:
    if name != DEFAULT:
        MODALITIES.pop(name, None)


def modality_named(name: str) -> Modality:
    return MODALITIES.get(name or DEFAULT, MODALITIES[DEFAULT])


def task_of(config) -> str:
    """'next_token', 'classification' or 'next_vector': what the model's head predicts."""
    if config.n_classes:
        return "classification"
    return "next_vector" if config.input_dim else "next_token"


# Which task each completion kind is scored on (a digit decoder's bottom half, a patch model's bottom patches).
COMPLETED_TASK = {"bottom_half_tokens": "next_token", "bottom_half_patches": "next_vector"}


def completion_kind(modality: str, task: str) -> str | None:
    """The completion a model of this modality and task is scored on (the modality's kind, where it applies to the
    task), or None."""
    kind = modality_named(modality).completion
    return kind if kind is not None and COMPLETED_TASK.get(kind) == task else None


def loss_unit(config) -> str:
    """What one loss term is about, for 'bits per …' labels."""
    return modality_named(config.modality).loss_unit(task_of(config))


def loss_label(config) -> str:
    """The unit the app shows a loss in: squared error for vectors, bits per pixel / byte / image
    / ... for likelihoods (the same everywhere: pages, figures, exports)."""
    return loss_label_for(task_of(config), loss_unit(config))


def loss_factor(config) -> float:
    """What a loss computed in nats (or a squared error) is multiplied by to be shown in loss_label's unit."""
    return loss_factor_for(task_of(config))


def loss_label_for(task: str, unit: str) -> str:
    """loss_label of a model with this task whose loss terms are about `unit` (see loss_unit)."""
    return "squared error per patch" if task == "next_vector" else f"bits per {unit}"


def loss_factor_for(task: str) -> float:
    """loss_factor of a model with this task."""
    return 1.0 if task == "next_vector" else 1.0 / math.log(2)
