"""What the robustness tests compare before and after: a folder's every file, mode and bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path


def folder_digest(folder: Path) -> str:
    """Every file's relative path, mode and bytes, hashed: equal before and after means untouched."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(oct(path.stat().st_mode).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()
