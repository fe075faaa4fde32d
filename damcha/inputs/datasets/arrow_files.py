"""Data kept as Hugging Face keeps it — parquet shards, Arrow files, `save_to_disk` folders — opened
memory-mapped, split by split.

A path is a `.parquet` or `.arrow` file (one split: train) or a folder of them; a file's split is
the first of train / validation (valid, val) / test that its path names (`plain_text/train-00000-
of-00001.parquet`, `test/data-00000-of-00001.arrow`). Arrow files (IPC file or stream format, as
`save_to_disk` writes them) are mapped as they are; a parquet file is converted once, a row batch
at a time, into an Arrow stream in the cache folder and mapped from there, so a batch reads only
its own rows. Pickles (Python's or pandas') are refused: reading one can run code. pyarrow (installed with
streamlit) is imported only when such a file is read.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from damcha.inputs.cache_folder import extracted_folder, write_atomically
from damcha.inputs.datasets.base import DataError
from damcha.inputs.datasets.checksums import CHUNK, file_pieces

SPLITS = {"train": "train", "validation": "validation", "valid": "validation", "val": "validation", "test": "test"}
SUFFIXES = (".parquet", ".arrow")
PICKLE_SUFFIXES = (".pkl", ".pickle", ".pk", ".pd")
MAX_FILES = 10_000
# A parquet file's declared expansion, checked before a row is decompressed (and again while converting): real
# shards expand 1-10 times (images stay as compressed as they were); a few kB declaring gigabytes is a bomb.
MAX_EXPANSION_RATIO = 100
MAX_ROW_GROUP_BYTES = 2 * 10**9
PICKLE_REFUSAL = ("pickled data (a Python or pandas pickle) is refused: reading a pickle can run code. Save it "
                  "as parquet instead (pandas: DataFrame.to_parquet; Hugging Face: Dataset.to_parquet or save_to_disk)")


def refuse_pickle(path: Path) -> None:
    """A pickle, by its name or its first bytes (protocol 2 and later start with 0x80), refused in words."""
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise DataError(f"{path}: {PICKLE_REFUSAL}")
    with open(path, "rb") as f:
        head = f.read(2)
    if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        raise DataError(f"{path}: {PICKLE_REFUSAL}")


def split_of(relative: Path) -> str | None:
    words = [w for part in relative.parts for w in re.split(r"[-_.\s]+", part.lower())]
    return next((SPLITS[w] for w in words if w in SPLITS), None)


def split_files(path: str | Path) -> dict[str, list[Path]]:
    """{'train': [...], 'validation': [...], 'test': [...]} of the data files a path holds (absent splits left out)."""
    p = Path(path)
    if p.is_file():
        refuse_pickle(p)
        if p.suffix.lower() not in SUFFIXES:
            raise DataError(f"{p}: not a .parquet or .arrow file")
        return {"train": [p]}
    if not p.is_dir():
        raise DataError(f"{p}: no such file or folder (expected parquet or Arrow files, or a save_to_disk folder)")
    found = sorted(f for f in p.rglob("*") if f.suffix.lower() in SUFFIXES and f.is_file()
                   and len(f.relative_to(p).parts) <= 4)[:MAX_FILES]
    if not found:
        pickles = sorted(f.name for f in p.rglob("*") if f.suffix.lower() in PICKLE_SUFFIXES)[:3]
        if pickles:
            raise DataError(f"{p}: holds {', '.join(pickles)} — {PICKLE_REFUSAL}")
        raise DataError(f"{p}: no .parquet or .arrow files in this folder or its sub-folders")
    named = {f: split_of(f.relative_to(p)) for f in found}
    if all(s is None for s in named.values()):
        return {"train": found}
    unnamed = [str(f.relative_to(p)) for f, s in named.items() if s is None]
    if unnamed:
        raise DataError(f"{p}: cannot tell which split {', '.join(unnamed[:3])} belong(s) to (name the files or "
                        "folders train / validation / test)")
    splits: dict[str, list[Path]] = {}
    for f, s in named.items():
        if s is not None:  # (none is: refused above)
            splits.setdefault(s, []).append(f)
    if "train" not in splits:
        raise DataError(f"{p}: no training split (a file or folder named train)")
    return splits


def _declared_expansion(parquet: Path, metadata) -> int:
    """The bytes a parquet file's row groups declare uncompressed, refused past the bounds before any is read."""
    groups = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
    total, size = sum(groups), max(parquet.stat().st_size, 1)
    if groups and max(groups) > MAX_ROW_GROUP_BYTES:
        raise DataError(f"{parquet}: a row group declares {max(groups):,} bytes uncompressed, more than "
                        f"{MAX_ROW_GROUP_BYTES:,}: refused before reading (write it with smaller row groups)")
    if total > MAX_EXPANSION_RATIO * size:
        raise DataError(f"{parquet}: its {size:,} bytes declare {total:,} uncompressed, more than "
                        f"{MAX_EXPANSION_RATIO} to 1: refused before reading, as a decompression bomb would be")
    return total


def _converted(parquet: Path) -> Path:
    """A parquet file as an Arrow stream in the cache folder (converted once, a row batch at a time)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    digest = hashlib.sha256()
    for piece in file_pieces(parquet):
        digest.update(piece)
    target = extracted_folder() / f"{parquet.stem}-{digest.hexdigest()[:16]}.arrow"
    if target.is_file():
        return target

    def write(partial: Path) -> None:
        # pre-buffering would keep the whole file in memory, and reader threads keep arenas of their own
        source = pq.ParquetFile(parquet, pre_buffer=False, buffer_size=CHUNK)
        declared = _declared_expansion(parquet, source.metadata)
        written = 0
        with pa.OSFile(str(partial), "wb") as sink, ipc.new_stream(sink, source.schema_arrow) as writer:
            for batch in source.iter_batches(batch_size=1024, use_threads=False):
                written += batch.nbytes
                if written > 2 * declared + 2**20:  # its pages hold more than its metadata says
                    raise DataError(f"{parquet}: expands past the {declared:,} bytes its metadata declares; refused "
                                    "while converting, nothing kept")
                writer.write_batch(batch)

    try:
        write_atomically(target, write)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{parquet}: not a readable parquet file ({e})") from None
    return target


def mapped_table(path: Path):
    """One data file as a pyarrow Table whose buffers lie in a memory-mapped file (nothing read until used)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    arrow = _converted(path) if path.suffix.lower() == ".parquet" else path
    try:
        source = pa.memory_map(str(arrow))
        try:
            return ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable Arrow file ({e})") from None


def split_tables(splits: dict[str, list[Path]], where: str) -> dict:
    """Each split's files (split_files) as one memory-mapped table (their tables, concatenated without copying)."""
    import pyarrow as pa

    tables = {}
    for split, files in splits.items():
        parts = [mapped_table(f) for f in files]
        try:
            tables[split] = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        except pa.ArrowInvalid as e:
            raise DataError(f"{where}: the {split} files do not share their columns ({e})") from None
    return tables


def pick_column(table, names: tuple[str, ...], accepts, where: str, what: str) -> str:
    """The first of `names` the table has with a type `accepts`; refused in words naming the columns found."""
    for name in names:
        if name in table.column_names and accepts(table.schema.field(name).type):
            return name
    found = ", ".join(f"{f.name} ({f.type})" for f in table.schema)
    raise DataError(f"{where}: no {what} column (expected one of {', '.join(names)}; found {found})")
