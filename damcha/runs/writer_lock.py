"""One writer a run folder: `writer_lock(folder)` holds an exclusive lock on FOLDER/.writer.lock while a run
trains into it, so a second `damcha train` (or a job the scheduler started twice) is refused in words instead of
both writing one run's snapshots. The kernel releases the lock when its process dies, however it dies."""

from __future__ import annotations

import fcntl
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from damcha.runs.files import CheckpointError

LOCK_NAME = ".writer.lock"
HOLDER = re.compile(r"\S+ pid \d+ since \S+ \S+\n?$")  # what writer_lock writes into it


@contextmanager
def writer_lock(folder: str | Path) -> Iterator[None]:
    """Hold the folder's writer lock for the block; CheckpointError naming the holder when another has it."""
    path = Path(folder) / LOCK_NAME
    fd = _acquire(path)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        yield
    finally:
        try:
            path.unlink()  # (still held: a waiter that opened this file finds it gone and opens the next)
        except OSError:
            pass
        os.close(fd)


def _acquire(path: Path) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise CheckpointError(f"{path.parent}: another process is training into this run folder ({holder}); "
                                  "wait for it to end, or train into another folder") from None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if not current:  # the holder removed it as we opened it: the lock is on a file nobody else will open
            os.close(fd)
            continue
        said = os.read(fd, 4096).decode("utf-8", "replace")
        if said and not HOLDER.match(said):  # a file of the user's by that name: never truncated or removed
            os.close(fd)
            raise CheckpointError(f"{path}: a file this program did not write holds the name of a run folder's writer "
                                  "lock; move it away and train again")
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
