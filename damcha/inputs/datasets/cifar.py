"""CIFAR-10/100 from their python batches (read without unpickling code, checked against the
published MD5s) on the standard split, each as two data sets: next-patch sequences (`cifar10`, the
authors' repository's image model) and 1024 pixel tokens (`cifar10-pixels`, Section 5.1's)."""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from damcha.inputs.datasets.base import AtScale, DataError, DataSet, DataSetSpec, data_file
from damcha.inputs.datasets.checksums import PublishedFile, check_standard, file_digests
from damcha.inputs.datasets.image_sets import array_store, image_dataset
from damcha.inputs.modalities import modality_named

MAX_BATCH_BYTES = 400_000_000  # CIFAR-100's train batch is about 155 MB
MAX_CLASSES = 100  # CIFAR-100's fine labels


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
    _refuse_not_a_batch_file(p)
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
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise DataError(f"{p}: not a CIFAR python batch (expected data of shape (N, 3072) uint8, got {data.shape} "
                        f"{data.dtype})")
    name = "labels" if "labels" in d else "fine_labels"
    if not isinstance(labels, list | tuple | np.ndarray):
        raise DataError(f"{p}: '{name}' is {type(labels).__name__} {str(labels)[:40]}, not a list of class numbers")
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != len(data) or labels.dtype.kind not in "iu":
        raise DataError(f"{p}: '{name}' holds {labels.shape} of {labels.dtype}, not {len(data)} whole class numbers "
                        "(one per image)")
    if len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < MAX_CLASSES:
        raise DataError(f"{p}: '{name}' holds classes {int(labels.min())}..{int(labels.max())}, outside "
                        f"0..{MAX_CLASSES - 1}")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels.astype(np.int64)


def _refuse_not_a_batch_file(p: Path) -> None:
    """A batch must be a regular file of at most MAX_BATCH_BYTES (read whole: a FIFO would block, /dev/zero fill)."""
    info = data_file(p, "a CIFAR python batch file such as data_batch_1 or train").stat()
    if info.st_size > MAX_BATCH_BYTES:
        raise DataError(f"{p}: {info.st_size:,} bytes, more than a CIFAR python batch holds ({MAX_BATCH_BYTES:,} at "
                        "most; CIFAR-100's train is about 155 MB)")


# The files of the published python versions and their MD5s, as www.cs.toronto.edu/~kriz/cifar.html
# publishes them (the same lists torchvision checks).
KRIZHEVSKY = "www.cs.toronto.edu/~kriz/cifar.html"
PUBLISHED = {
    "cifar10": ({f"data_batch_{i}": md5 for i, md5 in enumerate(
        ("c99cafc152244af753f735de768cd75f", "d4bba439e000b95fd0a9bffe97cbabec", "54ebc095f3ab1f0389bbae665268c751",
         "634d18415352ddfa80567beed471001a", "482c414d41f54cd18b22e5b47cb7c3cb"), 1)},
                {"test_batch": "40351d587109b95175f43aff81a1287e"}),
    "cifar100": ({"train": "16019d7e3df5f24257cddd939b257f8d"}, {"test": "f0ef6b0ae62326f3e7ffdfab6717acfc"}),
}
@dataclass
class CifarFolder:
    """The images of a CIFAR python-batches folder and whether they are the published files."""

    train_images: np.ndarray  # (N, 32, 32, 3) uint8
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    standard: bool
    md5: dict


def read_cifar_folder(directory: str | Path, which: str = "cifar10", nonstandard_ok: bool = False) -> CifarFolder:
    """A CIFAR-10/100 folder, every batch file checked against its published MD5: a missing, truncated
    or altered file is refused in words unless nonstandard_ok (then the folder is not standard)."""
    d = Path(directory)
    if not d.is_dir():
        raise DataError(f"{d}: no such directory (expected the extracted cifar-10-batches-py or cifar-100-python folder)")
    standard, md5, parts = True, {}, []
    for group in PUBLISHED[which]:
        found = [n for n in group if os.path.lexists(d / n)]  # present: a FIFO or folder is refused, not skipped
        missing = [n for n in group if n not in found]
        if not found or (missing and not nonstandard_ok):
            raise DataError(f"{d}: missing {', '.join(missing)} (expected the {which} python batches"
                            + ("; pass --nonstandard-data to train on the batches present)" if found else ")"))
        standard &= not missing
        for name in found:
            _refuse_not_a_batch_file(d / name)
            digests = file_digests(d / name)
            md5[name] = digests["md5"]
            standard &= check_standard(str(d / name), digests, PublishedFile(f"{which} {name}", KRIZHEVSKY, md5=group[name]),
                                       nonstandard_ok)
        images = [read_cifar_batch(d / n) for n in found]
        parts.append((np.concatenate([i for i, _ in images]), np.concatenate([label for _, label in images])))
    (train, train_labels), (test, test_labels) = parts
    return CifarFolder(train, train_labels, test, test_labels, standard, md5)


def cifar_dataset(name: str, directory: str | Path, split_seed: int = 0, nonstandard_ok: bool = False,
                  modality: str = "image_patches") -> DataSet:
    """The images as `modality` reads them. image_patches: 64 patches of 4x4x3 per image in raster
    order; the model reads a zero start vector then patches 0..62 and predicts patches 0..63 (MSE).
    pixel_tokens: 1024 pixel tokens of 3-3-2 colour after a start token, each predicted from the ones
    before. The standard split: 5,000 validation images carved from the 50,000 training images with the
    split seed, the test batch evaluated once, after the last epoch. Images stay uint8 (150 MB for
    CIFAR-10; its float patches would take 1.2 GB) and become rows batch by batch."""
    which = name.removesuffix("-pixels")
    folder = read_cifar_folder(directory, which, nonstandard_ok)
    return image_dataset(name, array_store(folder.train_images, folder.train_labels), split_seed,
                         {"source": str(directory), "standard_files": folder.standard, "md5": folder.md5},
                         test=array_store(folder.test_images, folder.test_labels), modality=modality)


# What a CIFAR-10 run in the evidence differs in from the paper's, at every scale (declared on every claim on it).
CIFAR_DEVIATIONS = (
    "Colour: a pixel token is one byte of 3-3-2 colour (3 bits of red, 3 of green, 2 of blue, each channel at its "
    "nearest level); Section 5.1 gives a pixel 256 values but not how a colour becomes one.",
    "Metric: the verdicts read the models' validation NLL (nats per pixel; the test split's beside it); FID is "
    "computed outside the evidence by `damcha fid` from the Inception weights a user points to, and FID@Top-50 is "
    "not defined in what we have of the paper.",
)

# CIFAR-10 as pixel tokens in the evidence at the paper's size (Table 1's images, Tables 3 and 4 on it: 50 epochs,
# as the paper's Table 8, in Section 5.1's batches of 128) and in its tiny rehearsal on generated batches. The patch
# model (`cifar10`: the authors' repository's image workflow) is the demo's, and an alternative a user can train.
CIFAR10_AT_SCALE = {
    "paper": AtScale(("sample-images", "digits"), ("cifar-10-batches-py",), train_samples=45_000,
                     train=dict(epochs=50, batch_size=128, lr=3e-4, warmup_steps=1000, precision="bf16",
                                completion_images=1000, completion_samples=2),
                     deviations=(*CIFAR_DEVIATIONS,
                                 "Split: 5,000 validation images are carved from the 50,000 training images "
                                 "(--split-seed), so models train on 45,000; the paper does not state its split.")),
    "tiny": AtScale(("sample-images", "digits"), ("cifar-10-batches-py",), train_samples=100,
                    train=dict(epochs=1, batch_size=16, lr=3e-3, completion_images=4, completion_samples=1),
                    deviations=CIFAR_DEVIATIONS),
}


def _spec(which: str, modality: str, suffix: str = "", read_as: str = "") -> DataSetSpec:
    """CIFAR `which` read as `modality` (a modality with a fixed vocabulary predicts next tokens), named which + suffix
    and titled with `read_as`."""
    name, paper_row = which + suffix, which.upper().replace("CIFAR", "CIFAR-")
    reads = modality_named(modality)
    return DataSetSpec(
        name, paper_row + read_as, modality,
        "next_token" if reads.vocab_size else "next_vector",
        lambda path, block_size, seed, nonstandard_ok=False: cifar_dataset(name, path, seed, nonstandard_ok, modality),
        needs_path="the extracted python-batches folder", published=f"the {which} python batches' MD5s ({KRIZHEVSKY})",
        scales=CIFAR10_AT_SCALE if name == "cifar10-pixels" else {}, paper_row=paper_row)


SPECS = tuple(spec for which in ("cifar10", "cifar100")
              for spec in (_spec(which, "image_patches"), _spec(which, "pixel_tokens", "-pixels", " as 1024 pixel tokens")))
