"""Results of long evaluations kept on disk, keyed by the content of the snapshots they came from:
computed once per snapshot, shared by every session and every restart of the app.

The key of an entry is a SHA-256 over what was computed, its settings and the hashes of the
snapshot files; a retrained snapshot has another hash, so nothing stale is ever read. Entries are
JSON, written atomically. $DAMCHA_CACHE names the folder (default: the user's cache folder, as
platformdirs knows it: ~/.cache/damcha-lab on Linux). The folder is kept under
$DAMCHA_CACHE_MB megabytes (default 512): after a write that passes it, the least recently used
entries (a read counts as a use) are removed until it holds 90% of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from platformdirs import user_cache_dir

from damcha.runs.checkpoints import Run, write_text_atomic
from damcha.runs.files import file_sha256

DEFAULT_CACHE_MB = 512


def cache_folder() -> Path:
    return Path(os.environ.get("DAMCHA_CACHE") or user_cache_dir("damcha-lab", appauthor=False))


def cache_limit_bytes() -> int:
    try:
        return max(1, int(float(os.environ.get("DAMCHA_CACHE_MB") or DEFAULT_CACHE_MB) * 2**20))
    except ValueError:
        return DEFAULT_CACHE_MB * 2**20


def snapshot_hash(run: Run, epoch: int) -> str:
    return file_sha256(run.snapshot_path(epoch))


def entry_key(kind: str, settings: dict, snapshots: list[tuple[Run, int]]) -> str:
    parts = [kind, json.dumps(settings, sort_keys=True, default=str)] + [snapshot_hash(r, e) for r, e in snapshots]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def cached(kind: str, settings: dict, snapshots: list[tuple[Run, int]], compute: Callable[[], object]):
    """compute()'s JSON-able result, from the disk when an entry of this kind, these settings and
    these snapshots' contents exists; else computed and stored."""
    path = cache_folder() / kind / f"{entry_key(kind, settings, snapshots)}.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        os.utime(path)  # used now: the last to be pruned
        return value
    except (OSError, ValueError):
        pass  # absent, or unreadable (a torn or foreign file): computed again and rewritten
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(value))
        prune(cache_folder(), cache_limit_bytes())
    except OSError:
        pass  # a read-only or full disk: the result is still returned, only not kept
    return value


def prune(folder: Path, limit: int) -> list[Path]:
    """Remove the least recently used entries of the cache folder while it holds more than `limit`
    bytes, down to 90% of it. Returns what was removed."""
    entries = []
    for path in folder.glob("*/*.json"):
        try:
            st = path.stat()
        except OSError:
            continue  # removed by another process meanwhile
        entries.append((st.st_mtime_ns, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    removed = []
    if total <= limit:
        return removed
    for _, size, path in sorted(entries):
        if total <= 0.9 * limit:
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        removed.append(path)
    return removed


def is_cached(kind: str, settings: dict, snapshots: list[tuple[Run, int]]) -> bool:
    return (cache_folder() / kind / f"{entry_key(kind, settings, snapshots)}.json").is_file()
