"""Values that once ended in Python's own words (or a traceback) end in the project's: the file, and the
field or the limit. (The cases a user meets through a command are in test_battery.py; these reach the
readers directly.)"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest

from damcha.inputs.datasets.base import DataError
from damcha.inputs.datasets.benchmark_corpora import ENWIK8, load_benchmark_corpus
from damcha.inputs.datasets.cifar import read_cifar_folder
from damcha.runs import checkpoints
from damcha.runs.checkpoints import CheckpointError, list_runs, load_run
from tests.support.hostile_files import cifar_with_a_bad_batch

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "digits-mha"


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


@pytest.mark.parametrize("case, make, words", [
    ("labels an integer", lambda t: cifar_with_a_bad_batch(t, labels=7), ["data_batch_2", "'labels' is int 7"]),
    ("labels strings", lambda t: cifar_with_a_bad_batch(t, labels=["cat", "dog", "cat", "dog"]),
     ["data_batch_2", "'labels' holds", "not 4 whole class numbers"]),
    ("labels out of range", lambda t: cifar_with_a_bad_batch(t, labels=[1, 2, 3, 1000]), ["data_batch_2", "outside 0..99"]),
    ("a FIFO as a batch", lambda t: cifar_with_a_bad_batch(t, fifo="data_batch_3"), ["data_batch_3: a FIFO"]),
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
