"""The fence walked over every file kind a run folder can hold (issue 81, item 2): a root holding a run of
`damcha train` with its shipped tables and test metrics, a folder of `export-hf` and a Hugging Face Trainer
run; each kind of file found there (by its path with numbers and content hashes taken out) is in turn made a
link to a copy outside the root, and the root is read as the app reads it (the listing, every epoch's model, a
validation input, the shipped tables). Whatever the outcome — the run refused naming the file, the epoch left
out, the table computed afresh — no file outside the root is ever opened: an audit hook sees every open."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from damcha.inputs.model_inputs import InputError, validation_input
from damcha.runs.checkpoints import CheckpointError, list_runs, load_model
from damcha.runs.disk_cache import SHIPPED_FOLDER, read_shipped

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # (hooks cannot be removed: this one records only inside `opened_files`)


@contextmanager
def opened_files() -> Iterator[list[str]]:
    global _opened
    _opened = []
    try:
        yield _opened
    finally:
        _opened = None


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> Path:
    """A root with one folder of each kind the app opens as a run."""
    root = tmp_path_factory.mktemp("kinds") / "root"
    shutil.copytree(SHIPPED / "digits-damcha", root / "trained")
    (root / "trained" / "test.json").write_text(json.dumps({"epoch": 40, "test_nll": 1.25}))
    if importorskip_hf():
        from damcha import hf
        from tests.support.trainer_runs import trainer_run

        hf.export_run(SHIPPED / "digits-mha", root / "exported")
        trainer_run(root / "trainer")
    return root


def importorskip_hf() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        print("the Hugging Face extra is not installed: the exported and Trainer folders are left out of the walk")
        return False
    return True


def file_kinds(root: Path) -> dict[str, Path]:
    """One file of each kind under `root`: its path with numbers and 32-hex content keys taken out."""
    kinds: dict[str, Path] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        kind = re.sub(r"\d+", "N", re.sub(r"[0-9a-f]{32}", "KEY", str(path.relative_to(root))))
        kinds.setdefault(kind, path)
    return kinds


def read_as_the_app_does(root: Path) -> None:
    runs, _broken = list_runs(root)
    for run in runs:
        for epoch in run.epochs:
            try:
                load_model(run, epoch)
            except CheckpointError:
                pass
        try:
            validation_input(run, 0)
        except (CheckpointError, InputError):
            pass
        for table in sorted((run.path / SHIPPED_FOLDER).glob("*/*.json")):
            read_shipped(table.parent.name, table.stem, [(run, run.epochs[-1])])


def test_no_file_of_any_kind_a_run_folder_holds_is_read_through_a_link_out_of_the_root(every_kind, tmp_path):
    kinds = file_kinds(every_kind)
    assert {"trained/config.json", "trained/metrics.jsonl", "trained/epoch_N.safetensors", "trained/test.json",
            "trained/derived/validation_table/KEY.json"} <= set(kinds), sorted(kinds)
    with opened_files() as opened:
        read_as_the_app_does(every_kind)
    read_before = {os.path.realpath(p) for p in opened}
    assert os.path.realpath(kinds["trained/derived/validation_table/KEY.json"]) in read_before  # the walk reads them
    outside = tmp_path / "outside"
    outside.mkdir()
    for i, (kind, original) in enumerate(kinds.items()):
        root = tmp_path / f"case{i}"
        shutil.copytree(every_kind, root)
        linked = root / original.relative_to(every_kind)
        target = outside / f"{i}-{original.name}"
        shutil.copy(original, target)
        linked.unlink()
        linked.symlink_to(target)
        with opened_files() as opened:
            read_as_the_app_does(root)
        assert str(target) not in {os.path.realpath(p) for p in opened}, f"{kind}: read through a link out of the root"
        shutil.rmtree(root)
    print(f"\nthe fence walked over {len(kinds)} file kinds: {', '.join(sorted(kinds))}")
