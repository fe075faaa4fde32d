"""What a token is: the one place that decides how a run's inputs are read, labelled and uploaded.

A modality is named in the model config (`ModelConfig.modality`, filled in from the data set at
training, and for runs saved before the field existed, when the run is loaded). Records, figures
and pages ask the modality; none of them guesses from a data-set name, a vocabulary size or a
shape. A new modality is one entry here (and its preprocessing in `damcha.inputs.uploads`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from damcha.inputs.datasets import DIGIT_SIDE, DIGIT_START, next_patch_sequences
from damcha.model.transformer import IGNORE_INDEX


def printable(byte: int) -> str:
    """A byte as one visible character (⏎ newline, ⇥ tab, ␣ space, \\xNN otherwise unprintable)."""
    ch = chr(int(byte))
    return {"\n": "⏎", "\t": "⇥", " ": "␣"}.get(ch, ch if 32 <= int(byte) < 127 else f"\\x{int(byte):02x}")


@dataclass(frozen=True)
class Modality:
    """name: registry key. title: for people. upload: what a user can give ("image", "photo", "text",
    "ids": token ids typed as numbers, or None).
    grid: (rows, cols) when the positions tile an image (pixels or patches), else None."""

    name: str
    title: str
    upload: str | None
    grid: tuple[int, int] | None = None

    def token_labels(self, tokens: np.ndarray) -> list[str]:
        return [str(int(t)) for t in np.asarray(tokens).reshape(len(tokens), -1)[:, 0]]

    def target_labels(self, targets) -> list[str]:
        if not isinstance(targets, np.ndarray) or targets.ndim == 0:
            return []
        return [str(int(t)) if t != IGNORE_INDEX else "?" for t in targets]


class DigitImage(Modality):
    """8x8 grey levels 0..16 in raster order (a decoder reads a start token first)."""

    def token_labels(self, tokens):
        tokens = np.asarray(tokens)
        starts = len(tokens) > 0 and int(tokens[0]) == DIGIT_START
        pixels = [f"r{i // DIGIT_SIDE}c{i % DIGIT_SIDE}" for i in range(len(tokens) - starts)]
        return (["start"] if starts else []) + pixels

    def target_labels(self, targets):
        if not isinstance(targets, np.ndarray) or targets.ndim == 0:
            return []
        return [f"r{i // DIGIT_SIDE}c{i % DIGIT_SIDE}={int(t)}" for i, t in enumerate(targets)]


class ByteText(Modality):
    """UTF-8 bytes, one token each."""

    def token_labels(self, tokens):
        return [printable(t) for t in tokens]

    def target_labels(self, targets):
        if not isinstance(targets, np.ndarray) or targets.ndim == 0:
            return []
        return [printable(t) if t != IGNORE_INDEX else "?" for t in targets]


class ImagePatches(Modality):
    """Continuous patch vectors in raster order of the patch grid (a zero start vector first):
    position t reads patch t - 1 and predicts patch t (the next-patch task of this project)."""

    next_patch = True  # free-running completion of a bottom half applies

    def token_labels(self, tokens):
        rows, cols = self.grid
        return ["start"] + [f"patch r{i // cols}c{i % cols}" for i in range(len(tokens) - 1)]

    def sequences(self, patches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 64, 48) patches -> (model inputs, targets)."""
        inputs, targets = next_patch_sequences(np.asarray(patches, dtype=np.float32))
        return inputs.numpy(), targets.numpy()

    def target_labels(self, targets):
        rows, cols = self.grid
        n = len(targets) if isinstance(targets, np.ndarray) else 0
        return [f"patch r{i // cols}c{i % cols}" for i in range(n)]


class PatchesInPlace(ImagePatches):
    """Patch vectors read in place: position t reads patch t and reconstructs it (the reference
    code's causal masked-row reconstruction, here without masking: what its trained model computes
    on a whole image)."""

    next_patch = False

    def token_labels(self, tokens):
        rows, cols = self.grid
        return [f"patch r{i // cols}c{i % cols}" for i in range(len(tokens))]

    def sequences(self, patches):
        return patches, patches



MODALITIES: dict[str, Modality] = {m.name: m for m in (
    Modality("tokens", "token ids", "ids"),
    DigitImage("digit_image", "8x8 digit image, 17 grey levels", "image", (DIGIT_SIDE, DIGIT_SIDE)),
    ByteText("byte_text", "UTF-8 bytes", "text"),
    ImagePatches("image_patches", "32x32 colour image as 8x8 patches of 4x4x3", "photo", (8, 8)),
    PatchesInPlace("patches_in_place", "32x32 colour image as 8x8 patches of 4x4x3, each read in place "
                   "(the reference code's reconstruction task)", "photo", (8, 8)),
)}

DATASET_MODALITY = {
    "digits": "digit_image", "digits-cls": "digit_image",
    "text": "byte_text", "textfile": "byte_text", "enwik8": "byte_text", "text8": "byte_text",
    "cifar10": "image_patches", "cifar100": "image_patches", "sample-images": "image_patches",
}


def modality_named(name: str) -> Modality:
    return MODALITIES.get(name or "tokens", MODALITIES["tokens"])


def modality_of_dataset(dataset: str) -> str:
    return DATASET_MODALITY.get(dataset, "tokens")


def task_of(config) -> str:
    """'next_token', 'classification' or 'next_vector': what the model's head predicts."""
    if config.input_dim:
        return "next_vector"
    return "classification" if config.n_classes else "next_token"


def loss_unit(config) -> str:
    """What one loss term is about, for 'bits per …' labels."""
    if config.n_classes:
        return "image" if config.modality == "digit_image" else "sequence"
    return {"digit_image": "pixel", "byte_text": "char", "image_patches": "patch",
            "patches_in_place": "patch"}.get(config.modality, "token")


def loss_label(config) -> str:
    """The unit the app shows a loss in: squared error for vectors, bits per pixel / char / image
    / ... for likelihoods (the same everywhere: pages, figures, exports)."""
    return "squared error per patch" if config.input_dim else f"bits per {loss_unit(config)}"


def loss_factor(config) -> float:
    """What a loss computed in nats (or a squared error) is multiplied by to be shown in loss_label's unit."""
    return 1.0 if config.input_dim else 1.0 / math.log(2)
