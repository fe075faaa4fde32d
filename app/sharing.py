"""What a visitor may do on a server that others share: where runs may be opened from, which server
settings are in force, and paths shown without the server's own layout.

Set DAMCHA_ALLOWED_ROOTS (folders separated by the OS path separator; `python -m damcha app
--allow-root DIR` sets it) to let visitors type checkpoint folders inside those folders only. On a
server bound to anything but loopback without that setting, the checkpoint field is read-only:
otherwise any visitor could list and open whatever the server's user can read.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import streamlit as st

from damcha.runs.checkpoints import CheckpointError

ALLOWED_ROOTS_ENV = "DAMCHA_ALLOWED_ROOTS"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
SAFE_UPLOAD_MB = 5


def allowed_roots() -> list[Path]:
    """The folders runs may be opened from, as set by DAMCHA_ALLOWED_ROOTS (empty: not set)."""
    raw = os.environ.get(ALLOWED_ROOTS_ENV, "")
    out = []
    for part in raw.split(os.pathsep):
        if part.strip():
            try:
                out.append(Path(part.strip()).expanduser().resolve())
            except (OSError, RuntimeError):
                continue
    return out


def server_address() -> str:
    return str(st.get_option("server.address") or "")


def is_local_server() -> bool:
    """Bound to loopback only: nobody but this machine's users can reach it."""
    return server_address() in LOOPBACK


def root_field_editable() -> tuple[bool, str]:
    """Whether visitors may type a checkpoint folder, and why not."""
    if allowed_roots() or is_local_server():
        return True, ""
    where = server_address() or "every network interface"
    return False, (f"This server listens on {where} and {ALLOWED_ROOTS_ENV} is not set, so the checkpoint folder "
                   "cannot be changed here (any visitor could open any folder of the server). Start it with "
                   "`python -m damcha app --allow-root DIR` to allow folders inside DIR.")


MAX_PATH_CHARS = 4096


def folder_problem(path: Path) -> str | None:
    """Why a typed checkpoint folder cannot be opened (None: it can): outside the allowed folders,
    or not a readable folder (nor a reference .pt file). Never raises, whatever the string."""
    text = str(path)
    if "\x00" in text:
        return "the path holds a NUL character"
    if len(text) > MAX_PATH_CHARS or any(len(part.encode()) > 255 for part in Path(text).parts):
        return "the path is too long"
    refused = check_allowed(path)
    if refused:
        return refused
    try:
        info = os.stat(path.expanduser())
    except FileNotFoundError:
        return "no such folder"
    except (OSError, RuntimeError, ValueError) as e:
        return f"cannot open this folder ({'a symlink loop' if getattr(e, 'errno', None) == 40 else type(e).__name__})"
    if stat.S_ISREG(info.st_mode):
        return None if path.suffix == ".pt" else "this is a file, not a folder of runs (or a reference .pt file)"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if not os.access(path.expanduser(), os.R_OK | os.X_OK):
        return "this folder cannot be read (permission denied)"
    return None


def check_allowed(path: Path) -> str | None:
    """Why `path` may not be opened (None: it may). The default folder is always allowed."""
    roots = allowed_roots()
    if not roots:
        return None
    try:
        resolved = path.expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as e:
        return f"cannot open this folder ({type(e).__name__})"
    if any(resolved.is_relative_to(r) for r in roots):
        return None
    return "this folder is outside the folders this server allows runs to be opened from"


def plain_text(text: str) -> str:
    """Text from a file, a folder name or an upload shown as it is: Markdown and HTML characters
    escaped, so nothing a visitor or a file supplies can draw links, images or formatting."""
    escaped = re.sub(r"([\\`*_{}\[\]()#!|~<>$:&])", r"\\\1", text)
    # Streamlit's Markdown links a bare https://…, www.example.org or name@example.org whatever is escaped (GFM's
    # autolinks are found in the text after escapes are read): an invisible word joiner (U+2060) where the link
    # would start keeps the text as it reads and links nothing.
    escaped = re.sub(r"(?i)\b(www)\.", "\\1\u2060.", escaped).replace("@", "@\u2060").replace("\\://", "\\:\u2060//")
    return re.sub(r"^(\s*)([-+>=])", r"\1\\\2", escaped, flags=re.MULTILINE)  # list, quote and heading markers


def shown_path(path: Path | str, root: Path | str) -> str:
    """A path as a visitor sees it: relative to the checkpoint root, named by that root's last part."""
    path, root = Path(path), Path(root)
    for base in (root, _resolved(root)):
        try:
            rel = path.relative_to(base)
            return str(Path(base.name) / rel) if str(rel) != "." else base.name
        except ValueError:
            continue
    return path.name


def redacted(message: str, root: Path | str) -> str:
    """A library message as a visitor sees it: the server's absolute location of the checkpoint
    root taken out, and shown as plain text (plain_text: file and folder names are not Markdown)."""
    root = Path(root)
    for base in sorted({str(root), str(_resolved(root))}, key=len, reverse=True):
        if base not in ("", ".", "/"):
            message = message.replace(base, Path(base).name)
    return plain_text(message)


def failure_text(e: Exception, root: Path | str) -> str:
    """What one run's failure says to a visitor: the project's own message, or the kind of any other
    exception with the start of its text; paths relative to the root, shown as plain text."""
    why = str(e) if isinstance(e, CheckpointError) else f"{type(e).__name__}: {str(e)[:200]}"
    return redacted(why, root)


def skipped_line(path: Path, why: str, root: Path | str) -> str:
    """One line for a folder that could not be opened as a run: its name and the reason, once."""
    shown, reason = plain_text(shown_path(path, root)), redacted(why, root)
    for prefix in (f"{shown}\\: ", f"{shown}/"):
        if reason.startswith(prefix):
            reason = reason[len(shown) + 1:].lstrip("/") if prefix.endswith("/") else reason[len(prefix):]
            break
    return f"Skipped {shown}: {reason}"


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def server_settings_warning() -> str | None:
    """A sentence when the server runs without the project's safe settings (loopback, 5 MB uploads)."""
    problems = []
    if not is_local_server():
        problems.append(f"listens on {server_address() or 'every network interface'}")
    limit = st.get_option("server.maxUploadSize")
    if limit > SAFE_UPLOAD_MB:
        problems.append(f"accepts uploads up to {limit} MB (the app reads at most {SAFE_UPLOAD_MB} MB)")
    if not problems:
        return None
    return ("This server " + " and ".join(problems) + ". That is on purpose only when you share it; "
            "`streamlit run app` and `python -m damcha app` start it on 127.0.0.1 with 5 MB uploads.")
