"""Where kaleido's Chromium keeps its profile and page while it renders PNG, SVG and PDF: one folder per
process under one parent of this user's, so that what a killed process leaves (a server killed during
"Export all": about 2 MB of browser profile) is found and removed by the next process that renders, instead of
piling up in the system's temporary folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def render_parent() -> Path:
    """This user's parent of the render folders ($DAMCHA_RENDER_DIR, else one in the temporary folder)."""
    return Path(os.environ.get("DAMCHA_RENDER_DIR") or Path(tempfile.gettempdir()) / f"damcha-render-{os.getuid()}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process holds the number: not ours to judge
        return True
    return True


def stale_render_folders(parent: Path) -> list[Path]:
    """The folders under `parent` of processes that no longer run (named by their process id)."""
    if not parent.is_dir():
        return []
    return [p for p in parent.iterdir() if p.is_dir() and not p.is_symlink() and p.name.isdigit()
            and int(p.name) != os.getpid() and not _running(int(p.name))]


def remove_render_folder(folder: Path) -> None:
    """A render folder and the socket folder its Chromium made in the system's temporary folder (its profile's
    SingletonSocket links there; Chromium removes it on a clean exit, not when killed)."""
    for link in folder.glob("*/SingletonSocket"):
        socket_folder = Path(os.readlink(link)).parent if link.is_symlink() else None
        if socket_folder is not None and socket_folder.name.startswith("org.chromium.Chromium.") \
                and socket_folder.is_dir() and not socket_folder.is_symlink() and socket_folder.stat().st_uid == os.getuid():
            shutil.rmtree(socket_folder, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def render_folder() -> Path | None:
    """This process's render folder, made afresh after the stale ones are removed; None (render in the system's
    temporary folder, as kaleido does by default) where the parent is not a folder this user owns."""
    parent = render_parent()
    try:
        parent.mkdir(mode=0o700, exist_ok=True)
        info = parent.lstat()
        if not parent.is_dir() or parent.is_symlink() or info.st_uid != os.getuid():
            return None
        for stale in stale_render_folders(parent):
            remove_render_folder(stale)
        own = parent / str(os.getpid())
        own.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return own
