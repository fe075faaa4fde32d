"""Resource bombs: a few bytes that once hung the loader or cost gigabytes, read by the library's
readers. Each runs in a fresh process under an address-space limit (1 GB above what the imports
took) and a time-out that only a hang reaches; the process reports how much its peak memory grew.
(The bombs a user meets through a command are in test_battery.py, under the same bounds.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.hostile_files import zipped_corpus
from tests.support.limited import GROWTH_LIMIT_MB, HANG_SECONDS, LIMIT_PRELUDE

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints"

PROBE = r"""
import json, sys
from pathlib import Path
from damcha.inputs.datasets.base import DataError
from damcha.runs.checkpoints import CheckpointError, list_runs, load_run
from damcha.runs.reference import ReferenceCheckpointError, import_reference
""" + LIMIT_PRELUDE + r"""
what, path = sys.argv[1], Path(sys.argv[2])
try:
    if what == "list":
        runs, bad = list_runs(path)
        result = {"runs": sorted(r.name for r in runs), "bad": [why for _, why in bad]}
    elif what == "load":
        load_run(path)
        result = {"loaded": True}
    elif what == "corpus":
        from damcha.inputs.datasets.benchmark_corpora import ENWIK8, load_benchmark_corpus
        load_benchmark_corpus(ENWIK8, path, 64, nonstandard_ok=sys.argv[3] == "nonstandard")
        result = {"loaded": True}
    else:
        import_reference(path, Path(sys.argv[3]))
        result = {"imported": True}
except (CheckpointError, ReferenceCheckpointError, DataError) as e:
    result = {"refused": str(e)}
result.update(seconds=time.perf_counter() - t0, growth_mb=peak_mb() - before)
print(json.dumps(result))
"""


def probe(what: str, *paths: Path, env: dict | None = None) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run([sys.executable, "-c", PROBE, what, *map(str, paths)], capture_output=True, text=True,
                          timeout=HANG_SECONDS, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["growth_mb"] < GROWTH_LIMIT_MB, result
    return result


def run_copy(root: Path, name: str, like: str = "digits-mha") -> Path:
    shutil.copytree(SHIPPED / like, root / name)
    return root / name


def edit_model(run: Path, **changes) -> None:
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"].update(changes)
    (run / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes, why", [
    ({"n_layer": 10**9}, "n_layer 1,000,000,000 is above"),
    ({"attention": "damcha", "generator_widths": list(range(1, 100_001))}, "generator_widths has 100,000 entries; at most 16"),
    ({"n_embd": 2**40, "n_head": 1}, "n_embd"),
    ({"block_size": 10**9}, "parameters outside attention"),
])
def test_a_config_asking_for_an_absurd_model_is_refused_before_anything_is_built(tmp_path, changes, why):
    run = run_copy(tmp_path, "bomb")
    edit_model(run, **changes)
    result = probe("load", run)
    assert why in result["refused"] and "config.json" in result["refused"]


def test_fifos_named_like_run_files_do_not_block_the_listing(tmp_path):
    run_copy(tmp_path, "healthy")
    snapshot_fifo = run_copy(tmp_path, "fifo-snapshot")
    (snapshot_fifo / "epoch_0040.safetensors").unlink()
    os.mkfifo(snapshot_fifo / "epoch_0040.safetensors")
    config_fifo = run_copy(tmp_path, "fifo-config")
    (config_fifo / "config.json").unlink()
    os.mkfifo(config_fifo / "config.json")
    metrics_fifo = run_copy(tmp_path, "fifo-metrics")
    (metrics_fifo / "metrics.jsonl").unlink()
    os.mkfifo(metrics_fifo / "metrics.jsonl")
    result = probe("list", tmp_path)
    assert result["runs"] == ["fifo-snapshot", "healthy"]  # the FIFO's epoch is left out, the run's others stay
    assert sum("named pipe" in why for why in result["bad"]) == 2


def test_a_huge_metrics_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    run = run_copy(tmp_path, "big-metrics")
    with open(run / "metrics.jsonl", "ab") as f:
        f.truncate(150_000_000)  # sparse: costs no disk, reads as 150 MB
    result = probe("list", tmp_path)
    assert result["runs"] == [] and "150,000,000 bytes" in result["bad"][0]


def test_ten_thousand_empty_folders_hide_no_run(tmp_path):
    for i in range(10_000):
        (tmp_path / f"empty-{i:05d}").mkdir()
    healthy = ["a-run", "m-run", "z-run", "zz-run"]
    for name in healthy:
        run_copy(tmp_path, name)
    result = probe("list", tmp_path)
    assert result["runs"] == healthy and result["bad"] == []


def test_a_folder_with_more_folders_than_the_listing_reads_says_so(tmp_path, monkeypatch):
    import damcha.runs.checkpoints as checkpoints

    monkeypatch.setattr(checkpoints, "MAX_FOLDER_ENTRIES", 5)
    monkeypatch.setattr(checkpoints._subdirs, "__defaults__", (5,))
    for i in range(8):
        (tmp_path / f"f{i}").mkdir()
    runs, bad = checkpoints.list_runs(tmp_path)
    assert any("holds more than 5 folders; only the first 5 by name" in why for _, why in bad)


def test_a_zip_bomb_checkpoint_is_refused_before_it_is_expanded(tmp_path):
    honest = tmp_path / "honest.pt"
    torch.save({"model_state_dict": {"decoder.x": torch.zeros(10)}}, honest)
    with zipfile.ZipFile(honest) as src:
        assert all(m.compress_type == zipfile.ZIP_STORED for m in src.infolist()), "torch.save stores records"
        bomb = tmp_path / "checkpoint_epoch_1.pt"
        with zipfile.ZipFile(bomb, "w") as out:
            for member in src.infolist():
                out.writestr(member.filename, src.read(member.filename), compress_type=zipfile.ZIP_DEFLATED)
            prefix = src.infolist()[0].filename.split("/")[0]
            info = zipfile.ZipInfo(f"{prefix}/data/1")
            info.compress_type = zipfile.ZIP_DEFLATED
            with out.open(info, "w", force_zip64=True) as record:
                zeros = bytes(2**20)
                for _ in range(300):  # 300 MB of zeros, about 300 kB on disk
                    record.write(zeros)
    assert bomb.stat().st_size < 2_000_000
    result = probe("import", bomb, tmp_path / "out")
    assert "refused before reading" in result["refused"] and str(bomb) in result["refused"]
    assert not (tmp_path / "out").exists()


def _laughs(levels: int, width: int = 10) -> list:
    """A list of width**levels leaves in a few hundred bytes of pickle: each level holds the one below
    `width` times (shallow: the bound on the count, not the one on the depth, must catch it)."""
    value: list = [0]
    for _ in range(levels):
        value = [value] * width
    return value


@pytest.mark.parametrize("field", ["off_diag_params"])  # (epoch, config: in test_battery.py)
def test_a_billion_laughs_pickle_is_refused_before_any_value_is_read(tmp_path, field):
    bomb = tmp_path / "checkpoint_epoch_1.pt"
    laughs = _laughs(12)
    value = {"n_heads": laughs, "diag_scale": laughs} if field != "epoch" else laughs
    torch.save({"model_state_dict": {"decoder.x": torch.zeros(4)}, field: value}, bomb)
    assert bomb.stat().st_size < 20_000
    result = probe("import", bomb, tmp_path / "out")
    assert "refused" in result, result
    assert str(bomb) in result["refused"] and "1,000,000" in result["refused"]
    assert result["seconds"] < HANG_SECONDS / 4
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("copy", ["nonstandard"])  # (the standard copy: in test_battery.py)
def test_a_corpus_zip_bomb_is_refused_before_anything_is_extracted(tmp_path, copy):
    bomb = zipped_corpus(tmp_path / "enwik8.zip", 400 * 2**20, bytes(2**20))  # 400 MB of zeros, ~400 kB
    assert bomb.stat().st_size < 2_000_000
    cache = tmp_path / "cache"
    result = probe("corpus", bomb, copy, env={"DAMCHA_CACHE": str(cache)})
    assert str(bomb) in result["refused"] and "more than 20 to 1" in result["refused"], result
    assert not [p for p in cache.rglob("*") if p.is_file()], "extracted into the cache although refused"


def test_a_corpus_member_of_another_size_is_refused_before_extraction_and_a_refused_copy_leaves_the_cache(tmp_path):
    letters = np.random.default_rng(0).choice(np.frombuffer(b"abcdefghij klmnop<>", dtype=np.uint8), 3_000_000)
    text = b"<mediawiki> " + letters.tobytes()  # random letters: a ratio like the published zip's
    other = zipped_corpus(tmp_path / "enwik8.zip", 3_000_000, text)
    cache = tmp_path / "cache"
    result = probe("corpus", other, "standard", env={"DAMCHA_CACHE": str(cache)})
    assert "not the published enwik8" in result["refused"] and "refused before extraction" in result["refused"]
    assert not [p for p in cache.rglob("*") if p.is_file()]
    not_wiki = zipped_corpus(tmp_path / "other.zip", 3_000_000, b"plain " + letters.tobytes())
    result = probe("corpus", not_wiki, "nonstandard", env={"DAMCHA_CACHE": str(cache)})
    assert "not enwik8 (it does not start with '<mediawiki')" in result["refused"], result
    assert not [p for p in cache.rglob("*") if p.is_file()], "a refused copy was kept in the cache"


