"""What every image data set shares: a store of images read by index, a validation split carved
from the training images with the split seed, and rows made batch by batch as the data set's modality
reads an image (next-patch vectors, pixel tokens).

A store holds images compactly (a uint8 array, an Arrow column of encoded images, image files)
and decodes only the rows a batch asks for, so memory is bounded by the batch, not the data set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from damcha.inputs.datasets.base import DataError, DataSet
from damcha.inputs.datasets.lazy_rows import LazyRows
from damcha.inputs.modalities import Modality, modality_named
from damcha.inputs.uploads import InputError, photo_from_bytes

SIDE = 32  # the paper's images: 32x32, 64 patches of 4x4x3
MAX_CARVED_VAL = 5000  # CIFAR's 50,000 training images -> 45,000 train / 5,000 validation


@dataclass(frozen=True)
class ImageStore:
    """n images; `read(idx)` gives them as (len(idx), 32, 32, 3) uint8; labels (n,) or None."""

    n: int
    read: Callable[[np.ndarray], np.ndarray]
    labels: np.ndarray | None = None

    def subset(self, idx: np.ndarray) -> ImageStore:
        idx = np.asarray(idx, dtype=np.int64)
        return ImageStore(len(idx), lambda i: self.read(idx[i]),
                          None if self.labels is None else self.labels[idx])


def array_store(images: np.ndarray, labels: np.ndarray | None = None) -> ImageStore:
    return ImageStore(len(images), lambda idx: images[idx], labels)


def encoded_image(data: bytes, where: str) -> np.ndarray:
    """One encoded image (PNG, JPEG…) as the paper's 32x32 RGB, the way uploads are made."""
    try:
        return photo_from_bytes(data, SIDE).image
    except InputError as e:
        raise DataError(f"{where}: {e}") from None


def carve_validation(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) indices: a tenth of the training images, at most 5,000, drawn with the seed."""
    n_val = max(1, min(MAX_CARVED_VAL, n // 10))
    if n - n_val < 1:
        raise DataError(f"{n} training image(s) leave none to train on after the validation images")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def image_rows(store: ImageStore, modality: Modality) -> tuple[LazyRows, LazyRows]:
    """The store's images as the modality reads them (its photo_sequences: inputs, targets), made per batch."""
    inputs, targets = modality.photo_sequences(np.zeros((1, SIDE, SIDE, 3), dtype=np.uint8))  # the row shapes

    def make(which):
        return lambda idx: torch.from_numpy(modality.photo_sequences(store.read(idx))[which])

    return LazyRows(store.n, inputs.shape[1:], make(0)), LazyRows(store.n, targets.shape[1:], make(1))


def image_dataset(name: str, train: ImageStore, split_seed: int, split: dict, val: ImageStore | None = None,
                  test: ImageStore | None = None, modality: str = "image_patches") -> DataSet:
    """The images as the modality reads them (next-patch regression by default; a modality with a fixed
    vocabulary is next-token prediction): validation given, or carved from train with the seed; every
    split's rows made batch by batch."""
    reads = modality_named(modality)
    if val is None:
        train_idx, val_idx = carve_validation(train.n, split_seed)
        train, val = train.subset(train_idx), train.subset(val_idx)
        carved = f"{val.n:,} validation images carved from the training images with split seed {split_seed}"
    else:
        carved = f"{val.n:,} validation images (the validation split)"
    val_x, val_y = image_rows(val, reads)
    train_x, train_y = image_rows(train, reads)
    test_x, test_y = image_rows(test, reads) if test is not None else (None, None)
    tested = f", {test.n:,} test images (evaluated once, after training)" if test is not None else ", no test split"
    split = {**split, "seed": split_seed, "n_train": train.n, "n_val": val.n, "n_test": test.n if test else 0,
             "split": f"{train.n:,} training images, {carved}{tested}"}
    task = "next_token" if reads.vocab_size else "next_vector"
    return DataSet(name, task, reads.vocab_size, train_x.shape[1], train_x, train_y, val_x, val_y, val_labels=val.labels,
                   test_inputs=test_x, test_targets=test_y, split=split)
