"""Results of long evaluations kept on disk, keyed by the content of the snapshots they came from:
computed once per snapshot, shared by every session and every restart of the app.

The key of an entry is a SHA-256 over what was computed, its settings and the hashes of the
snapshot files; a retrained snapshot has another hash, so nothing stale is ever read. Entries are
JSON, written atomically. $DAMCHA_CACHE names the folder (default ~/.cache/damcha-lab).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from damcha.runs.checkpoints import Run, write_text_atomic

_FILE_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256: each file read once


def cache_folder() -> Path:
    return Path(os.environ.get("DAMCHA_CACHE") or Path.home() / ".cache" / "damcha-lab")


def file_hash(path: Path) -> str:
    """SHA-256 of a file's content (remembered while its size and modification time stay the same)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _FILE_HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _FILE_HASHES[key] = h.hexdigest()
    return _FILE_HASHES[key]


def snapshot_hash(run: Run, epoch: int) -> str:
    return file_hash(run.snapshot_path(epoch))


def entry_key(kind: str, settings: dict, snapshots: list[tuple[Run, int]]) -> str:
    parts = [kind, json.dumps(settings, sort_keys=True, default=str)] + [snapshot_hash(r, e) for r, e in snapshots]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def cached(kind: str, settings: dict, snapshots: list[tuple[Run, int]], compute: Callable[[], object]):
    """compute()'s JSON-able result, from the disk when an entry of this kind, these settings and
    these snapshots' contents exists; else computed and stored."""
    path = cache_folder() / kind / f"{entry_key(kind, settings, snapshots)}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass  # absent, or unreadable (a torn or foreign file): computed again and rewritten
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(value))
    except OSError:
        pass  # a read-only or full disk: the result is still returned, only not kept
    return value


def is_cached(kind: str, settings: dict, snapshots: list[tuple[Run, int]]) -> bool:
    return (cache_folder() / kind / f"{entry_key(kind, settings, snapshots)}.json").is_file()
