"""Values that once ended in Python's own words (or a traceback) end in the project's: the file, and the
field or the limit. Each case is a copy of a shipped run with one thing wrong, read by the figures command
as a user runs it."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from damcha.inputs.datasets.base import DataError
from damcha.inputs.datasets.benchmark_corpora import ENWIK8, load_benchmark_corpus
from damcha.inputs.datasets.cifar import read_cifar_folder
from damcha.inputs.datasets.generated import write_standard_format_files
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


def _cifar(tmp_path: Path, labels=None, fifo: str | None = None) -> Path:
    folder = write_standard_format_files(tmp_path / "data", images_per_batch=4)["cifar10"]
    if labels is not None:
        raw = pickle.loads((folder / "data_batch_2").read_bytes())
        raw[b"labels"] = labels
        (folder / "data_batch_2").write_bytes(pickle.dumps(raw, protocol=2))
    if fifo:
        (folder / fifo).unlink()
        os.mkfifo(folder / fifo)
    return folder


@pytest.mark.parametrize("case, make, words", [
    ("labels an integer", lambda t: _cifar(t, labels=7), ["data_batch_2", "'labels' is int 7"]),
    ("labels strings", lambda t: _cifar(t, labels=["cat", "dog", "cat", "dog"]),
     ["data_batch_2", "'labels' holds", "not 4 whole class numbers"]),
    ("labels out of range", lambda t: _cifar(t, labels=[1, 2, 3, 1000]), ["data_batch_2", "outside 0..99"]),
    ("a FIFO as a batch", lambda t: _cifar(t, fifo="data_batch_3"), ["data_batch_3: a FIFO"]),
])
def test_a_cifar_folder_with_one_bad_batch_is_refused_naming_the_file_and_field(tmp_path, case, make, words):
    folder = make(tmp_path)
    with pytest.raises(DataError) as refused:  # with or without the flag: a bad file is never skipped or read
        read_cifar_folder(folder, nonstandard_ok=True)
    for word in words:
        assert word in str(refused.value), (case, str(refused.value))


@pytest.mark.parametrize("case, words", [("encrypted", "is encrypted"), ("method 99", "method 99")])
def test_a_corpus_zip_member_python_cannot_read_is_refused_in_words(tmp_path, case, words):
    archive = tmp_path / "enwik8.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", b"<mediawiki> " * 1000)
    data = bytearray(archive.read_bytes())
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # the local and the central header of the one member
        at = data.find(header)
        if case == "encrypted":
            flags = 6 if header == b"PK\x03\x04" else 8
            data[at + flags] |= 0x1
        else:
            method = 8 if header == b"PK\x03\x04" else 10
            data[at + method:at + method + 2] = (99).to_bytes(2, "little")
    archive.write_bytes(bytes(data))
    with pytest.raises(DataError, match=words) as refused:
        load_benchmark_corpus(ENWIK8, archive, 64, nonstandard_ok=True)
    assert str(archive) in str(refused.value)
