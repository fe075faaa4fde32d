"""8x8 digits in 17 grey levels, one pixel a token in raster order (a decoder reads a start token
first): scikit-learn's digits and uploaded images made the same way."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from damcha.inputs.modalities.base import Modality

DIGIT_LEVELS = 17  # load_digits pixels are integers 0..16
DIGIT_START = DIGIT_LEVELS  # start token of a digit sequence
DIGIT_SIDE = 8


def digit_levels_to_tokens(levels: np.ndarray) -> np.ndarray:
    """(..., 8, 8) grey levels 0..16 -> (..., 64) pixel tokens in raster order."""
    levels = np.asarray(levels)
    return np.clip(np.rint(levels), 0, DIGIT_LEVELS - 1).astype(np.int64).reshape(*levels.shape[:-2], DIGIT_SIDE**2)


def digit_sequence(pixels: np.ndarray) -> np.ndarray:
    """(..., 64) pixel tokens -> (..., 65) [start, p0..p63] decoder sequence."""
    start = np.full((*pixels.shape[:-1], 1), DIGIT_START, dtype=np.int64)
    return np.concatenate([start, pixels], axis=-1)


def _cell(i: int) -> str:
    """Row and column from 1, as heads and layers are counted on every page."""
    return f"r{i // DIGIT_SIDE + 1}c{i % DIGIT_SIDE + 1}"


@dataclass(frozen=True)
class DigitImage(Modality):
    def token_labels(self, tokens):
        tokens = np.asarray(tokens)
        starts = len(tokens) > 0 and int(tokens[0]) == DIGIT_START
        return (["start"] if starts else []) + [_cell(i) for i in range(len(tokens) - starts)]

    def target_labels(self, targets):
        if not isinstance(targets, np.ndarray) or targets.ndim == 0:
            return []
        return [f"{_cell(i)}={int(t)}" for i, t in enumerate(targets)]

    def seen_picture(self, tokens, targets, task):
        """(8, 8) grey levels: the targets of a decoder (every pixel), the tokens of a classifier."""
        pixels = tokens if task == "classification" else targets
        return np.asarray(pixels)[-DIGIT_SIDE**2:].reshape(DIGIT_SIDE, DIGIT_SIDE)

    def validation_fields(self, tokens, targets, label, index, dataset, task):
        classifier = task == "classification"
        pixels = tokens if classifier else targets
        return dict(targets=int(targets) if classifier else targets.copy(), levels=pixels.reshape(DIGIT_SIDE, DIGIT_SIDE),
                    label=int(label), source=f"validation sample {index} (digit {int(label)})", validation_index=index)


MODALITY = DigitImage(
    "digit_image", "8x8 digit image, 17 grey levels", "image", (DIGIT_SIDE, DIGIT_SIDE),
    unit="pixel", classified_unit="image",
    picture="grey_levels", picture_caption="What the model sees (8x8, levels 0..16)",
    prediction="expected_levels", prediction_title="Model's expected pixels",
    completion="bottom_half_tokens",
    blank_token=0, blank_description="every pixel blank (level 0; the start token kept)")
