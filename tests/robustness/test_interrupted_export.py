"""A process killed while it renders PNG/SVG/PDF (a server killed during "Export all") leaves Chromium's
profile and page behind: they sit in one folder of this user's (Chromium's own socket folder, which the profile
links to, in the system's temporary folder), and the next process that renders removes them (damcha/views/render_folders.py); nothing is left in the system's temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.browser import require_static_export

ROOT = Path(__file__).resolve().parents[2]
RENDER = """
import os, signal, sys
import plotly.graph_objects as go
from damcha.views.export import figure_bytes
assert figure_bytes(go.Figure(go.Heatmap(z=[[1, 2], [3, 4]])), "png").startswith(b"\\x89PNG")
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _render(tmp: Path, how: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("DAMCHA_RENDER_DIR", None)
    return subprocess.run([sys.executable, "-c", RENDER, how], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_what_a_killed_render_leaves_is_removed_by_the_next_and_nothing_else_is_left(tmp_path):
    require_static_export()
    killed = _render(tmp_path, "kill")
    assert killed.returncode == -9, killed.stderr[-2000:]
    parent = tmp_path / f"damcha-render-{os.getuid()}"
    # beside the render folders only the socket folder of the killed Chromium, which its profile links to
    assert {p.name for p in tmp_path.iterdir() if not p.name.startswith("org.chromium.Chromium.")} == {parent.name}
    left = list(parent.iterdir())
    assert len(left) == 1 and sum(f.stat().st_size for f in left[0].rglob("*") if f.is_file()) > 100_000  # a profile
    done = _render(tmp_path, "exit")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in tmp_path.iterdir()] == [parent.name] and not list(parent.iterdir()), \
        sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))[:20]
