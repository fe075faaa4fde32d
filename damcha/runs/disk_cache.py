"""Results of long evaluations kept on disk, keyed by the content of the snapshots they came from:
computed once per snapshot, shared by every session and every restart of the app.

The key of an entry is a SHA-256 over what was computed, its settings and the hashes of the
snapshot files; a retrained snapshot has another hash, so nothing stale is ever read. Entries are
JSON, written atomically. $DAMCHA_CACHE names the folder (default: the user's cache folder, as
platformdirs knows it: ~/.cache/damcha-lab on Linux). The folder is kept under
$DAMCHA_CACHE_MB megabytes (default 512): after a write that passes it, the least recently used
entries (a read counts as a use) are removed until it holds 90% of it. A run may ship entries of its
own snapshots in its folder (`derived/`, written by `ship` when the demo runs are made): they are
read first, so the shipped runs' tables open without computing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from damcha.inputs.cache_folder import cache_folder
from damcha.runs.checkpoints import Run, write_text_atomic
from damcha.runs.files import file_sha256, read_json

DEFAULT_CACHE_MB = 512
SHIPPED_FOLDER = "derived"  # a run's entries computed when it was made, shipped in its folder
MAX_SHIPPED_BYTES = 64 * 2**20


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


def shipped_path(kind: str, key: str, snapshots: list[tuple[Run, int]]) -> Path | None:
    """Where a run ships an entry computed when it was made (`<run>/derived/<kind>/<key>.json`): for
    entries of one run's snapshots only."""
    runs = {r.path for r, _ in snapshots}
    return next(iter(runs)) / SHIPPED_FOLDER / kind / f"{key}.json" if len(runs) == 1 else None


def read_shipped(kind: str, key: str, snapshots: list[tuple[Run, int]]):
    """The entry the run shipped, or None (absent, too large, not JSON, or not a regular file inside the run's own
    folder: a link out of it is never followed, as for every file of a run). Read as the run's own record, like
    its training log: the key names the snapshot's content, so a retrained snapshot never reads a stale entry."""
    path = shipped_path(kind, key, snapshots)
    if path is None or not os.path.lexists(path):
        return None
    try:
        return read_json(path, MAX_SHIPPED_BYTES, snapshots[0][0].path, f"{kind} table", allow_non_finite=True)
    except ValueError:  # (CheckpointError) outside the run, a FIFO, too large, torn: computed again
        return None


def ship(kind: str, settings: dict, snapshots: list[tuple[Run, int]], compute: Callable[[], object]) -> Path:
    """Compute an entry and write it into the run's folder, to ship with it (the demo runs' tables)."""
    path = shipped_path(kind, entry_key(kind, settings, snapshots), snapshots)
    if path is None:
        raise ValueError("only an entry of one run's snapshots can ship with the run")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(compute()))
    return path


def cached(kind: str, settings: dict, snapshots: list[tuple[Run, int]], compute: Callable[[], object]):
    """compute()'s JSON-able result: the entry the run ships, else from the disk cache when an entry
    of this kind, these settings and these snapshots' contents exists, else computed and stored."""
    key = entry_key(kind, settings, snapshots)
    shipped = read_shipped(kind, key, snapshots)
    if shipped is not None:
        return shipped
    path = cache_folder() / kind / f"{key}.json"
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
    removed: list[Path] = []
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
    """Whether the entry is shipped with its run or in the disk cache (nothing to compute)."""
    key = entry_key(kind, settings, snapshots)
    shipped = shipped_path(kind, key, snapshots)
    return (shipped is not None and shipped.is_file()) or (cache_folder() / kind / f"{key}.json").is_file()
