"""Published checksums of the standard data files, and the verdict on a user's copy.

A run records whether it used the standard files (`standard_files` in its config); a copy that
differs from the published one (truncated, altered, regenerated) is refused before anything is
trained, unless the user accepts it (`--nonstandard-data`), and then the run says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from damcha.inputs.datasets.base import DataError

CHUNK = 1 << 20  # files are hashed in 1 MiB pieces: memory stays bounded whatever their size
ALGORITHMS = ("md5", "sha1", "sha256")


class Digests:
    """MD5, SHA-1 and SHA-256 of bytes fed piece by piece (a file, or a zip member as it is extracted)."""

    def __init__(self):
        self._hashes = {a: hashlib.new(a) for a in ALGORITHMS}
        self.size = 0

    def update(self, piece: bytes) -> None:
        for h in self._hashes.values():
            h.update(piece)
        self.size += len(piece)

    def result(self) -> dict:
        return {"size": self.size, **{a: h.hexdigest() for a, h in self._hashes.items()}}


def digests_of(pieces: Iterable[bytes]) -> dict:
    d = Digests()
    for piece in pieces:
        d.update(piece)
    return d.result()


def file_pieces(path: Path) -> Iterable[bytes]:
    with open(path, "rb") as f:
        while piece := f.read(CHUNK):
            yield piece


def file_digests(path: str | Path) -> dict:
    """{'size', 'md5', 'sha1', 'sha256'} of a file, read in pieces."""
    return digests_of(file_pieces(Path(path)))


@dataclass(frozen=True)
class PublishedFile:
    """One standard file as its publisher lists it: its size (None when not published) and the
    checksums published for it; `source` says where they were published."""

    name: str
    source: str
    size: int | None = None
    md5: str = ""
    sha1: str = ""

    def matches(self, found: dict) -> bool:
        return ((self.size is None or found["size"] == self.size)
                and all(found[a] == getattr(self, a) for a in ("md5", "sha1") if getattr(self, a)))

    def expected(self) -> str:
        parts = ([f"{self.size:,} bytes"] if self.size is not None else []) + [
            f"{a.upper().replace('SHA1', 'SHA-1')} {getattr(self, a)}" for a in ("md5", "sha1") if getattr(self, a)]
        return ", ".join(parts)


def describe(found: dict) -> str:
    return f"{found['size']:,} bytes, MD5 {found['md5']}, SHA-1 {found['sha1']}"


def check_standard(where: str, found: dict, published: PublishedFile, nonstandard_ok: bool) -> bool:
    """Whether `found` (a file's digests) is the published file. A copy that differs is refused in
    words, or, with nonstandard_ok, accepted (returns False: the run records standard_files: false)."""
    if published.matches(found):
        return True
    if nonstandard_ok:
        return False
    raise DataError(
        f"{where}: not the published {published.name} — it is {describe(found)}; the standard file is "
        f"{published.expected()} ({published.source}). A truncated or altered copy would make every number "
        "incomparable with published ones: obtain the standard file again, or pass --nonstandard-data to train "
        "on this one anyway (the run then records standard_files: false)")
