"""scikit-learn's 8x8 digits (1,797 images): a pixel decoder and a classifier, split 80/20 by a seed."""

from __future__ import annotations

import numpy as np
import torch

from damcha.inputs.datasets.base import DataSet, DataSetSpec
from damcha.inputs.modalities.digit_image import DIGIT_LEVELS, digit_levels_to_tokens, digit_sequence


def digits_split(n: int, seed: int, val_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def load_digits_data(classification: bool = False, split_seed: int = 0) -> DataSet:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = digit_levels_to_tokens(bunch.images)  # (N, 64)
    labels = bunch.target.astype(np.int64)
    train_idx, val_idx = digits_split(len(pixels), split_seed)
    split = {"seed": split_seed, "val_fraction": 0.2, "n_train": len(train_idx), "n_val": len(val_idx),
             "val_indices": val_idx.tolist()}
    if classification:
        x = torch.from_numpy(pixels)
        y = torch.from_numpy(labels)
        return DataSet("digits-cls", "classification", DIGIT_LEVELS + 1, 64, x[train_idx], y[train_idx],
                       x[val_idx], y[val_idx], n_classes=10, val_labels=labels[val_idx], split=split)
    seq = torch.from_numpy(digit_sequence(pixels))  # (N, 65)
    x, y = seq[:, :-1], seq[:, 1:]
    return DataSet("digits", "next_token", DIGIT_LEVELS + 1, 64, x[train_idx], y[train_idx],
                   x[val_idx], y[val_idx], val_labels=labels[val_idx], split=split)


DIGITS_DEMO = dict(epochs=12, completion_images=32, completion_samples=2, batch_size=64)

SPECS = (
    DataSetSpec("digits", "8x8 digits, pixel by pixel", "digit_image", "next_token",
                lambda path, block_size, seed: load_digits_data(False, seed), bundled=True, demo_train=DIGITS_DEMO),
    DataSetSpec("digits-cls", "8x8 digits, classified", "digit_image", "classification",
                lambda path, block_size, seed: load_digits_data(True, seed), bundled=True, demo_train=DIGITS_DEMO),
)
