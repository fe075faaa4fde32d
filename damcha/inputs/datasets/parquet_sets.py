"""Images and text kept in parquet or Arrow files (the Hugging Face layout), as data sets.

`parquet-images`: an image column (`img` or `image`: encoded bytes, or Hugging Face's
{bytes, path} struct) and an optional label column (`label`, `labels`, `fine_label`), as next-patch
prediction of 32x32 RGB images (other sizes centre-cropped and resized, as uploads are); images are
decoded batch by batch from the mapped column. `parquet-text`: a `text` column, its rows joined
(a newline added where a row has none) into a byte corpus written once into the cache folder and
memory-mapped. A validation split is used where the files have one; otherwise it is carved from
train (images: with the split seed; text: the last 5% of the training bytes); a test split is
evaluated once, after training.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from damcha.inputs.cache_folder import extracted_folder, write_atomically
from damcha.inputs.datasets.arrow_files import pick_column, split_files, split_tables
from damcha.inputs.datasets.base import DataError, DataSet, DataSetSpec, given
from damcha.inputs.datasets.checksums import Digests
from damcha.inputs.datasets.image_sets import ImageStore, encoded_image, image_dataset
from damcha.inputs.datasets.text import BYTE_VOCAB

IMAGE_COLUMNS = ("img", "image")
LABEL_COLUMNS = ("label", "labels", "fine_label")
TEXT_COLUMNS = ("text", "content")
CARVED_TEXT_FRACTION = 0.05


def _is_image_type(t) -> bool:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return t.get_field_index("bytes") >= 0
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def arrow_image_store(table, where: str) -> ImageStore:
    """A pyarrow Table's images, decoded when read; its labels (read now: one integer a row) if it has them.
    Rows are read chunk by chunk in place (a `take` over a chunked column would copy all of it)."""
    import pyarrow as pa

    if table.num_rows == 0:
        raise DataError(f"{where}: no rows")
    image = pick_column(table, IMAGE_COLUMNS, _is_image_type, where, "image")
    labels = None
    if any(n in table.column_names for n in LABEL_COLUMNS):
        name = pick_column(table, LABEL_COLUMNS, pa.types.is_integer, where, "integer label")
        labels = table.column(name).to_numpy().astype(np.int64)
    chunks = [c.field("bytes") if pa.types.is_struct(c.type) else c for c in table.column(image).chunks]  # views
    starts = np.cumsum([0] + [len(c) for c in chunks])

    def read(idx: np.ndarray) -> np.ndarray:
        which = np.searchsorted(starts, idx, side="right") - 1
        return np.stack([encoded_image(chunks[c][i - starts[c]].as_py(), f"{where}, row {i}")
                         for i, c in zip(idx.tolist(), which.tolist())])

    return ImageStore(table.num_rows, read, labels)


def parquet_images(path: str | Path, split_seed: int) -> DataSet:
    tables = split_tables(split_files(path), str(path))
    stores = {split: arrow_image_store(t, f"{path} ({split})") for split, t in tables.items()}
    return image_dataset("parquet-images", stores["train"], split_seed, {"source": str(path), "format": "parquet/Arrow"},
                         val=stores.get("validation"), test=stores.get("test"))


def _is_text_type(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _text_rows(table, where: str):
    name = pick_column(table, TEXT_COLUMNS, _is_text_type, where, "text")
    for batch in table.column(name).chunks:
        for row in batch.to_pylist():
            if row:
                yield row.encode("utf-8") + (b"" if row.endswith("\n") else b"\n")


def _corpus_file(table, where: str, key: str) -> tuple[np.memmap, str]:
    """The split's rows joined into one byte file in the cache folder, written once, memory-mapped."""
    target = extracted_folder() / f"text-{key}.bytes"
    digests_file = target.with_name(target.name + ".digests")
    if not target.is_file():
        def write(partial: Path) -> dict:
            digests = Digests()
            with open(partial, "wb") as f:
                for row in _text_rows(table, where):
                    digests.update(row)
                    f.write(row)
            return digests.result()

        digests_file.write_text(json.dumps(write_atomically(target, write)))
    if target.stat().st_size == 0:
        raise DataError(f"{where}: the text column holds no text")
    return np.memmap(target, dtype=np.uint8, mode="c"), json.loads(digests_file.read_text())["sha256"]


def parquet_text(path: str | Path, block_size: int) -> DataSet:
    files = split_files(path)
    tables = split_tables(files, str(path))
    stamps = sorted((s, str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for s, fs in files.items() for f in fs)
    key = hashlib.sha256(json.dumps(stamps).encode()).hexdigest()[:16]  # a file edited since: written again
    streams, sha = {}, {}
    for split, table in tables.items():
        mapped, sha[split] = _corpus_file(table, f"{path} ({split})", f"{key}-{split}")
        streams[split] = torch.from_numpy(mapped)  # (N,) uint8, shares the mapping
    if "validation" not in streams:
        cut = len(streams["train"]) - max(block_size + 1, int(len(streams["train"]) * CARVED_TEXT_FRACTION))
        streams["train"], streams["validation"] = streams["train"][:cut], streams["train"][cut:]
    short = [s for s, stream in streams.items() if len(stream) < block_size + 1]
    if short:
        raise DataError(f"{path}: the {' and '.join(short)} text is shorter than one window of {block_size + 1} bytes")
    sizes = {s: len(v) for s, v in streams.items()}
    split = {"source": str(path), "format": "parquet/Arrow", "bytes": sum(sizes.values()), "sha256": sha,
             "split": ", ".join(f"{s} {n:,} bytes" for s, n in sizes.items())
             + ("" if "validation" in tables else " (validation: the last 5% of the training text)")}
    return DataSet("parquet-text", "next_token", BYTE_VOCAB, block_size, train_stream=streams["train"],
                   val_stream=streams["validation"], test_stream=streams.get("test"), split=split)


SPECS = (
    DataSetSpec("parquet-images", "images in parquet or Arrow files (Hugging Face layout)", "image_patches",
                "next_vector", lambda path, block_size, seed: parquet_images(given(path), seed),
                needs_path="a .parquet or .arrow file, or a folder of them (e.g. save_to_disk)"),
    DataSetSpec("parquet-text", "text in parquet or Arrow files (Hugging Face layout)", "byte_text", "next_token",
                lambda path, block_size, seed: parquet_text(given(path), block_size),
                needs_path="a .parquet or .arrow file, or a folder of them (e.g. save_to_disk)"),
)
