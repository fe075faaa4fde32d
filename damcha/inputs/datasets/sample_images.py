"""A CIFAR-like task offline: 32x32 crops of scikit-learn's two bundled photographs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from damcha.inputs.datasets.base import DataSet, DataSetSpec
from damcha.inputs.modalities.image_patches import cifar_patches, next_patch_sequences

SAMPLE_IMAGE_TRAIN_FRACTION = 0.75  # of each photograph's width: crops left of the cut train, right of it validate
SAMPLE_IMAGE_CROPS = (2048, 256)  # training and validation crops (over both photographs)


def sample_image_crops(seed: int = 0) -> dict:
    """Seeded 32x32 crops (with horizontal flips) of scikit-learn's two bundled photographs (a temple
    and a flower, 427x640). Training crops lie in the left 75% of each photograph and validation
    crops in the right 25%, so no validation pixel is seen in training. A stand-in for CIFAR-10.

    Returns {"train": (N, 32, 32, 3) uint8, "val": (M, 32, 32, 3) uint8, "regions": [...], "origins":
    {"train": [(image, y, x, flipped)], "val": [...]}}."""
    from sklearn.datasets import load_sample_images

    photos = load_sample_images()
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {"train": [], "val": []}
    origins: dict[str, list] = {"train": [], "val": []}
    regions = []
    for image_index, (photo, path) in enumerate(zip(photos.images, photos.filenames)):
        h, w, _ = photo.shape
        cut = int(w * SAMPLE_IMAGE_TRAIN_FRACTION)
        spans = {"train": (0, cut), "val": (cut, w)}
        regions.append({"image": Path(path).name, "size": [h, w], "train_columns": [0, cut], "val_columns": [cut, w]})
        for split, n in zip(("train", "val"), SAMPLE_IMAGE_CROPS):
            lo, hi = spans[split]
            for _ in range(n // len(photos.images)):
                y = int(rng.integers(0, h - 32 + 1))
                x = int(rng.integers(lo, hi - 32 + 1))
                crop = photo[y:y + 32, x:x + 32]
                flipped = bool(rng.random() < 0.5)
                out[split].append(crop[:, ::-1] if flipped else crop)
                origins[split].append((image_index, y, x, flipped))
    return {"train": np.stack(out["train"]), "val": np.stack(out["val"]), "regions": regions, "origins": origins}


def sample_images_dataset(split_seed: int = 0) -> DataSet:
    """Next-patch prediction (MSE) on 32x32 crops of the bundled photographs: a CIFAR-like task offline."""
    crops = sample_image_crops(split_seed)
    train_x, train_y = next_patch_sequences(cifar_patches(crops["train"]))
    val_x, val_y = next_patch_sequences(cifar_patches(crops["val"]))
    split = {"seed": split_seed, "n_train": len(train_x), "n_val": len(val_x), "regions": crops["regions"],
             "note": "32x32 crops with flips of scikit-learn's two sample photographs; a stand-in for CIFAR-10"}
    return DataSet("sample-images", "next_vector", 0, 64, train_x, train_y, val_x, val_y, split=split)


SPECS = (
    DataSetSpec("sample-images", "crops of scikit-learn's two sample photographs", "image_patches", "next_vector",
                lambda path, block_size, seed: sample_images_dataset(seed), bundled=True,
                demo_train=dict(epochs=10, batch_size=32, completion_images=64)),
)
