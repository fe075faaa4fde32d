"""The folder DAMCHA Lab keeps derived files in: $DAMCHA_CACHE, else the user's cache folder as
platformdirs knows it (~/.cache/damcha-lab on Linux). The disk cache of evaluations and the data
made once from a user's files (`extracted/`) live in it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from platformdirs import user_cache_dir

T = TypeVar("T")


def cache_folder() -> Path:
    return Path(os.environ.get("DAMCHA_CACHE") or user_cache_dir("damcha-lab", appauthor=False))


def extracted_folder() -> Path:
    """Where data made from a user's files once (a zip's member, a parquet file as Arrow, joined text) lives."""
    return cache_folder() / "extracted"


def write_atomically(target: Path, write: Callable[[Path], T]) -> T:
    """write(partial) into a file beside `target`, renamed onto it when complete; on any failure the
    partial file is removed and the error raised, so `target` is whole or absent."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    try:
        result = write(partial)
        os.replace(partial, target)
        return result
    finally:
        partial.unlink(missing_ok=True)
