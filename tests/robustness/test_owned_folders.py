"""Nothing a user owns is overwritten or lost: writers of new folders (export-hf, import-reference) refuse
a folder that holds anything, write whole or not at all, clean up after a killed predecessor, and say
in words when the disk fills (on a real, small tmpfs), leaving the previous state intact."""

from __future__ import annotations

import json
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
from tests.support.folders import folder_digest
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


@pytest.mark.parametrize("target", ["the run itself", "another run", "a folder with a config.json", "a file"])
def test_export_hf_never_writes_into_something_the_user_has(tmp_path, run_copy, capsys, target):
    out = {"the run itself": run_copy, "another run": tmp_path / "runs" / "other",
           "a folder with a config.json": tmp_path / "mine", "a file": tmp_path / "notes.txt"}[target]
    if target == "another run":
        shutil.copytree(CHECKPOINTS / "digits-damcha", out)
    elif target == "a folder with a config.json":
        out.mkdir()
        (out / "config.json").write_text('{"mine": true}')
    elif target == "a file":
        out.write_text("my notes")
    before = {p: folder_digest(p) for p in (tmp_path / "runs",)} | {out: out.read_bytes() if out.is_file() else
                                                                     folder_digest(out)}
    err = refused(capsys, ["export-hf", str(run_copy), "--out", str(out)])
    assert str(out) in err and "already exists and is not an empty folder" in err and "--out" in err
    after = {p: folder_digest(p) for p in (tmp_path / "runs",)} | {out: out.read_bytes() if out.is_file() else
                                                                    folder_digest(out)}
    assert after == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "a staging folder was left"


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


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MB tmpfs; outside CI, a machine that may not mount one skips with the reason."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        reason = f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill `disk` to `leave` bytes of free space."""
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "wb") as f:
        f.write(bytes(max(free - leave, 0)))


def test_export_hf_on_a_full_disk_says_so_and_leaves_nothing(small_disk, run_copy, capsys):
    (small_disk / "earlier-export").mkdir()
    (small_disk / "earlier-export" / "config.json").write_text('{"kept": true}')
    before = folder_digest(small_disk / "earlier-export")
    fill(small_disk, 64 * 1024)  # the config fits, the weights (about 0.4 MB) do not
    out = small_disk / "hf"
    err = refused(capsys, ["export-hf", str(run_copy), "--out", str(out)])
    assert "no space left on the disk that holds" in err and str(out) in err
    assert not out.exists()
    assert sorted(p.name for p in small_disk.iterdir()) == ["earlier-export", "filler"]
    assert folder_digest(small_disk / "earlier-export") == before


def test_import_reference_on_a_full_disk_says_so_and_leaves_nothing(small_disk, tmp_path, capsys):
    source = _reference_file(tmp_path / "src")
    fill(small_disk, 16 * 1024)
    out = small_disk / "converted"
    err = refused(capsys, ["import-reference", str(source), "--out", str(out)])
    assert "no space left on the disk that holds" in err and str(out) in err
    assert not out.exists() and sorted(p.name for p in small_disk.iterdir()) == ["filler"]



def test_training_on_a_disk_that_fills_keeps_every_complete_snapshot(small_disk, capsys):
    from damcha.runs.checkpoints import load_model, load_run

    fill(small_disk, 250 * 1024)  # the config, two snapshots and one resume state fit; the next rewrite does not
    out = small_disk / "run"
    err = refused(capsys, ["train", "--dataset", "digits", "--variant", "mha", "--epochs", "4", "--n-embd", "16",
                           "--out", str(out)])
    assert "no space left on device" in err and str(out) in err
    run = load_run(out)
    assert run.epochs and all(load_model(run, epoch) is not None for epoch in run.epochs)
    assert not list(out.glob(".*.tmp")), "a partial file was left"


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


def test_evidence_on_a_disk_that_fills_keeps_whole_units_and_resumes(small_disk, capsys):
    """The evidence work folder fills while units are recorded (taken over from the shipped results
    here, so nothing trains): one error naming units.jsonl and the disk, only whole lines kept, an
    earlier results.json unchanged, and the same command finishes once there is room."""
    out, work = small_disk / "out", small_disk / "work"
    out.mkdir()
    (out / "results.json").write_text('{"kept": true}')
    before = folder_digest(out)
    fill(small_disk, 96 * 1024)  # the shipped results' units take about 250 kB
    argv = ["evidence", "--reuse", str(CHECKPOINTS / "evidence" / "results.json"), "--out", str(out), "--work",
            str(work)]
    err = refused(capsys, argv)
    assert "no space left on the disk that holds" in err and str(work / "units.jsonl") in err, err
    lines = (work / "units.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) > 2, "a torn line was left"
    kept = len(lines) - 1
    assert folder_digest(out) == before
    (small_disk / "filler").unlink()
    assert main(argv) == 0, capsys.readouterr().err
    assert len((work / "units.jsonl").read_text().splitlines()) > kept  # resumed after what was kept
    assert json.loads((out / "results.json").read_text())["complete"]


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
