"""Hostile files the robustness tests build: a CIFAR folder with one bad batch, a zipped corpus of any
size and content (a few hundred kB can declare hundreds of MB)."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

from damcha.inputs.datasets.generated import write_standard_format_files


def cifar_with_a_bad_batch(tmp: Path, labels=None, fifo: str | None = None) -> Path:
    """Generated CIFAR-10 batches in the standard format; data_batch_2's labels replaced by `labels`,
    and the batch named `fifo` replaced by a FIFO."""
    folder = write_standard_format_files(tmp / "data", images_per_batch=4)["cifar10"]
    if labels is not None:
        raw = pickle.loads((folder / "data_batch_2").read_bytes())
        raw[b"labels"] = labels
        (folder / "data_batch_2").write_bytes(pickle.dumps(raw, protocol=2))
    if fifo:
        (folder / fifo).unlink()
        os.mkfifo(folder / fifo)
    return folder


def zipped_corpus(path: Path, member_bytes: int, content: bytes) -> Path:
    """A zip whose one deflated member `enwik8` holds `member_bytes` bytes of `content`, repeated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as out:
        info = zipfile.ZipInfo("enwik8")
        info.compress_type = zipfile.ZIP_DEFLATED
        with out.open(info, "w", force_zip64=True) as member:
            for start in range(0, member_bytes, len(content)):
                member.write(content[: member_bytes - start])
    return path
