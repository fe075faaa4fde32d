"""A folder of the authors' .pt checkpoints typed as the checkpoint folder: converted once, opened as runs."""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import tempfile
from pathlib import Path

import streamlit as st

from damcha.runs.checkpoints import MAX_FOLDER_ENTRIES
from damcha.runs.reference import TOKENIZERS, import_reference


def is_reference_source(path: Path) -> bool:
    """A .pt file, or a folder holding .pt files and no runs (no config.json in it or in any of its
    folders): checkpoints of the reference code. A stray .pt beside runs never changes how they are read."""
    if path.is_file():
        return path.suffix == ".pt"
    try:
        entries = list(itertools.islice(os.scandir(path), MAX_FOLDER_ENTRIES))
    except OSError:
        return False
    if not any(e.name.endswith(".pt") for e in entries) or any(e.name == "config.json" for e in entries):
        return False
    return not any(e.is_dir() and os.path.lexists(Path(e.path) / "config.json") for e in entries)


def reference_reading(where) -> tuple[str, str | None]:
    """What the reference checkpoints read (their files do not say): images, or a tokenizer's ids."""
    choices = ["as the file says", "CIFAR patches", *TOKENIZERS]
    reads = where.selectbox("The reference model reads", choices, key="reference_reads",
                            help="Files written by their current code carry their embedding and head (components), "
                                 "which say it; older files hold the decoder only: say what it was trained on.")
    if reads == "as the file says":
        return None, None
    return ("image_patches", None) if reads == "CIFAR patches" else ("tokens", reads)


def reference_stamp(source: Path) -> tuple:
    """Names, sizes and modification times of the .pt files: a changed file is converted again."""
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.suffix == ".pt")
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)


@st.cache_resource(show_spinner="Converting the reference checkpoints…", max_entries=8)
def reference_root(source: Path, modality: str, tokenizer: str | None, stamp: tuple) -> Path:
    """A run root holding the conversion of a reference .pt file or folder (damcha.runs.reference),
    in a temporary folder keyed by the files' stamp."""
    key = hashlib.sha256(repr((str(source.resolve()), stamp, modality, tokenizer)).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / "damcha-reference"
    root = cache / key
    name = source.stem if source.is_file() else source.name
    if not (root / name / "config.json").exists():
        shutil.rmtree(root, ignore_errors=True)  # what a killed conversion may have left
        import_reference(source, root / name, modality, tokenizer=tokenizer)
    _prune(cache, keep=root)
    return root


def _prune(cache: Path, keep: Path, kept: int = 8) -> None:
    """Conversions beyond the `kept` most recently made are removed (the cache above holds as many)."""
    try:
        folders = sorted((p for p in cache.iterdir() if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in folders[:max(0, len(folders) - (kept - 1))]:
        shutil.rmtree(old, ignore_errors=True)
