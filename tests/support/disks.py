"""A real, small disk for the full-disk tests: a 2 MB tmpfs, filled to a given free space."""

from __future__ import annotations

import shutil
from pathlib import Path


def fill(disk: Path, leave: int) -> None:
    """Fill `disk` to `leave` bytes of free space."""
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "wb") as f:
        f.write(bytes(max(free - leave, 0)))
