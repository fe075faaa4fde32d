"""Worker processes die with the command that started them, from the first line of `import damcha`.

A spawned worker spends its first seconds importing torch before any initializer of its pool
runs: a command killed in that window would leave workers training into the same run folders as
the next call. `workers_die_with_this_process()` marks the workers a block starts (by this
process's pid in the environment); `guard_worker()`, the first thing `damcha/__init__.py` runs,
makes such a worker die with its parent (Linux: PR_SET_PDEATHSIG) and exit at once if the parent
is already gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

PARENT_ENV = "DAMCHA_DIE_WITH_PARENT"


def guard_worker() -> None:
    # Only a process started inside the block carries the mark; it takes it off at once, so its
    # own children never read it. A marked process whose parent is not the marking one is a
    # worker orphaned before this line ran: nothing to work for.
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None:
        return
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: dies when the parent does
    if str(os.getppid()) != parent:
        os._exit(1)


@contextmanager
def workers_die_with_this_process() -> Iterator[None]:
    """Workers spawned inside this block die when this process does."""
    before = os.environ.get(PARENT_ENV)
    os.environ[PARENT_ENV] = str(os.getpid())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PARENT_ENV, None)
        else:
            os.environ[PARENT_ENV] = before
