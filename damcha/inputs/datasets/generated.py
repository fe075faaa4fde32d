"""Small files in the standard formats of the paper's data sets, generated (nothing downloads): the
`cifar-10-batches-py` folder of pickled batches, `enwik8.zip` and `text8`. Their checksums are not
the published ones, so they read only as nonstandard copies; tests and `evidence --scale tiny` run
the paper-scale path on them."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


def enwik8_like(n: int, seed: int = 0) -> bytes:
    """n bytes that look like the start of a Wikipedia XML dump."""
    rng = np.random.default_rng(seed)
    body = rng.choice(np.frombuffer(b"<page> abcdefghij</ref>\n", np.uint8), n).tobytes()
    return (b"<mediawiki xmlns>" + body)[:n]


def text8_like(n: int, seed: int = 0) -> bytes:
    """n bytes of lower-case words and single spaces, as text8 is."""
    rng = np.random.default_rng(seed)
    words = [b"the", b"of", b"and", b"one", b"zero", b"in", b"a", b"anarchism", b"originated"]
    out = b" ".join(words[i] for i in rng.integers(0, len(words), n // 3 + 1))
    return out[:n]


def cifar_batch(path: Path, n: int, seed: int, key: bytes = b"labels") -> None:
    """One pickled batch as the published python version holds it: uint8 rows of 3072, a label list.
    The images are smooth colour gradients with noise, so a model has something to learn."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:32, 0:32] / 31.0  # (32, 32)
    colours = rng.uniform(0, 1, (n, 3, 2))  # a start and an end colour per channel
    mix = np.where(rng.random(n) < 0.5, 0, 1)[:, None, None]  # horizontal or vertical gradients
    t = np.where(mix == 0, x, y)  # (n, 32, 32)
    images = colours[:, :, :1, None] * (1 - t[:, None]) + colours[:, :, 1:, None] * t[:, None]  # (n, 3, 32, 32)
    images = np.clip(images * 255 + rng.normal(0, 8, images.shape), 0, 255).astype(np.uint8)
    path.write_bytes(pickle.dumps({b"data": images.reshape(n, 3072), key: [int(v) for v in rng.integers(0, 10, n)]},
                                  protocol=2))


def write_standard_format_files(folder: str | Path, images_per_batch: int = 24, corpus_bytes: int = 60_000,
                                seed: int = 0) -> dict[str, Path]:
    """`folder`/cifar-10-batches-py (five training batches and a test batch), `folder`/enwik8.zip (member
    `enwik8`) and `folder`/text8, as `--data-dir` expects them: data set -> what was written."""
    folder = Path(folder)
    cifar = folder / CIFAR10_FOLDER
    cifar.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(CIFAR10_BATCHES):
        cifar_batch(cifar / name, images_per_batch, seed + i)
    with zipfile.ZipFile(folder / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", enwik8_like(corpus_bytes, seed))
    (folder / "text8").write_bytes(text8_like(corpus_bytes, seed))
    return {"cifar10": cifar, "enwik8": folder / "enwik8.zip", "text8": folder / "text8"}
