"""Text as UTF-8 bytes: the bundled corpus and any text file (enwik8 and text8: benchmark_corpora)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from damcha.inputs.datasets.base import DataError, DataSet, DataSetSpec, data_file, given

BYTE_VOCAB = 256

CORPUS_FILE = Path(__file__).resolve().parent.parent / "corpus" / "pydoc_topics.txt"
CORPUS_SHA256 = "71f2ff5d99bdc1f9c48c5c2353ad138201c5ca1c377e0226857ef8fa89b8bcee"
CORPUS_SOURCE = "damcha/inputs/corpus/pydoc_topics.txt (CPython 3.11.7 pydoc topics)"


def bundled_corpus(path: Path = CORPUS_FILE) -> bytes:
    """The shipped text corpus (CPython 3.11.7's pydoc topics, 466,273 bytes of English
    documentation; see damcha/inputs/corpus/README.md), refused when its checksum differs."""
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
    return DataSet(name, "next_token", BYTE_VOCAB, block_size, train_stream=stream[:-n_val], val_stream=stream[-n_val:], split=split)


def load_text_file(path: str | Path, block_size: int, name: str = "textfile", val_fraction: float = 0.1) -> DataSet:
    p = data_file(path, "a text file")
    return corpus_dataset(name, p.read_bytes(), block_size, val_fraction, str(p))


def encode_text(text: str | bytes) -> np.ndarray:
    """Text -> byte tokens (UTF-8)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


def decode_bytes(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def bundled_text(block_size: int) -> DataSet:
    data = corpus_dataset("text", bundled_corpus(), block_size, 0.1, CORPUS_SOURCE)
    data.split["sha256"] = CORPUS_SHA256  # recorded in every text run's config
    return data


TEXT_DEMO = dict(epochs=10, batch_size=32)  # 100 steps an epoch

SPECS = (
    DataSetSpec("text", "the bundled corpus (CPython's pydoc topics)", "byte_text", "next_token",
                lambda path, block_size, seed: bundled_text(block_size), bundled=True, demo_train=TEXT_DEMO),
    DataSetSpec("textfile", "a text file of yours", "byte_text", "next_token",
                lambda path, block_size, seed: load_text_file(given(path), block_size), needs_path="a local text file"),
)
