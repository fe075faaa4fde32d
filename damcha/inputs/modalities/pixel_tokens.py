"""32x32 colour images as 1024 pixel tokens in raster order, each pixel one byte of 3-3-2 colour, a
start token first: position t reads pixel t - 1 and predicts pixel t (Section 5.1's 1024 spatial
tokens of 8-bit pixels, generated autoregressively).

Why 3-3-2: Section 5.1 gives a pixel 256 values but not how a colour becomes one. Three bits of red,
three of green and two of blue is the fixed palette that needs nothing fitted to the data (Image GPT's
k-means palette does, and a different fit is a different task); blue gets the fewest bits because the
eye resolves it least. The palette's levels span 0..255 evenly (black and white exact) and a pixel takes
the nearest, so a channel is off by at most 18 (red, green) or 42 (blue) of 255 after the round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from damcha.inputs.modalities.base import Modality

PIXEL_VALUES = 256  # one byte a pixel
PIXEL_START = PIXEL_VALUES  # start token of an image sequence
SIDE = 32
PIXELS = SIDE * SIDE
_LEVELS = np.array([8, 8, 4])  # red, green, blue levels of 3-3-2
_SHIFTS = np.array([5, 2, 0])  # where each channel's bits sit in the byte


def rgb332_tokens(images: np.ndarray) -> np.ndarray:
    """(..., 32, 32, 3) uint8 -> (..., 1024) int64 pixel tokens in raster order."""
    images = np.asarray(images, dtype=np.uint8)
    levels = np.rint(images * ((_LEVELS - 1) / 255)).astype(np.int64)  # (..., 32, 32, 3): nearest palette level
    tokens = (levels << _SHIFTS).sum(-1)  # (..., 32, 32)
    return tokens.reshape(*images.shape[:-3], images.shape[-3] * images.shape[-2])


def rgb332_image(tokens: np.ndarray) -> np.ndarray:
    """(..., 1024) pixel tokens -> (..., 32, 32, 3) uint8, each token its palette colour."""
    tokens = np.asarray(tokens, dtype=np.int64)
    levels = (tokens[..., None] >> _SHIFTS) & (_LEVELS - 1)  # (..., 1024, 3)
    rgb = np.rint(levels * 255 / (_LEVELS - 1)).astype(np.uint8)  # (..., 1024, 3)
    side = int(round(np.sqrt(tokens.shape[-1])))
    return rgb.reshape(*tokens.shape[:-1], side, side, 3)


def pixel_sequences(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, 32, 32, 3) uint8 -> inputs (N, 1024) [start, p0..p1022] and targets (N, 1024) [p0..p1023]."""
    pixels = rgb332_tokens(images)  # (N, 1024)
    start = np.full((len(pixels), 1), PIXEL_START, dtype=np.int64)
    return np.concatenate([start, pixels[:, :-1]], axis=1), pixels


def _cell(i: int) -> str:
    return f"r{i // SIDE + 1}c{i % SIDE + 1}"  # from 1, as heads and layers are counted


@dataclass(frozen=True)
class PixelTokens(Modality):
    def token_text(self, token):
        if int(token) >= PIXEL_VALUES:
            return "start"
        return "#" + bytes(rgb332_image(np.array([int(token)]))[0, 0]).hex()

    def token_labels(self, tokens):
        tokens = np.asarray(tokens)
        starts = len(tokens) > 0 and int(tokens[0]) == PIXEL_START
        return (["start"] if starts else []) + [_cell(i) for i in range(len(tokens) - starts)]

    def target_labels(self, targets):
        if not isinstance(targets, np.ndarray) or targets.ndim == 0:
            return []
        return [f"{_cell(i)}={self.token_text(t)}" for i, t in enumerate(targets)]

    def photo_sequences(self, images):
        return pixel_sequences(images)

    def seen_picture(self, tokens, targets, task):
        """(32, 32, 3) uint8: the palette colours of every pixel (the targets hold all 1024)."""
        return rgb332_image(np.asarray(targets)[-PIXELS:])

    def validation_fields(self, tokens, targets, label, index, dataset, task):
        return dict(targets=targets.copy(), image=rgb332_image(targets), source=f"validation image {index} ({dataset})",
                    validation_index=index)


MODALITY = PixelTokens(
    "pixel_tokens", "32x32 colour image as 1024 pixel tokens (3-3-2 colour, 256 values)", "photo", (SIDE, SIDE),
    unit="pixel", classified_unit="image", vocab_size=PIXEL_VALUES + 1, start_token=PIXEL_START,
    picture="rgb", picture_caption="What the model sees (32x32 pixels in 3-3-2 colour)",
    prediction="next_token_distribution", prediction_title="Most likely next pixels",
    blank_token=0, blank_description="a black image (every pixel 0; the start token kept)")
