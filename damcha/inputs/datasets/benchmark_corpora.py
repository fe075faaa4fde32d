"""enwik8 and text8, the character-level benchmarks, on their standard split.

The standard split (Transformer-XL's and AWD-LSTM's preparation scripts): the first 90,000,000
bytes train, the next 5,000,000 validate (every epoch), the last 5,000,000 test (once, after the
last epoch). The file is read as the user has it — the raw file, or the published `.zip` (its
member is extracted once into the cache folder, hashed on the way) — and memory-mapped, so a batch
reads only its own windows. Its checksums are compared with the published ones: a copy that differs
is refused unless the user accepts it (`--nonstandard-data`), and then it is split 90% / 5% / 5%
and the run records `standard_files: false`.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from damcha.inputs.cache_folder import extracted_folder, write_atomically
from damcha.inputs.datasets.base import AtScale, DataError, DataSet, DataSetSpec, data_file
from damcha.inputs.datasets.checksums import CHUNK, Digests, PublishedFile, check_standard, file_digests
from damcha.inputs.datasets.text import BYTE_VOCAB

STANDARD_SPLIT = (90_000_000, 5_000_000, 5_000_000)  # train, validation, test bytes
NONSTANDARD_FRACTIONS = (0.90, 0.05, 0.05)  # the same proportions for a copy of another size
MAX_MEMBER_BYTES = 2 * 10**9  # a zip member claiming more is refused before extraction (enwik9 is 10^9)
# The published zips compress about 2.8 (enwik8) and 3.2 (text8) to 1; a member claiming far more is a zip bomb.
MAX_COMPRESSION_RATIO = 20
LTCB = "Matt Mahoney's Large Text Compression Benchmark, mattmahoney.net/dc/textdata.html"


@dataclass(frozen=True)
class BenchmarkCorpus:
    """One benchmark: its published file, the member of its published zip, and a cheap look at a
    copy's content that names what is wrong with a file that is not this corpus at all."""

    published: PublishedFile
    member: str
    expected_content: str

    def content_problem(self, data: np.ndarray) -> str | None:
        raise NotImplementedError


class Enwik8(BenchmarkCorpus):
    def content_problem(self, data):
        if not bytes(data[:256]).lstrip().startswith(b"<mediawiki"):
            return "it does not start with '<mediawiki'"
        return None


class Text8(BenchmarkCorpus):
    ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)

    def content_problem(self, data):
        for start in range(0, len(data), 16 * CHUNK):  # in pieces: a mapped file stays mapped
            piece = np.asarray(data[start:start + 16 * CHUNK])
            bad = piece[~np.isin(piece, self.ALPHABET)]
            if len(bad):
                return f"byte {int(bad[0])} at or after offset {start:,} is neither a-z nor a space"
        return None


ENWIK8 = Enwik8(PublishedFile("enwik8", LTCB, 100_000_000, md5="a1fa5ffddb56f4953e226637dabbb36a",
                              sha1="57b8363b814821dc9d47aa4d41f58733519076b2"),
                "enwik8", "the enwik8 file (raw bytes of the Wikipedia dump) or enwik8.zip")
TEXT8 = Text8(PublishedFile("text8", "text8.zip of mattmahoney.net/dc/textdata.html (SHA-1 as MXNet's Gluon data "
                            "sets record it)", 100_000_000, sha1="0dc3edebc970dcc96137e7deda4d9995af9d93de"),
              "text8", "the text8 file (lowercase letters and spaces) or text8.zip")


def _extract(archive: Path, info: zipfile.ZipInfo, zf: zipfile.ZipFile, target: Path) -> dict:
    """Stream one member into `target`, hashing it on the way; its digests beside it."""
    def write(partial: Path) -> dict:
        digests = Digests()
        with zf.open(info) as src, open(partial, "wb") as dst:
            while piece := src.read(CHUNK):
                digests.update(piece)
                if digests.size > info.file_size:
                    raise DataError(f"{archive}: member {info.filename} holds more than the {info.file_size:,} bytes it declares")
                dst.write(piece)
        return digests.result()

    try:
        found = write_atomically(target, write)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as e:
        raise DataError(f"{archive}: its member {info.filename} cannot be read ({e}); the zip is damaged") from None
    target.with_name(target.name + ".digests").write_text(json.dumps(found))
    return found


def _refuse_before_extracting(archive: Path, info: zipfile.ZipInfo, corpus: BenchmarkCorpus,
                              nonstandard_ok: bool) -> None:
    """What a member's zip header declares is checked before a byte is extracted into the cache."""
    name = corpus.published.name
    if info.flag_bits & 0x1:
        raise DataError(f"{archive}: member {info.filename} is encrypted; the published {name}.zip is not (extract "
                        "it yourself and give the file)")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        raise DataError(f"{archive}: member {info.filename} is compressed by method {info.compress_type}, which "
                        f"Python's zipfile cannot read; the published {name}.zip is deflated")
    if info.file_size > MAX_MEMBER_BYTES:
        raise DataError(f"{archive}: member {info.filename} declares {info.file_size:,} bytes, more than "
                        f"{name} could be ({MAX_MEMBER_BYTES:,} at most)")
    if info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
        raise DataError(f"{archive}: member {info.filename} declares {info.file_size:,} bytes from "
                        f"{info.compress_size:,} compressed, more than {MAX_COMPRESSION_RATIO} to 1 (the published "
                        f"zip is about 3 to 1): refused before extraction, as a zip bomb would be")
    if not nonstandard_ok and info.file_size != corpus.published.size:
        raise DataError(f"{archive}: not the published {name} — its member {info.filename} declares "
                        f"{info.file_size:,} bytes, the published file has {corpus.published.size:,}: refused before "
                        "extraction. Obtain the "
                        "standard file again, or pass --nonstandard-data to train on this one anyway (the run then "
                        "records standard_files: false)")


def _from_zip(archive: Path, corpus: BenchmarkCorpus, nonstandard_ok: bool) -> tuple[Path, dict, str]:
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir()]
            info = next((i for i in infos if i.filename.rsplit("/", 1)[-1] == corpus.member), None)
            if info is None:
                held = ", ".join(i.filename for i in infos[:5]) or "nothing"
                raise DataError(f"{archive}: a zip without the member '{corpus.member}' (it holds {held}); "
                                f"expected {corpus.expected_content}")
            _refuse_before_extracting(archive, info, corpus, nonstandard_ok)
            target = extracted_folder() / f"{corpus.member}-{info.CRC:08x}-{info.file_size}"
            try:
                found = json.loads(target.with_name(target.name + ".digests").read_text())
                fresh = target.stat().st_size == info.file_size == found["size"]
            except (OSError, ValueError, KeyError, TypeError):
                fresh = False
            if not fresh:
                found = _extract(archive, info, zf, target)
    except zipfile.BadZipFile as e:
        raise DataError(f"{archive}: not a readable zip ({e})") from None
    return target, found, f"{archive}:{info.filename}"


def corpus_file(path: str | Path, corpus: BenchmarkCorpus, nonstandard_ok: bool = False) -> tuple[Path, dict, str]:
    """The file to map (the user's, or the zip's member as extracted), its digests, and its source."""
    p = data_file(path, corpus.expected_content)
    if zipfile.is_zipfile(p):
        return _from_zip(p, corpus, nonstandard_ok)
    return p, file_digests(p), str(p)


def _forget_extracted(source_file: Path) -> None:
    """A member extracted into the cache and then refused is not kept there."""
    if source_file.parent == extracted_folder():
        source_file.unlink(missing_ok=True)
        source_file.with_name(source_file.name + ".digests").unlink(missing_ok=True)


def split_points(n: int, standard: bool) -> tuple[int, int]:
    """Where validation and test begin: the standard byte counts, or the same proportions."""
    if standard:
        return STANDARD_SPLIT[0], STANDARD_SPLIT[0] + STANDARD_SPLIT[1]
    return int(n * NONSTANDARD_FRACTIONS[0]), int(n * (NONSTANDARD_FRACTIONS[0] + NONSTANDARD_FRACTIONS[1]))


def load_benchmark_corpus(corpus: BenchmarkCorpus, path: str | Path, block_size: int, nonstandard_ok: bool) -> DataSet:
    source_file, found, source = corpus_file(path, corpus, nonstandard_ok)
    try:
        standard = check_standard(source, found, corpus.published, nonstandard_ok)
        if found["size"] == 0:
            raise DataError(f"{source}: the file is empty (expected {corpus.expected_content})")
        mapped = np.memmap(source_file, dtype=np.uint8, mode="c")  # copy-on-write: nothing is read until used
        problem = None if standard else corpus.content_problem(mapped)
        if problem:
            raise DataError(f"{source}: not {corpus.published.name} ({problem}); expected {corpus.expected_content}")
    except DataError:
        _forget_extracted(source_file)
        raise
    val_start, test_start = split_points(len(mapped), standard)
    parts = {"train": (0, val_start), "validation": (val_start, test_start), "test": (test_start, len(mapped))}
    short = [k for k, (a, b) in parts.items() if b - a < block_size + 1]
    if short:
        raise DataError(f"{source}: {len(mapped):,} bytes leave the {' and '.join(short)} split shorter than one "
                        f"window of {block_size + 1} bytes")
    stream = torch.from_numpy(mapped)  # (N,) uint8, shares the mapping
    rule = ("the standard split: the first 90,000,000 bytes train, the next 5,000,000 validate, the last "
            "5,000,000 test" if standard else "90% / 5% / 5% of a nonstandard copy (train, validation, test)")
    split = {"source": source, "bytes": len(mapped), "standard_files": standard, "split": rule,
             "train_bytes": val_start, "val_start": val_start, "val_bytes": test_start - val_start,
             "test_start": test_start, "test_bytes": len(mapped) - test_start,
             "md5": found["md5"], "sha1": found["sha1"], "sha256": found["sha256"]}
    return DataSet(corpus.published.name, "next_token", BYTE_VOCAB, block_size, train_stream=stream[:val_start],
                   val_stream=stream[val_start:test_start], test_stream=stream[test_start:], split=split)


def _at_scale(name: str) -> dict[str, AtScale]:
    """Table 5 on this corpus in the evidence: at the paper's size 100K steps (the paper's Table 8) of 128 x 1024
    bytes (Section 5.1's batch), every validation window scored; and its tiny rehearsal."""
    files = (name, f"{name}.zip")
    return {"paper": AtScale(("text",), files, block_size=1024,
                             train=dict(epochs=100, steps_per_epoch=1000, batch_size=128, lr=3e-4, warmup_steps=2000,
                                        precision="bf16", val_windows=STANDARD_SPLIT[1] // 1024)),
            "tiny": AtScale(("text",), files, block_size=64,
                            train=dict(epochs=1, steps_per_epoch=4, batch_size=8, lr=3e-3, val_windows=8))}


def _spec(corpus: BenchmarkCorpus) -> DataSetSpec:
    name = corpus.published.name
    return DataSetSpec(name, name, "byte_text", "next_token",
                       lambda path, block_size, seed, nonstandard_ok=False: load_benchmark_corpus(
                           corpus, path, block_size, nonstandard_ok),
                       needs_path=f"the {name} file or {name}.zip",
                       published=f"{corpus.published.name}: {corpus.published.expected()} ({corpus.published.source})",
                       scales=_at_scale(name), paper_row=name.capitalize())  # the paper's Table 5: Enwik8, Text8


SPECS = (_spec(ENWIK8), _spec(TEXT8))
