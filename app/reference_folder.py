"""A folder of the authors' .pt checkpoints typed as the checkpoint folder: converted once, opened as runs."""

from __future__ import annotations

from pathlib import Path

import streamlit as st


def is_reference_source(path: Path) -> bool:
    """A .pt file, or a folder holding .pt files and no runs: checkpoints of the reference code."""
    if path.is_file():
        return path.suffix == ".pt"
    return path.is_dir() and any(p.suffix == ".pt" for p in path.iterdir()) and not (path / "config.json").exists()


def reference_reading(where) -> tuple[str, str | None]:
    """What the reference checkpoints read (their files do not say): images, or a tokenizer's ids."""
    from damcha.runs.reference import TOKENIZERS

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
    import hashlib
    import tempfile

    from damcha.runs.reference import import_reference

    key = hashlib.sha256(repr((str(source.resolve()), stamp, modality, tokenizer)).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / "damcha-reference" / key
    name = source.stem if source.is_file() else source.name
    if not (root / name / "config.json").exists():
        import_reference(source, root / name, modality, tokenizer=tokenizer)
    return root
