"""A server others can reach: the checkpoint field is fenced, messages keep the server's paths to
itself, and file contents are shown as text."""

import json
import os
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


def visitor_types(at: AppTest, folder: str) -> AppTest:
    at.text_input(key="root_input").set_value(folder).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def fenced(shared_server, monkeypatch, tmp_path):
    """A shared server allowing one folder; another folder with runs beside it, outside the fence."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    shutil.copytree(SHIPPED / "digits-mha", allowed / "runs" / "digits-mha")
    shutil.copytree(SHIPPED / "digits-damcha", outside / "secret-run")
    monkeypatch.setenv("DAMCHA_ALLOWED_ROOTS", str(allowed))
    return allowed, outside


@pytest.mark.parametrize("page", ["home", "compare", "ablation", "dynamics", "gradients"])
def test_a_visitor_typing_a_folder_outside_the_fence_sees_nothing_of_it(fenced, page):
    allowed, outside = fenced
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["checkpoint_root"] = str(allowed / "runs")
    at.switch_page(f"../pages/{page}.py")
    at.run()
    for folder in (str(outside), "/", "/etc", str(allowed / "runs" / ".." / ".." / "outside")):
        visitor_types(at, folder)
        shown = " ".join(str(e.value) for kind in ("markdown", "subheader", "warning", "caption", "info", "error")
                         for e in at.get(kind))
        tables = " ".join(str(t.value) for t in at.dataframe)
        assert "secret-run" not in shown + tables and "Runs in outside" not in shown, (folder, page)
        assert any("outside the folders this server allows" in e.value for e in at.sidebar.error), folder
        assert at.selectbox(key="run").value == "digits-mha"  # the folder in use stays
        if page == "home":
            assert "digits-mha" in tables and "secret-run" not in tables


def test_a_symlinked_file_leading_out_of_the_fence_is_not_followed(fenced):
    allowed, outside = fenced
    run = allowed / "runs" / "digits-mha"
    (run / "epoch_0040.safetensors").unlink()
    os.symlink(outside / "secret-run" / "epoch_0040.safetensors", run / "epoch_0040.safetensors")
    at = app(allowed / "runs")
    assert not at.exception
    assert 40 not in at.select_slider(key="epoch").options
    assert any("Epoch 40" in w.value and "outside the checkpoint folder" in w.value for w in at.sidebar.warning)


@pytest.mark.parametrize("folder, why", [
    ("bad\x00path", "NUL"), ("a" * 5000, "too long"), (str(ROOT / "README.md"), "a file, not a folder"),
    ("/nowhere/at/all", "no such folder"), ("", "no folder given"),
])
def test_any_string_in_the_folder_field_is_one_message_and_the_folder_in_use_stays(folder, why):
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "digits-mha"
    at.run()
    visitor_types(at, folder)
    assert [e.value for e in at.sidebar.error if why in e.value], [e.value for e in at.sidebar.error]
    assert len(at.sidebar.error) == 1
    assert at.selectbox(key="run").value == "digits-mha"


def test_a_fifo_or_a_symlink_loop_in_the_folder_field_keeps_the_folder_in_use(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    os.symlink("loop", tmp_path / "loop")
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "digits-mha"
    at.run()
    for folder, why in ((tmp_path / "pipe", "not a folder"), (tmp_path / "loop", "symlink loop")):
        visitor_types(at, str(folder))
        assert any(why in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
        assert at.selectbox(key="run").value == "digits-mha"


def test_an_uploaded_file_name_is_shown_as_text(tmp_path):
    from tests.support.images import handwritten_digit

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "digits-damcha"
    at.switch_page("../pages/inspector.py")
    at.run()
    at.radio(key="source").set_value("Upload an image").run()
    name = "[a](https://example.invalid) ![i](https://example.invalid/i.png).png"
    at.file_uploader(key="upload_image").upload(name, handwritten_digit("7"), "image/png").run()
    assert not at.exception
    line = next(m.value for m in at.markdown if m.value.startswith("**Input:**"))
    assert "\\[a\\]\\(https\\:\u2060//example.invalid\\)" in line and r"\!\[i\]" in line  # (no link: a word joiner)


def test_a_page_failure_on_a_shared_server_shows_no_traceback_or_server_path(shared_server, monkeypatch):
    import app.cache

    def fail(*args, **kwargs):
        raise RuntimeError(f"boom in {ROOT}/secret/place")

    monkeypatch.setattr(app.cache, "inspection", fail)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "digits-mha"
    at.switch_page("../pages/inspector.py")
    at.run()
    assert not at.exception
    message = next(e.value for e in at.error if "This view failed" in e.value)
    assert "RuntimeError" in message and str(ROOT) not in message


def test_a_link_to_a_run_that_is_not_there_says_so():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["run"] = "no-such-run"
    at.run()
    assert not at.exception
    assert any("no-such-run is not in this folder" in w.value for w in at.sidebar.warning)
