"""Process-wide malloc tuning for CPU training (glibc only; a no-op elsewhere).

A training step allocates and frees tensors of tens of MB (a DAMCHA per-position metric and
its gradient are (B*T, H*d*d) floats: 16 MB at B=32, T=64, D=128, H=8). By default glibc hands
blocks that large back to the kernel on free and page-faults them in again on the next step,
about 1 us per 4 KB page: 3-4 ms for each such tensor. Serving them from malloc's heap and keeping
freed memory there removes that cost (a DAMCHA training step about 7% faster; MHA, whose
tensors are smaller, gains less), at the price of the process keeping up to 1 GB it no longer
uses. Only entry points that own their process call this (the train CLI, the benchmarks);
importing damcha never does.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEEP_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to 1 GB. Returns whether it applied."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl without mallopt)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))
