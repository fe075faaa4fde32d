"""A folder of image files, one sub-folder per class (`root/<class>/*.png`), or with its splits
(`root/train/<class>/…`, `root/validation/…` or `root/val/…`, `root/test/…`), as next-patch
prediction of 32x32 RGB images (other sizes centre-cropped and resized, as uploads are).

Every file is checked before training starts (a corrupt or truncated image is named); images are
decoded batch by batch, so memory is bounded by the batch, not the folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from damcha.inputs.datasets.arrow_files import SPLITS, refuse_pickle
from damcha.inputs.datasets.base import DataError, DataSet, DataSetSpec, given
from damcha.inputs.datasets.image_sets import ImageStore, encoded_image, image_dataset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def _class_files(root: Path, classes: list[str] | None = None) -> tuple[list[Path], np.ndarray, list[str]]:
    found = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    classes = classes or found
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise DataError(f"{root}: classes {', '.join(unknown[:3])} are not among the training classes")
    files, labels = [], []
    for label, name in enumerate(classes):
        for f in sorted((root / name).iterdir()) if (root / name).is_dir() else []:
            if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES:
                files.append(f)
                labels.append(label)
            elif f.is_file():
                refuse_pickle(f)
    if not files:
        raise DataError(f"{root}: no images (expected <class>/*.png, .jpg, .jpeg, .bmp, .gif or .webp)")
    return files, np.asarray(labels, dtype=np.int64), classes


def _checked(files: list[Path]) -> None:
    """Every image readable before training starts: a corrupt or truncated file is named."""
    for f in files:
        try:
            with Image.open(f) as img:
                img.verify()
        except Exception as e:  # noqa: BLE001 — PIL raises many types for a damaged file
            raise DataError(f"{f}: a corrupt or unreadable image ({type(e).__name__}: {e}); remove or replace it") from None


def file_store(files: list[Path], labels: np.ndarray) -> ImageStore:
    _checked(files)
    return ImageStore(len(files), lambda idx: np.stack([encoded_image(files[i].read_bytes(), str(files[i])) for i in idx]),
                      labels)


def image_folder(path: str | Path, split_seed: int) -> DataSet:
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: no such folder (expected <class>/*.png sub-folders, or train/ and test/ with them)")
    split_dirs = {SPLITS[d.name.lower()]: d for d in root.iterdir() if d.is_dir() and d.name.lower() in SPLITS}
    train_root = split_dirs.get("train", root)
    files, labels, classes = _class_files(train_root)
    stores = {"train": file_store(files, labels)}
    for split in ("validation", "test"):
        if split in split_dirs:
            stores[split] = file_store(*_class_files(split_dirs[split], classes)[:2])
    return image_dataset("image-folder", stores["train"], split_seed,
                         {"source": str(root), "format": "image folder", "classes": classes},
                         val=stores.get("validation"), test=stores.get("test"))


SPECS = (
    DataSetSpec("image-folder", "a folder of images, one sub-folder per class", "image_patches", "next_vector",
                lambda path, block_size, seed: image_folder(given(path), seed),
                needs_path="a folder of <class>/ sub-folders of images (optionally under train/ and test/)"),
)
