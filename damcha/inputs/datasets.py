"""Data sets and tokenisers. Everything loads from the Python install or a local path; nothing downloads.

A DataSet holds model-ready integer tensors:
  decoder data: inputs (N, T) and targets (N, T) next tokens;
  classifier data: inputs (N, T) and targets (N,) class ids.
Text corpora are long byte streams: `windows` cuts them into training sequences.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

DIGIT_LEVELS = 17  # load_digits pixels are integers 0..16
DIGIT_START = DIGIT_LEVELS  # start token of a digit sequence
DIGIT_SIDE = 8
BYTE_VOCAB = 256
DATASETS = ("digits", "digits-cls", "text", "textfile", "enwik8", "text8", "cifar10", "cifar100", "sample-images")


class DataError(ValueError):
    """A data file is missing or not in the expected format (the message names both)."""


@dataclass
class DataSet:
    name: str
    kind: str  # "decoder" | "classifier" | "corpus" | "patches" (continuous next-vector prediction)
    vocab_size: int
    block_size: int
    train_inputs: torch.Tensor | None = None
    train_targets: torch.Tensor | None = None
    val_inputs: torch.Tensor | None = None
    val_targets: torch.Tensor | None = None
    train_stream: torch.Tensor | None = None  # corpus: (N,) uint8 bytes as int64
    val_stream: torch.Tensor | None = None
    n_classes: int = 0
    val_labels: np.ndarray | None = None  # digit class of each validation sample (for per-class views)
    split: dict = field(default_factory=dict)  # how the split was made: recorded in the run config

    @property
    def unit(self) -> str:
        """What one loss term is about: bits per pixel, per character, or per image (classifiers)."""
        if self.kind == "classifier":
            return "image"
        if self.kind == "patches":
            return "patch"
        return "pixel" if self.name == "digits" else "char"


# ----------------------------------------------------------------------------- digits

def digit_levels_to_tokens(levels: np.ndarray) -> np.ndarray:
    """(..., 8, 8) grey levels 0..16 -> (..., 64) pixel tokens in raster order."""
    levels = np.asarray(levels)
    return np.clip(np.rint(levels), 0, DIGIT_LEVELS - 1).astype(np.int64).reshape(*levels.shape[:-2], DIGIT_SIDE**2)


def digit_sequence(pixels: np.ndarray) -> np.ndarray:
    """(..., 64) pixel tokens -> (..., 65) [start, p0..p63] decoder sequence."""
    start = np.full((*pixels.shape[:-1], 1), DIGIT_START, dtype=np.int64)
    return np.concatenate([start, pixels], axis=-1)


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
        return DataSet("digits-cls", "classifier", DIGIT_LEVELS + 1, 64, x[train_idx], y[train_idx],
                       x[val_idx], y[val_idx], n_classes=10, val_labels=labels[val_idx], split=split)
    seq = torch.from_numpy(digit_sequence(pixels))  # (N, 65)
    x, y = seq[:, :-1], seq[:, 1:]
    return DataSet("digits", "decoder", DIGIT_LEVELS + 1, 64, x[train_idx], y[train_idx],
                   x[val_idx], y[val_idx], val_labels=labels[val_idx], split=split)


# ----------------------------------------------------------------------------- text as bytes

CORPUS_FILE = Path(__file__).resolve().parent / "corpus" / "pydoc_topics.txt"
CORPUS_SHA256 = "71f2ff5d99bdc1f9c48c5c2353ad138201c5ca1c377e0226857ef8fa89b8bcee"
CORPUS_SOURCE = "damcha/inputs/corpus/pydoc_topics.txt (CPython 3.11.7 pydoc topics)"


def bundled_corpus(path: Path = CORPUS_FILE) -> bytes:
    """The shipped text corpus (CPython 3.11.7's pydoc topics, 466,273 bytes of English
    documentation; see damcha/inputs/corpus/README.md), refused when its checksum differs."""
    import hashlib

    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"the bundled text corpus {path.name} cannot be read ({e.strerror}): restore it from git") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != CORPUS_SHA256:
        raise DataError(f"the bundled text corpus {path.name} was changed (sha256 {digest[:12]}…, expected "
                        f"{CORPUS_SHA256[:12]}…): the text runs and the evidence were trained on the original; "
                        "restore it from git")
    return data


def _byte_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)


def corpus_dataset(name: str, data: bytes, block_size: int, val_fraction: float, source: str) -> DataSet:
    if len(data) < 4 * (block_size + 1):
        raise DataError(f"{source}: {len(data)} bytes is too short; need at least {4 * (block_size + 1)} for a training corpus")
    n_val = max(block_size + 1, int(len(data) * val_fraction))
    stream = _byte_tensor(data)
    split = {"source": source, "bytes": len(data), "val_fraction": val_fraction, "val_start": len(data) - n_val}
    return DataSet(name, "corpus", BYTE_VOCAB, block_size, train_stream=stream[:-n_val], val_stream=stream[-n_val:], split=split)


def load_text_file(path: str | Path, block_size: int, name: str = "textfile", val_fraction: float = 0.1) -> DataSet:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file (expected a text file)")
    return corpus_dataset(name, p.read_bytes(), block_size, val_fraction, str(p))


def load_enwik8(path: str | Path, block_size: int) -> DataSet:
    """enwik8: the first 10^8 bytes of Wikipedia XML; standard split 90M / 5M / 5M (we validate on the last 5%)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file (expected the enwik8 file: raw bytes of the Wikipedia dump)")
    data = p.read_bytes()
    if not data.lstrip().startswith(b"<mediawiki"):
        raise DataError(f"{p}: does not look like enwik8 (expected it to start with '<mediawiki')")
    return corpus_dataset("enwik8", data, block_size, 0.05, str(p))


def load_text8(path: str | Path, block_size: int) -> DataSet:
    """text8: lowercase a-z and spaces only; standard split 90M / 5M / 5M."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file (expected the text8 file: lowercase letters and spaces)")
    data = p.read_bytes()
    bad = set(data) - set(b"abcdefghijklmnopqrstuvwxyz ")
    if bad:
        raise DataError(f"{p}: not text8 (expected only a-z and spaces, found byte {min(bad)!r})")
    return corpus_dataset("text8", data, block_size, 0.05, str(p))


def windows(stream: torch.Tensor, block_size: int, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of block_size tokens and their next tokens, starting at `starts`."""
    offsets = torch.arange(block_size + 1)  # (T+1,)
    chunk = stream[starts[:, None] + offsets]  # (N, T+1)
    return chunk[:, :-1], chunk[:, 1:]


def fixed_val_windows(stream: torch.Tensor, block_size: int, max_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping validation windows, the same every time."""
    n = min(max_windows, (len(stream) - 1) // block_size)
    return windows(stream, block_size, torch.arange(n) * block_size)


def encode_text(text: str | bytes) -> np.ndarray:
    """Text -> byte tokens (UTF-8)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


def decode_bytes(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- CIFAR (python batches)

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


def cifar_patches(images: np.ndarray, patch: int = 4) -> np.ndarray:
    """(N, 32, 32, 3) uint8 -> (N, 64, 48) float32 patches in [0, 1], raster order of 4x4 patches."""
    N, S = images.shape[0], images.shape[1]
    g = S // patch
    x = images.reshape(N, g, patch, g, patch, 3).transpose(0, 1, 3, 2, 4, 5)  # (N, g, g, p, p, 3)
    return (x.reshape(N, g * g, patch * patch * 3) / 255.0).astype(np.float32)


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
    return DataSet(name, "patches", 0, 64, train_x, train_y, val_x, val_y, val_labels=test_labels, split=split)


def patches_to_image(patches: np.ndarray, patch: int = 4) -> np.ndarray:
    """(64, 48) patches in raster order -> (32, 32, 3) image: the inverse of cifar_patches for one image."""
    g = int(round(np.sqrt(len(patches))))
    x = np.asarray(patches).reshape(g, g, patch, patch, 3).transpose(0, 2, 1, 3, 4)  # (g, p, g, p, 3)
    return x.reshape(g * patch, g * patch, 3)


def next_patch_sequences(patches: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 64, 48) patches -> model inputs (a zero start vector, then patches 0..62) and targets (patches 0..63)."""
    start = np.zeros((len(patches), 1, patches.shape[-1]), dtype=np.float32)
    return torch.from_numpy(np.concatenate([start, patches[:, :-1]], axis=1)), torch.from_numpy(patches)


# ----------------------------------------------------------------------------- colour photographs (offline)

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
    out = {"train": [], "val": []}
    origins = {"train": [], "val": []}
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
    return DataSet("sample-images", "patches", 0, 64, train_x, train_y, val_x, val_y, split=split)


def load_dataset(name: str, path: str | None = None, block_size: int = 128, split_seed: int = 0) -> DataSet:
    """Data set by name: digits, digits-cls, text (bundled corpus), textfile, enwik8, text8."""
    if name == "digits":
        return load_digits_data(False, split_seed)
    if name == "digits-cls":
        return load_digits_data(True, split_seed)
    if name == "text":
        data = corpus_dataset("text", bundled_corpus(), block_size, 0.1, CORPUS_SOURCE)
        data.split["sha256"] = CORPUS_SHA256  # recorded in every text run's config
        return data
    if name in ("textfile", "enwik8", "text8"):
        if not path:
            raise DataError(f"data set {name!r} needs --data-path to a local file")
        loader = {"textfile": load_text_file, "enwik8": load_enwik8, "text8": load_text8}[name]
        return loader(path, block_size)
    if name == "sample-images":
        return sample_images_dataset(split_seed)
    if name in ("cifar10", "cifar100"):
        if not path:
            raise DataError(f"data set {name!r} needs --data-path to the extracted python-batches folder")
        return cifar_dataset(name, path)
    raise DataError(f"unknown data set {name!r}; expected one of {', '.join(DATASETS)}")
