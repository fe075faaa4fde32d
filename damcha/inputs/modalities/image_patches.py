"""32x32 colour images as 64 continuous patch vectors of 4x4x3 in raster order of the patch grid, a
zero start vector first: position t reads patch t - 1 and predicts patch t (the next-patch task)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from damcha.inputs.modalities.base import Modality

PATCH = 4  # pixels per patch side
GRID = (8, 8)  # patches per image side


def cifar_patches(images: np.ndarray, patch: int = PATCH) -> np.ndarray:
    """(N, 32, 32, 3) uint8 -> (N, 64, 48) float32 patches in [0, 1], raster order of 4x4 patches."""
    N, S = images.shape[0], images.shape[1]
    g = S // patch
    x = images.reshape(N, g, patch, g, patch, 3).transpose(0, 1, 3, 2, 4, 5)  # (N, g, g, p, p, 3)
    return (x.reshape(N, g * g, patch * patch * 3) / 255.0).astype(np.float32)


def patches_to_image(patches: np.ndarray, patch: int = PATCH) -> np.ndarray:
    """(64, 48) patches in raster order -> (32, 32, 3) image: the inverse of cifar_patches for one image."""
    g = int(round(np.sqrt(len(patches))))
    x = np.asarray(patches).reshape(g, g, patch, patch, 3).transpose(0, 2, 1, 3, 4)  # (g, p, g, p, 3)
    return x.reshape(g * patch, g * patch, 3)


def patches_image(patches: np.ndarray) -> np.ndarray:
    """(64, 48) patches in [0, 1] -> (32, 32, 3) uint8 image."""
    return np.rint(patches_to_image(np.clip(patches, 0, 1)) * 255).astype(np.uint8)


def next_patch_sequences(patches: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 64, 48) patches -> model inputs (a zero start vector, then patches 0..62) and targets (patches 0..63)."""
    start = np.zeros((len(patches), 1, patches.shape[-1]), dtype=np.float32)
    return torch.from_numpy(np.concatenate([start, patches[:, :-1]], axis=1)), torch.from_numpy(patches)


def _patch(i: int) -> str:
    return f"patch r{i // GRID[1] + 1}c{i % GRID[1] + 1}"  # from 1, as heads and layers are counted


@dataclass(frozen=True)
class ImagePatches(Modality):
    def token_labels(self, tokens):
        return ["start"] + [_patch(i) for i in range(len(tokens) - 1)]

    def target_labels(self, targets):
        n = len(targets) if isinstance(targets, np.ndarray) else 0
        return [_patch(i) for i in range(n)]

    def patch_sequences(self, patches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 64, 48) patches -> (model inputs, targets)."""
        inputs, targets = next_patch_sequences(np.asarray(patches, dtype=np.float32))
        return inputs.numpy(), targets.numpy()

    def photo_sequences(self, images):
        return self.patch_sequences(cifar_patches(np.asarray(images, dtype=np.uint8)))

    def frame(self, inputs, targets):
        return self.patch_sequences(targets)[0]

    def seen_picture(self, tokens, targets, task):
        """(32, 32, 3) uint8: the image a record is about (its targets are all 64 patches)."""
        return patches_image(targets)

    def validation_fields(self, tokens, targets, label, index, dataset, task):
        return dict(targets=targets.copy(), image=patches_image(targets), source=f"validation crop {index} ({dataset})",
                    validation_index=index)


MODALITY = ImagePatches(
    "image_patches", "32x32 colour image as 8x8 patches of 4x4x3", "photo", GRID, unit="patch",
    picture="rgb", picture_caption="What the model sees (32x32, 8x8 patches)",
    prediction="image_from_patches", prediction_title="Next-patch prediction (teacher forcing)",
    prediction_caption="predicted, each patch from the true ones before it",
    completion="bottom_half_patches",
    blank_description="a black image (every patch zero; the start vector kept)")
