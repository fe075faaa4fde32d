"""A new folder written whole or not at all.

A writer of a folder a user will open (an imported run, an exported Hugging Face folder) writes into
a staging folder beside it, `.NAME.PID.XXXXXXXX.PURPOSE`, and renames it into place at the end: a
refused, failed or killed write leaves nothing where a reader looks, and a folder the user already
has is never written into. A writer killed before its rename leaves its staging folder behind; the
next writer of the same name removes the ones whose process no longer runs.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from damcha.runs.files import CheckpointError


def _staging_pattern(out: Path, purpose: str) -> re.Pattern:
    # The pid is optional: staging folders written before it was recorded (".NAME.XXXXXXXX.importing").
    return re.compile(rf"^\.{re.escape(out.name)}\.(?:(\d+)\.)?[A-Za-z0-9_]{{8}}\.{re.escape(purpose)}$")


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_staging(out: Path, purpose: str) -> list[Path]:
    """Remove the staging folders for `out` whose writer no longer runs; returns what was removed."""
    pattern, removed = _staging_pattern(out, purpose), list[Path]()
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return removed
    for folder in siblings:
        found = pattern.match(folder.name)
        if not found or not folder.is_dir() or folder.is_symlink():
            continue
        pid = found.group(1)
        if pid is not None and _process_runs(int(pid)):
            continue  # a writer of the same name still at work (this process's own included)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def refuse_existing(out: Path, error: type[Exception] = CheckpointError) -> None:
    """A folder the user already has is never written into: `out` must not exist or be an empty folder."""
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise error(f"{out}: already exists and is not an empty folder; nothing was written there. Give a new "
                    "--out (or remove that folder yourself)")


def disk_full(out: Path, errno_code: int) -> OSError:
    """The error for a write of `out` that failed because the disk under it filled, in words."""
    error = OSError(f"cannot write {out}: no space left on the disk that holds {out.parent.resolve()}; nothing was "
                    f"left at {out}, and what was there before is unchanged")
    error.errno = errno_code
    return error


@contextmanager
def staged_folder(out: str | Path, purpose: str, error: type[Exception] = CheckpointError) -> Iterator[Path]:
    """Yield an empty staging folder for `out`; when the block ends without error it becomes `out`
    (which must not exist, or be an empty folder: else `error`); otherwise it is removed and `out` is untouched.
    A full disk is re-raised as an OSError that says so in words."""
    out = Path(out)
    refuse_existing(out, error)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out, purpose)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", suffix=f".{purpose}", dir=out.parent))
    try:
        try:
            yield staging
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_full(out, e.errno) from None
            raise
        refuse_existing(out, error)  # another writer may have made it meanwhile
        if out.exists():
            out.rmdir()
        staging.chmod(0o755)  # mkdtemp makes 0700 folders; runs are shared and shipped
        for path in staging.rglob("*"):  # and some writers (safetensors') make 0600 files
            path.chmod(0o755 if path.is_dir() else 0o644)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
