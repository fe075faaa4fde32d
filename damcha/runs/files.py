"""Files read from disk, checked before anything is built from them.

Every file a run, a reference import or the app reads goes through here: it must resolve (symlinks
followed, a loop refused) to a regular file (not a folder, FIFO or device) inside the folder the
caller fences it to, be no larger than the caller's cap (checked before reading, and again while
reading, so a growing file cannot slip past), and JSON must be UTF-8, at most `MAX_JSON_DEPTH`
deep and, unless asked otherwise, free of NaN and infinity. Anything else is a `CheckpointError`
whose message names the file and what was wrong with it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_JSON_DEPTH = 32
MAX_INT_DIGITS = 30  # a 64-bit integer has at most 19 digits; no field of a run, metrics line or Trainer state more


class CheckpointError(ValueError):
    """A run, snapshot or file cannot be used; the message says which file and why."""


class NotJSON(CheckpointError):
    """Text that does not parse as JSON at all (a torn write, another format), as against JSON refused
    for its content."""


def resolved_inside(path: Path, root: Path | None) -> Path:
    """`path` with every symlink resolved; refused when that leaves `root` or loops."""
    path = Path(path)
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError before 3.13), a name too long
        raise CheckpointError(f"{path}: cannot be opened ({_os_reason(e)})") from None
    if root is not None and not real.is_relative_to(_real(root)):
        raise CheckpointError(f"{path}: a link to a file outside the checkpoint folder, not followed")
    return real


def regular_file(path: Path, root: Path | None = None, limit: int | None = None,
                 what: str = "file") -> tuple[Path, os.stat_result]:
    """The resolved path and stat of `path`, which must resolve inside `root` to a regular file of at
    most `limit` bytes."""
    real = resolved_inside(path, root)
    try:
        info = os.stat(real)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be opened ({_os_reason(e)})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{path}: not a regular file (a {_file_kind(info.st_mode)}), so not a {what}")
    if limit is not None and info.st_size > limit:
        raise CheckpointError(f"{path}: {info.st_size:,} bytes is more than a {what} may hold ({limit:,})")
    return real, info


def read_bytes(path: Path, limit: int, root: Path | None = None, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see regular_file)."""
    real, _ = regular_file(path, root, limit, what)
    try:
        with open(real, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({_os_reason(e)})") from None
    if len(data) > limit:
        raise CheckpointError(f"{path}: grew past {limit:,} bytes while being read")
    return data


def read_text(path: Path, limit: int, root: Path | None = None, what: str = "file") -> str:
    try:
        return read_bytes(path, limit, root, what).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text (byte {e.start}), so not a {what}") from None


def parse_json(text: str, where: str, allow_non_finite: bool = False) -> Any:
    """JSON from text, at most MAX_JSON_DEPTH deep; NaN and infinity refused unless allowed."""
    def refuse(constant: str):
        raise CheckpointError(f"{where}: {constant} is not a usable number")

    def whole_number(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:  # before int() reads it: Python refuses 4,300 digits, and a
            # long one overflows every float conversion after it
            raise CheckpointError(f"{where}: a whole number of {len(digits.lstrip('-')):,} digits, more than the "
                                  f"{MAX_INT_DIGITS} any field of a DAMCHA file may have")
        return int(digits)

    def number(text: str) -> float:
        value = float(text)
        if not allow_non_finite and not math.isfinite(value):
            refuse(text[:40])  # 1e999 reads as infinity
        return value

    try:
        value = json.loads(text, parse_constant=None if allow_non_finite else refuse, parse_int=whole_number,
                           parse_float=number)
    except RecursionError:
        raise CheckpointError(f"{where}: nested too deeply to be a DAMCHA file") from None
    except json.JSONDecodeError as e:
        raise NotJSON(f"{where}: not valid JSON ({e})") from None
    depth = json_depth(value, MAX_JSON_DEPTH)
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(f"{where}: nested more than {MAX_JSON_DEPTH} levels deep, more than a DAMCHA file is")
    return value


def read_json(path: Path, limit: int, root: Path | None = None, what: str = "file", allow_non_finite: bool = False) -> Any:
    return parse_json(read_text(path, limit, root, what), str(path), allow_non_finite)


def json_depth(value: Any, stop: int) -> int:
    """How deep lists and objects nest in a parsed JSON value (counting stops past `stop`)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > stop:
                return deepest
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _real(root: Path) -> Path:
    try:
        return Path(root).resolve()
    except (RuntimeError, OSError):
        return Path(root)


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def _os_reason(e: BaseException) -> str:
    if isinstance(e, RuntimeError) or getattr(e, "errno", None) == 40:  # ELOOP
        return "a symlink loop"
    return getattr(e, "strerror", None) or type(e).__name__


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's content, remembered while its size and modification time stay the same
    (snapshot keys of the disk cache, provenance of exports: each file is read once)."""
    st = Path(path).stat()
    return _sha256_of(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
