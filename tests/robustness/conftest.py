"""Fixtures of the robustness tests."""

from __future__ import annotations

import os
import subprocess

import pytest


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MB tmpfs; outside CI, a machine that may not mount one skips with the reason."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        reason = f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
