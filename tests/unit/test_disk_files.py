"""Files the library writes and keeps: atomic writes reach the disk before their name does, one
content hash for every file, and the disk cache stays under its size by dropping what was used least recently."""

import hashlib
import json
import os
import time

import pytest

from damcha.runs import checkpoints, disk_cache
from damcha.runs.files import file_sha256


def test_an_atomic_write_syncs_the_file_then_the_folder_holding_its_name(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def recording(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(checkpoints.os, "fsync", recording)
    checkpoints.write_text_atomic(tmp_path / "a.json", "{}")
    assert (tmp_path / "a.json").read_text() == "{}"
    assert len(synced) == 2 and synced[0].startswith(str(tmp_path / ".a.json.")) and synced[1] == str(tmp_path)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), checkpoints.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_one_file_hash_is_the_sha256_of_the_content_and_follows_a_rewrite(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    assert file_sha256(f) == hashlib.sha256(b"abc").hexdigest()
    f.write_bytes(b"abcd")
    os.utime(f, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a new mtime even on a coarse clock
    assert file_sha256(f) == hashlib.sha256(b"abcd").hexdigest()


def _entry(folder, name, size, age_s):
    path = folder / "kind" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps("x" * (size - 2)))
    t = time.time_ns() - int(age_s * 1e9)
    os.utime(path, ns=(t, t))
    return path


def test_the_cache_drops_the_least_recently_used_entries_down_to_ninety_percent_of_its_limit(tmp_path):
    old, middle, new = (_entry(tmp_path, n, 1000, age) for n, age in (("old", 30), ("middle", 20), ("new", 10)))
    assert disk_cache.prune(tmp_path, 3000) == []  # at the limit: nothing goes
    assert disk_cache.prune(tmp_path, 2500) == [old]  # 3000 > 2500: down to 2250 or less
    assert disk_cache.prune(tmp_path, 1500) == [middle]  # 2000 > 1500: down to 1350 or less
    assert new.exists()


def test_a_read_counts_as_a_use(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path))
    monkeypatch.setattr(disk_cache, "entry_key", lambda kind, settings, snapshots: settings["k"])
    first = _entry(tmp_path, "a", 1000, 60)
    _entry(tmp_path, "b", 1000, 30)
    assert disk_cache.cached("kind", {"k": "a"}, [], lambda: pytest.fail("a is cached")) == "x" * 998  # read: used now
    monkeypatch.setenv("DAMCHA_CACHE_MB", str(2500 / 2**20))
    disk_cache.cached("kind", {"k": "c"}, [], lambda: "y" * 998)  # a write past the limit prunes
    assert first.exists() and not (tmp_path / "kind" / "b.json").exists() and (tmp_path / "kind" / "c.json").exists()


def test_the_default_cache_folder_is_the_users_cache_folder(monkeypatch):
    from platformdirs import user_cache_dir

    monkeypatch.delenv("DAMCHA_CACHE", raising=False)
    assert str(disk_cache.cache_folder()) == user_cache_dir("damcha-lab", appauthor=False)
    monkeypatch.setenv("DAMCHA_CACHE_MB", "not a number")
    assert disk_cache.cache_limit_bytes() == disk_cache.DEFAULT_CACHE_MB * 2**20
