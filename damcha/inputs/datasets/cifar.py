"""CIFAR-10/100 from their python batches (read without unpickling code), as next-patch sequences."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from damcha.inputs.datasets.base import DataError, DataSet, DataSetSpec
from damcha.inputs.modalities.image_patches import cifar_patches, next_patch_sequences


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """CIFAR's python batches are pickles; this reads them allowing nothing but numpy arrays,
    lists, dicts, strings and numbers, so a hostile file cannot run code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only numpy arrays are allowed")


def read_cifar_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10/100 python batch -> images (N, 32, 32, 3) uint8 and labels (N,)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file (expected a CIFAR python batch such as data_batch_1 or train)")
    try:
        d = _ArrayOnlyUnpickler(io.BytesIO(p.read_bytes()), encoding="bytes").load()
    except Exception as e:  # a damaged or hostile pickle can fail with almost any error type
        raise DataError(f"{p}: not a CIFAR python batch ({e})") from None
    if not isinstance(d, dict):
        raise DataError(f"{p}: not a CIFAR python batch (expected a dict with b'data' and labels)")
    d = {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}
    labels = d.get("labels", d.get("fine_labels"))
    data = d.get("data")
    if data is None or labels is None:
        raise DataError(f"{p}: not a CIFAR python batch (missing 'data' or 'labels'/'fine_labels')")
    data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8 or len(labels) != len(data):
        raise DataError(f"{p}: not a CIFAR python batch (expected data of shape (N, 3072) uint8 and N labels, got {data.shape} {data.dtype})")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), np.asarray(labels, dtype=np.int64)


def load_cifar_patches(directory: str | Path, which: str = "cifar10") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CIFAR-10/100 folder -> (train patches, train labels, test patches, test labels) for next-patch MSE."""
    d = Path(directory)
    if not d.is_dir():
        raise DataError(f"{d}: no such directory (expected the extracted cifar-10-batches-py or cifar-100-python folder)")
    names = ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"]) if which == "cifar10" else (["train"], ["test"])
    out = []
    for group in names:
        found = [d / n for n in group if (d / n).is_file()]
        if not found:
            raise DataError(f"{d}: missing {', '.join(group)} (expected the {which} python batches)")
        parts = [read_cifar_batch(f) for f in found]
        out.append((cifar_patches(np.concatenate([p[0] for p in parts])), np.concatenate([p[1] for p in parts])))
    return out[0][0], out[0][1], out[1][0], out[1][1]


CIFAR_VAL_IMAGES = 2000  # validation: the first images of the test batch (evaluated every epoch)


def cifar_dataset(name: str, directory: str | Path) -> DataSet:
    """Next-patch prediction like the paper: 64 patches of 4x4x3 per image in raster order; the
    model reads a zero start vector then patches 0..62 and predicts patches 0..63 (MSE)."""
    train, train_labels, test, test_labels = load_cifar_patches(directory, name)
    test, test_labels = test[:CIFAR_VAL_IMAGES], test_labels[:CIFAR_VAL_IMAGES]

    train_x, train_y = next_patch_sequences(train)
    val_x, val_y = next_patch_sequences(test)
    split = {"source": str(directory), "n_train": len(train), "n_val": len(test), "val": f"first {len(test)} test images"}
    return DataSet(name, "next_vector", 0, 64, train_x, train_y, val_x, val_y, val_labels=test_labels, split=split)


SPECS = tuple(
    DataSetSpec(name, name.upper().replace("CIFAR", "CIFAR-"), "image_patches", "next_vector",
                lambda path, block_size, seed, name=name: cifar_dataset(name, path),
                needs_path="the extracted python-batches folder")
    for name in ("cifar10", "cifar100"))
