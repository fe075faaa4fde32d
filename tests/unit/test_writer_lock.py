"""One writer a run folder: a second `damcha train` into a folder another process is training into is refused in
words, before it clears, reads or writes anything there; the lock goes with its process, however it ends."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from damcha.__main__ import main
from damcha.runs.files import CheckpointError
from damcha.runs.writer_lock import LOCK_NAME, writer_lock

ROOT = Path(__file__).resolve().parents[2]


def test_a_held_folder_refuses_a_second_writer_naming_the_holder_and_is_free_after(tmp_path):
    with writer_lock(tmp_path):
        assert f"pid {os.getpid()}" in (tmp_path / LOCK_NAME).read_text()
        with pytest.raises(CheckpointError, match=f"another process is training into this run folder .*pid {os.getpid()}"):
            with writer_lock(tmp_path):
                pass
    assert not (tmp_path / LOCK_NAME).exists()  # released and removed
    with writer_lock(tmp_path):  # free again
        pass


def test_the_lock_of_a_killed_writer_is_released_with_its_process(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom damcha.runs.writer_lock import writer_lock\n"
                               f"with writer_lock({str(tmp_path)!r}):\n    print('held', flush=True)\n    time.sleep(600)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(CheckpointError, match=f"pid {holder.pid}"):
        with writer_lock(tmp_path):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert (tmp_path / LOCK_NAME).exists()  # left behind by the kill, but no longer held
    with writer_lock(tmp_path):
        pass


def test_damcha_train_into_a_folder_being_trained_into_is_refused_and_touches_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    stale = out / ".epoch_1.safetensors.abcd1234.tmp"  # a temporary file the holder is writing
    stale.write_bytes(b"partial")
    with writer_lock(out):
        before = sorted(p.name for p in out.iterdir())
        code = main(["train", "--dataset", "digits", "--epochs", "1", "--train-limit", "32", "--out", str(out)])
        assert code == 2
        assert "another process is training into this run folder" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == before and stale.read_bytes() == b"partial"


def test_a_file_of_the_users_by_the_locks_name_is_refused_and_left_as_it_was(tmp_path):
    mine = tmp_path / LOCK_NAME
    mine.write_text("my notes\n")
    with pytest.raises(CheckpointError, match="a file this program did not write"):
        with writer_lock(tmp_path):
            pass
    assert mine.read_text() == "my notes\n"
