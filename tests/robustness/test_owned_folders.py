"""Nothing a user owns is overwritten or lost: writers of new folders (export-hf, import-reference) refuse
a folder that holds anything, write whole or not at all, clean up after a killed predecessor, and say
in words when the disk fills (on a real, small tmpfs), leaving the previous state intact."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from damcha.__main__ import main
from tests.support.disks import fill
from tests.support.reference_fake import save_like_them, their_model

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "checkpoints"
pytest.importorskip("transformers", reason="export-hf needs damcha[hf] (installed by requirements.txt)")


def refused(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.replace("\r", "\n").splitlines()  # without the progress bars
             if line.strip() and "it/s]" not in line and "file/s]" not in line]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture
def run_copy(tmp_path) -> Path:
    run = tmp_path / "runs" / "digits-mha"
    shutil.copytree(CHECKPOINTS / "digits-mha", run)
    return run


def test_export_hf_into_an_empty_folder_writes_it_whole(tmp_path, run_copy, capsys):
    out = tmp_path / "empty"
    out.mkdir()
    assert main(["export-hf", str(run_copy), "--out", str(out)]) == 0
    assert {"config.json", "model.safetensors", "metrics.jsonl"} <= {p.name for p in out.iterdir()}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _kill_inside_a_staged_write(out: Path, purpose: str) -> Path:
    """A real process that starts a staged write of `out`, writes a file into it and is SIGKILLed."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from damcha.runs.staging import staged_folder
        with staged_folder({str(out)!r}, {purpose!r}) as staging:
            (staging / "model.safetensors").write_bytes(b"half")
            print(staging, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == -signal.SIGKILL, done.stderr
    staging = Path(done.stdout.strip())
    assert staging.is_dir() and not out.exists()
    return staging


def _reference_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    path = folder / "checkpoint_epoch_3.pt"
    save_like_them(their_model(), path)
    return path


def test_a_killed_import_reference_leaves_staging_that_the_next_run_removes(tmp_path):
    from damcha.runs.reference import import_reference

    out = tmp_path / "runs" / "converted"
    out.parent.mkdir()
    stale = _kill_inside_a_staged_write(out, "importing")
    legacy = out.parent / ".converted.ab12cd34.importing"  # written before the writer's pid was in the name
    legacy.mkdir()
    alive = out.parent / f".converted.{os.getppid()}.zz99yy88.importing"  # a live writer's: kept
    alive.mkdir()
    import_reference(_reference_file(tmp_path / "src"), out)
    assert not stale.exists() and not legacy.exists() and alive.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["converted", alive.name])


def test_a_killed_export_leaves_staging_that_the_next_export_removes(tmp_path, run_copy):
    out = tmp_path / "hf"
    stale = _kill_inside_a_staged_write(out, "exporting")
    assert main(["export-hf", str(run_copy), "--out", str(out)]) == 0
    assert not stale.exists() and (out / "model.safetensors").stat().st_size > 100


def test_the_disk_cache_on_a_full_disk_returns_the_value_and_keeps_no_partial_entry(small_disk, monkeypatch):
    from damcha.runs import disk_cache
    from damcha.runs.checkpoints import load_run

    monkeypatch.setenv("DAMCHA_CACHE", str(small_disk / "cache"))
    run = load_run(CHECKPOINTS / "digits-mha")
    small = disk_cache.cached("probe", {"n": 1}, [(run, run.epochs[-1])], lambda: {"kept": True})
    fill(small_disk, 4 * 1024)
    value = {"rows": list(range(100_000))}  # about 0.6 MB of JSON: cannot be written
    assert disk_cache.cached("probe", {"n": 2}, [(run, run.epochs[-1])], lambda: value) == value
    entries = sorted(p.name for p in (small_disk / "cache").rglob("*") if p.is_file())
    assert len(entries) == 1 and entries[0].endswith(".json"), entries  # the first entry, and nothing partial
    assert disk_cache.cached("probe", {"n": 1}, [(run, run.epochs[-1])], lambda: {"kept": False}) == small


def test_a_file_rewritten_on_a_full_disk_keeps_its_earlier_content(small_disk):
    from damcha.runs.checkpoints import write_text_atomic

    target = small_disk / "results.json"
    write_text_atomic(target, '{"earlier": true}')
    fill(small_disk, 4 * 1024)
    with pytest.raises(OSError, match="no space left on the disk that holds") as raised:
        write_text_atomic(target, "x" * 400_000)
    assert str(target) in str(raised.value)
    assert target.read_text() == '{"earlier": true}' and sorted(p.name for p in small_disk.iterdir()) == [
        "filler", "results.json"]
