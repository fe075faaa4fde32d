"""A process killed while it renders PNG/SVG/PDF (a server killed during "Export all") leaves Chromium's
profile and page in its render folder, one folder per process of this user's (damcha/views/render_folders.py),
and Chromium's socket folder, which the profile links to, in the system's temporary folder: the next process
that renders removes both, and leaves every folder of a process still running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from damcha.views.render_folders import render_folder, render_parent


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_what_a_killed_render_leaves_is_removed_by_the_next_and_a_running_ones_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMCHA_RENDER_DIR", str(tmp_path / "render"))
    parent = render_parent()
    dead, alive = parent / str(_dead_pid()), parent / str(os.getppid())  # (the parent of this process runs)
    sockets = tmp_path / "org.chromium.Chromium.abc123"  # where the killed Chromium's profile links
    sockets.mkdir()
    (sockets / "SingletonSocket").write_text("")
    for folder in (dead / "profile", alive / "profile"):
        folder.mkdir(parents=True)
        (folder / "Preferences").write_bytes(b"x" * 100_000)
    (dead / "profile" / "SingletonSocket").symlink_to(sockets / "SingletonSocket")
    own = render_folder()
    assert own == parent / str(os.getpid()) and own.is_dir()
    assert not dead.exists() and not sockets.exists(), "a killed render's profile or socket folder was left"
    assert (alive / "profile" / "Preferences").exists(), "a running process's render folder was removed"
    assert sorted(p.name for p in parent.iterdir()) == sorted([own.name, alive.name])


def test_a_render_parent_owned_by_another_user_or_a_link_is_not_used(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "render").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("DAMCHA_RENDER_DIR", str(tmp_path / "render"))
    assert render_folder() is None and not list((tmp_path / "elsewhere").iterdir())
    assert Path(str(render_parent())) == tmp_path / "render"
