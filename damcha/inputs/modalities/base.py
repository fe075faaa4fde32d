"""What a modality declares: how its tokens are labelled, what a user can upload, and which kinds
of picture, prediction and completion the views and analyses draw for it.

The views and analyses ask these declarations (`modality.picture`, `modality.completion`, ...), a
small closed vocabulary like a structure's kind, never a modality's name: a new modality that
reuses the kinds below is one module and one registry line (`damcha.inputs.modalities`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from damcha.model.transformer import IGNORE_INDEX

PICTURES = ("grey_levels", "rgb")  # what an image input is drawn as: (rows, cols) levels, or (h, w, 3) uint8
PREDICTIONS = ("image_from_patches", "expected_levels", "next_token_distribution")
COMPLETIONS = ("bottom_half_tokens", "bottom_half_patches", "continuation")
UPLOADS = ("image", "photo", "text", "ids")


@dataclass(frozen=True)
class Modality:
    """name: registry key. title: for people. upload: what a user can give (one of UPLOADS, or None).
    grid: (rows, cols) when the positions tile an image (pixels or patches), else None.
    unit: what one next-token loss term is about in the data set's metric names ('bits per pixel', the
    paper's 'bits per char'); shown_unit: what pages call it where that differs (a byte model's loss term
    is a byte's, whatever a character of an upload spans); classified_unit: what one classification loss
    term is about. vocab_size: the token ids a model of it reads where the modality fixes them (0: vectors,
    or the data set's own). start_token: the token a generated image begins with, where a model of the modality
    generates images (the ids below it are its pixel values). picture / prediction / completion: the kinds the views draw
    (None: none applies), with the captions that go with them. blank_token, blank_description: the
    'absent' input (the baseline of Integrated Gradients)."""

    name: str
    title: str
    upload: str | None
    grid: tuple[int, int] | None = None
    unit: str = "token"
    classified_unit: str = "sequence"
    shown_unit: str | None = None
    vocab_size: int = 0
    start_token: int | None = None
    picture: str | None = None
    picture_caption: str = ""
    prediction: str | None = None
    prediction_title: str = ""
    prediction_caption: str = ""
    completion: str | None = None
    blank_token: int = 0
    blank_description: str = "every token 0"

    def __post_init__(self):
        for value, allowed in ((self.picture, PICTURES), (self.prediction, PREDICTIONS),
                               (self.completion, COMPLETIONS), (self.upload, UPLOADS)):
            if value is not None and value not in allowed:
                raise ValueError(f"modality {self.name}: {value!r} is none of {allowed}")

    def loss_unit(self, task: str) -> str:
        """What a page calls one loss term of a model with this task."""
        return self.classified_unit if task == "classification" else self.shown_unit or self.unit

    def metric_unit(self, task: str) -> str:
        """What the data set's metric names call it (val_bits_per_<unit>)."""
        return self.classified_unit if task == "classification" else self.unit

    def photo_sequences(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Colour images (N, 32, 32, 3) uint8 as the (inputs, targets) a model reads: a modality that takes
        photos says how (the same for an upload and every image data set)."""
        raise NotImplementedError(f"modality {self.name} takes no photos")

    def token_text(self, token: int) -> str:
        """One token as a short visible text (a next-token distribution's labels)."""
        return str(int(token))

    def token_labels(self, tokens: np.ndarray) -> list[str]:
        return [str(int(t)) for t in np.asarray(tokens).reshape(len(tokens), -1)[:, 0]]

    def target_labels(self, targets) -> list[str]:
        if not isinstance(targets, np.ndarray) or targets.ndim == 0:
            return []
        return [self.token_text(t) if t != IGNORE_INDEX else "?" for t in targets]

    def frame(self, inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """A data set's stored validation inputs as a model of this modality reads them."""
        return inputs

    def seen_picture(self, tokens: np.ndarray, targets, task: str) -> np.ndarray | None:
        """What the model sees, as the array `picture` names (None without a picture)."""
        return None

    def validation_fields(self, tokens: np.ndarray, targets: np.ndarray, label, index: int, dataset: str,
                          task: str) -> dict:
        """The ModelInput fields of validation sample `index` besides its modality and tokens."""
        return dict(targets=targets.copy(), source=f"validation sample {index}", validation_index=index)
