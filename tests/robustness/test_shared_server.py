"""A server others can reach: the checkpoint field is fenced, messages keep the server's paths to
itself, and file contents are shown as text."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import streamlit.config
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")
SHIPPED = ROOT / "checkpoints"


@pytest.fixture
def shared_server(monkeypatch):
    """The in-process app as if started with --server.address 0.0.0.0 (restored afterwards)."""
    monkeypatch.delenv("DAMCHA_ALLOWED_ROOTS", raising=False)
    streamlit.config.set_option("server.address", "0.0.0.0")
    yield
    streamlit.config.set_option("server.address", "127.0.0.1")


def app(root: Path | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    if root is not None:
        at.session_state["checkpoint_root"] = str(root)
    at.query_params["run"] = "digits-mha"
    return at.run()


def test_without_allowed_roots_the_folder_field_of_a_shared_server_is_read_only(shared_server, tmp_path):
    at = app(tmp_path)  # a visitor's attempt to open another folder
    assert not at.exception
    field = at.sidebar.text_input(key="root_shown")
    assert field.disabled and str(ROOT) not in field.value
    assert any("cannot be changed here" in c.value for c in at.sidebar.caption)
    assert any("listens on 0.0.0.0" in w.value for w in at.sidebar.warning)
    assert at.selectbox(key="run").value == "digits-mha"  # the shipped runs, not the visitor's folder


def test_allowed_roots_fence_the_folders_a_visitor_may_open(shared_server, monkeypatch, tmp_path):
    allowed = tmp_path / "allowed"
    shutil.copytree(SHIPPED / "digits-mha", allowed / "runs" / "digits-mha")
    monkeypatch.setenv("DAMCHA_ALLOWED_ROOTS", str(allowed))
    inside = app(allowed / "runs")
    assert not inside.exception and inside.selectbox(key="run").value == "digits-mha"
    outside = app(tmp_path)
    assert not outside.exception
    assert any("outside the folders this server allows" in e.value for e in outside.sidebar.error)
    escaped = app(allowed / "runs" / ".." / "..")  # '..' resolves outside
    assert any("outside the folders" in e.value for e in escaped.sidebar.error)


def test_messages_name_paths_relative_to_the_checkpoint_root(tmp_path):
    root = tmp_path / "server" / "runs"
    shutil.copytree(SHIPPED / "digits-mha", root / "digits-mha")
    shutil.copytree(SHIPPED / "digits-mha", root / "broken")
    (root / "broken" / "config.json").write_text("{}")
    at = app(root)
    skipped = [w.value for w in at.sidebar.warning if "broken" in w.value]
    assert skipped and all(str(tmp_path) not in w for w in skipped), skipped
    assert skipped[0].startswith("Skipped runs/broken")


def test_config_notes_are_shown_as_plain_text(tmp_path):
    run = tmp_path / "runs" / "noted"
    shutil.copytree(SHIPPED / "digits-mha", run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["notes"] = ["[click me](javascript:alert(1)) ![x](http://example.invalid/x.png) **loud**"]
    (run / "config.json").write_text(json.dumps(cfg))
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["checkpoint_root"] = str(tmp_path / "runs")
    at.switch_page("../pages/inspector.py")
    at.run()
    note = next(w.value for w in at.warning if "click me" in w.value)
    assert note.startswith(r"\[click me\]\(javascript") and r"\*\*loud\*\*" in note


def test_the_launcher_passes_the_host_and_the_allowed_folders(tmp_path):
    from damcha.__main__ import app_command

    command, env = app_command(host="0.0.0.0", port=8600, allow_roots=[str(tmp_path)])
    assert command[:4] == [sys.executable, "-m", "streamlit", "run"] and Path(command[4]) == ROOT / "app"
    assert "--server.address" in command and command[command.index("--server.address") + 1] == "0.0.0.0"
    assert env["DAMCHA_ALLOWED_ROOTS"] == str(tmp_path.resolve())
    help_text = subprocess.run([sys.executable, "-m", "damcha", "app", "--help"], capture_output=True, text=True,
                               cwd=tmp_path).stdout
    assert "--allow-root" in help_text
