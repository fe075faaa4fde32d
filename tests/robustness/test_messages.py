"""Values that once ended in Python's own words (or a traceback) end in the project's: the file, and the
field or the limit. Each case is a copy of a shipped run with one thing wrong, read by the figures command
as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from damcha.runs import checkpoints
from damcha.runs.checkpoints import CheckpointError, list_runs, load_run
from tests.support.folders import folder_digest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "digits-mha"


def _edit_config(run: Path, text_change) -> None:
    (run / "config.json").write_text(text_change((run / "config.json").read_text()))


def _model_field(name: str, value) -> callable:
    def change(text: str) -> str:
        config = json.loads(text)
        config["model"][name] = value
        return json.dumps(config)
    return change


CASES = {  # name -> (how the run is broken, words the message must hold)
    "a 5,000-digit integer in config.json": (
        lambda run: _edit_config(run, lambda t: t.replace('"n_layer": 2', '"n_layer": ' + "9" * 5000)),
        ["config.json", "a whole number of 5,000 digits", "more than the 30"]),
    "a 5,000-digit epoch in metrics.jsonl": (
        lambda run: (run / "metrics.jsonl").write_text('{"epoch": ' + "7" * 5000 + ', "val_nll": 1.0}\n'),
        ["metrics.jsonl", "line 1", "5,000 digits"]),
    "a 400-digit loss in metrics.jsonl (a float overflows)": (
        lambda run: (run / "metrics.jsonl").write_text('{"epoch": 40, "val_nll": ' + "7" * 400 + '}\n'),
        ["metrics.jsonl", "400 digits"]),
    "1e999 in config.json": (
        lambda run: _edit_config(run, lambda t: t.replace('"dropout": 0.1', '"dropout": 1e999')),
        ["config.json", "1e999 is not a usable number"]),
    "attention_options as a list": (
        lambda run: _edit_config(run, _model_field("attention_options", [1, 2])),
        ["config.json", "attention_options must be an object of settings", "[1, 2]"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_figures_command_names_the_file_and_the_field_or_limit(tmp_path, case):
    breaks, words = CASES[case]
    run = tmp_path / "run"
    shutil.copytree(SHIPPED, run)
    breaks(run)
    before = folder_digest(run)
    done = subprocess.run([sys.executable, "-m", "damcha", "figures", "--run", str(run), "--val-index", "0",
                           "--figures", "attention", "--formats", "csv", "--out", str(tmp_path / "figures")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Exceeds the limit" not in done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("error: ") and str(run) in message
    for word in words:
        assert word in message, (word, message)
    assert folder_digest(run) == before  # nothing of the user's changed


def test_a_folder_this_process_may_not_enter_is_said_so_not_read_as_one_without_a_config(tmp_path, monkeypatch):
    # The tests run as root, whom no permission stops: the process's own access check is what is denied.
    locked = tmp_path / "locked"
    shutil.copytree(SHIPPED, locked)
    shutil.copytree(SHIPPED, tmp_path / "open")
    real_access = os.access
    monkeypatch.setattr(checkpoints.os, "access",
                        lambda path, mode, **kw: Path(path) != locked and real_access(path, mode, **kw))
    with pytest.raises(CheckpointError, match="locked: cannot be opened \\(permission denied"):
        load_run(locked)
    runs, bad = list_runs(tmp_path)
    assert [r.name for r in runs] == ["open"]
    assert [(path.name, "permission denied" in why) for path, why in bad] == [("locked", True)]
