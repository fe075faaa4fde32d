"""The tables shipped beside the demo runs: every run ships the ones the app would compute, they are
what the library computes now, and they are read before the disk cache; a broken one is computed again."""

import json
import math
from pathlib import Path

import pytest

from damcha.analysis.ablation import ABLATION_SETTINGS, validation_ablation
from damcha.analysis.data_table import default_rows, run_validation_table
from damcha.analysis.shipped_tables import missing_tables, shipped_tables
from damcha.runs import disk_cache
from damcha.runs.checkpoints import list_runs, load_model, load_run

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
RUNS = {r.name: r for r in list_runs(SHIPPED)[0]} if SHIPPED.is_dir() else {}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_shipped_run_ships_the_tables_the_app_reads(name):
    """Keyed by the last snapshot's content and the tables' settings and versions: a retrained run or
    a changed table makes this fail until `damcha demo-runs --tables-only` is run again."""
    run = RUNS[name]
    assert not missing_tables(run), f"{name}: run `python -m damcha demo-runs --tables-only --only {name}`"
    assert "validation_table" in shipped_tables(run)


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) or (math.isnan(a) and math.isnan(b))
    return a == b


def _shipped(run, kind):
    settings, snapshots = shipped_tables(run)[kind]
    key = disk_cache.entry_key(kind, settings, snapshots)
    return disk_cache.read_shipped(kind, key, snapshots)


def test_a_shipped_data_table_is_what_the_library_computes_now():
    run = RUNS["digits-mha"]
    fresh = json.loads(json.dumps(run_validation_table(run, load_model(run), default_rows(run))))  # as stored
    assert _close(_shipped(run, "validation_table"), fresh)


@pytest.mark.slow  # every validation input under every mode, sampled completions included: CI, not the inner loop
def test_a_shipped_ablation_table_is_what_the_library_computes_now():
    run = RUNS["digits-damcha"]
    fresh = json.loads(json.dumps(validation_ablation(run, load_model(run), **ABLATION_SETTINGS)))
    shipped = _shipped(run, "validation_ablation")
    assert [r["mode"] for r in shipped] == [r["mode"] for r in fresh]
    for a, b in zip(shipped, fresh):  # completion MSE samples on the same seeds; float order may differ
        assert _close(a, b), (a["mode"], a, b)


def test_the_run_folder_is_read_first_and_a_broken_entry_is_computed_again(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    shutil.copytree(SHIPPED / "digits-mha", tmp_path / "runs" / "digits-mha")
    run = load_run(tmp_path / "runs" / "digits-mha")
    snapshots = [(run, run.epochs[-1])]

    def never():
        raise AssertionError("a shipped entry is read, not computed")

    settings = shipped_tables(run)["validation_table"][0]
    assert disk_cache.cached("validation_table", settings, snapshots, never)["rows"]
    assert disk_cache.is_cached("validation_table", settings, snapshots)
    assert not (tmp_path / "cache").exists()  # nothing copied into the user's cache
    assert list_runs(tmp_path / "runs")[0][0].name == "digits-mha"  # derived/ is not taken for a run
    path = disk_cache.shipped_path("validation_table", disk_cache.entry_key("validation_table", settings, snapshots),
                                   snapshots)
    path.write_text("{torn")
    assert disk_cache.cached("validation_table", settings, snapshots, lambda: {"rows": "again"}) == {"rows": "again"}
    assert missing_tables(run) == []  # the computed table is now in the disk cache


def test_only_one_runs_entry_ships_with_it():
    runs = [RUNS["digits-mha"], RUNS["digits-damcha"]]
    with pytest.raises(ValueError, match="one run"):
        disk_cache.ship("pair", {}, [(r, r.epochs[-1]) for r in runs], dict)


def test_a_shipped_entry_linked_out_of_its_run_is_never_read(tmp_path, monkeypatch):
    """On a fenced server a run's derived/ table that links to a file outside the run had that file's values
    shown on the Data table page: the link is not followed and the table is computed from the run itself."""
    import shutil

    monkeypatch.setenv("DAMCHA_CACHE", str(tmp_path / "cache"))
    shutil.copytree(SHIPPED / "digits-mha", tmp_path / "runs" / "digits-mha")
    run = load_run(tmp_path / "runs" / "digits-mha")
    snapshots = [(run, run.epochs[-1])]
    settings = shipped_tables(run)["validation_table"][0]
    path = disk_cache.shipped_path("validation_table", disk_cache.entry_key("validation_table", settings, snapshots),
                                   snapshots)
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"rows": "the outside file's values"}))
    path.unlink()
    path.symlink_to(outside)
    assert disk_cache.read_shipped("validation_table", path.stem, snapshots) is None
    assert disk_cache.cached("validation_table", settings, snapshots, lambda: {"rows": "computed"}) == {"rows": "computed"}
    path.unlink()
    path.symlink_to(path.parent.parent.parent / "config.json")  # a link that stays inside the run is read as a file
    assert disk_cache.read_shipped("validation_table", path.stem, snapshots)["model"]
