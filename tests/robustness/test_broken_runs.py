"""One broken run, snapshot, folder or results file never takes the rest down; each is named."""

import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from streamlit.testing.v1 import AppTest

from damcha.model.config import ModelConfig
from damcha.runs.checkpoints import CheckpointError, list_runs, load_model, load_run

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app" / "streamlit_app.py")
SHIPPED = ROOT / "checkpoints"
HEALTHY = ("digits-damcha", "digits-mha")


@pytest.fixture(scope="module")
def broken_root(tmp_path_factory) -> Path:
    """A checkpoint folder with two healthy runs and one broken run of each kind."""
    root = tmp_path_factory.mktemp("broken") / "runs"
    root.mkdir()
    for name in HEALTHY:
        shutil.copytree(SHIPPED / name, root / name)

    def copy(name: str, like: str = "digits-mha") -> Path:
        shutil.copytree(SHIPPED / like, root / name)
        return root / name

    def edit_config(run: Path, **changes) -> None:
        cfg = json.loads((run / "config.json").read_text())
        cfg.update(changes)
        (run / "config.json").write_text(json.dumps(cfg))

    edit_config(copy("data-not-a-dict"), data="oops")
    edit_config(copy("train-wrong-type"), train={"split_seed": "zero"})
    (copy("config-not-json") / "config.json").write_text("{ not json")
    (copy("no-config") / "config.json").unlink()
    cut = copy("cut-snapshot", "digits-damcha")
    last = cut / "epoch_0040.safetensors"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    (cut / "epoch_99999.safetensors").write_bytes(b"")
    nan = copy("nan-weights", "digits-damcha")
    state = load_file(nan / "epoch_0040.safetensors")
    name = next(k for k in sorted(state) if k.endswith("value.weight"))
    state[name][0, 0] = float("nan")
    save_file(state, str(nan / "epoch_0040.safetensors"), metadata={"format_version": "1"})
    os.symlink("loop", root / "loop")  # a symlink to itself
    # one instance of each failure a shared server met (issue 45), beside the healthy runs
    fifo = copy("fifo-snapshot", "digits-damcha")
    (fifo / "epoch_0040.safetensors").unlink()
    os.mkfifo(fifo / "epoch_0040.safetensors")
    folder = copy("folder-snapshot", "digits-damcha")
    (folder / "epoch_0040.safetensors").unlink()
    (folder / "epoch_0040.safetensors").mkdir()
    outside = root.parent / "outside.safetensors"
    shutil.copy(SHIPPED / "digits-damcha" / "epoch_0040.safetensors", outside)
    linked = copy("linked-out-snapshot", "digits-damcha")
    (linked / "epoch_0040.safetensors").unlink()
    os.symlink(outside, linked / "epoch_0040.safetensors")
    no_offsets = copy("no-offsets-snapshot", "digits-damcha")
    raw = (no_offsets / "epoch_0040.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    del header[next(k for k in header if k != "__metadata__")]["data_offsets"]
    text = json.dumps(header).encode()
    (no_offsets / "epoch_0040.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    (copy("list-rows") / "metrics.jsonl").write_text("[1, 2]\n[3]\n")
    (copy("binary-metrics") / "metrics.jsonl").write_bytes(bytes(range(256)))
    float_dim = copy("float-input-dim")
    cfg = json.loads((float_dim / "config.json").read_text())
    cfg["model"]["input_dim"] = 1.5
    (float_dim / "config.json").write_text(json.dumps(cfg))
    edit_config(copy("long-data-name"), data={"name": "d" * 500_000})
    (root / "stray.pt").write_bytes(b"not a checkpoint")  # a stray file never changes how the folder is read
    return root


BROKEN_RUNS = {"data-not-a-dict": "'data' must be a dict", "train-wrong-type": "train.split_seed",
               "config-not-json": "not valid JSON", "no-config": "no config.json",
               "list-rows": "line 1 is a JSON list", "binary-metrics": "not UTF-8",
               "float-input-dim": "input_dim must be an integer", "long-data-name": "500,000 characters"}
BAD_EPOCH = {"fifo-snapshot": "named pipe", "folder-snapshot": "a folder", "linked-out-snapshot": "outside the checkpoint",
             "no-offsets-snapshot": "data_offsets", "cut-snapshot": "truncated"}


def test_list_runs_keeps_the_healthy_ones_and_names_each_broken_one(broken_root):
    runs, bad = list_runs(broken_root)
    names = {r.name for r in runs}
    assert set(HEALTHY) <= names
    reasons = {p.name: why for p, why in bad}
    assert set(reasons) == set(BROKEN_RUNS), reasons
    for name, why in BROKEN_RUNS.items():
        assert why in reasons[name], (name, reasons[name])
    cut = next(r for r in runs if r.name == "cut-snapshot")
    assert {e for e, _ in cut.bad_snapshots} == {40, 99999}
    for name, why in BAD_EPOCH.items():
        run = next(r for r in runs if r.name == name)
        assert 40 not in run.epochs and 16 in run.epochs
        assert why in dict(run.bad_snapshots)[40], (name, run.bad_snapshots)


def test_non_finite_weights_are_refused_by_name(broken_root):
    run = load_run(broken_root / "nan-weights")
    with pytest.raises(CheckpointError, match="NaN or infinite values: .*value.weight"):
        load_model(run, 40)
    load_model(run, 16)  # the other epochs stay usable


def test_a_symlink_loop_as_the_root_is_a_clear_error(tmp_path):
    os.symlink("self", tmp_path / "self")
    with pytest.raises(CheckpointError, match="cannot open this folder"):
        list_runs(tmp_path / "self")


def app_on(root: Path, run: str, page: str | None = None, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["checkpoint_root"] = str(root)
    at.query_params["run"] = run
    for k, v in params.items():
        at.query_params[k] = str(v)
    if page:
        at.switch_page(f"../pages/{page}.py")
    return at.run()


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.parametrize("healthy", HEALTHY)
@pytest.mark.parametrize("page", sorted(p.stem for p in (ROOT / "pages").glob("*.py")))
def test_every_page_of_a_healthy_run_works_beside_broken_siblings(broken_root, page, healthy):
    at = app_on(broken_root, healthy, page)
    _clean(at)
    assert at.selectbox(key="run").value == healthy
    warnings = " ".join(w.value for w in at.sidebar.warning)
    for name in BROKEN_RUNS:
        assert f"Skipped runs/{name}" in warnings
    assert str(broken_root) not in warnings, "an absolute server path in a message"
    if page != "evidence":  # (its errors are the shipped evidence's withheld verdicts)
        assert not at.error, [e.value for e in at.error]


def test_pages_that_iterate_runs_leave_out_and_name_the_broken_one(broken_root):
    at = app_on(broken_root, "digits-damcha", "ablation")
    _clean(at)
    for toggle in [t for t in at.toggle if t.key == "table_on"]:
        toggle.set_value(True).run()
    _clean(at)
    assert any("nan-weights" in w.value and "NaN" in w.value for w in at.warning)
    assert at.dataframe, "the table of the other runs is still there"
    at = app_on(broken_root, "digits-damcha", "compare")  # one input through every run of the data set
    _clean(at)
    assert any("nan-weights" in w.value and "NaN" in w.value for w in at.warning)
    assert "nan-weights" not in set(at.dataframe[0].value["run"]) and "digits-damcha" in set(at.dataframe[0].value["run"])


def test_a_bad_snapshot_is_reported_on_its_run_and_its_other_epochs_work(broken_root):
    at = app_on(broken_root, "cut-snapshot", "inspector")
    _clean(at)
    assert any("Epoch 40 of cut-snapshot is not offered" in w.value for w in at.sidebar.warning)
    assert at.select_slider(key="epoch").value == 16
    at = app_on(broken_root, "nan-weights", "inspector")  # the last epoch fails only when loaded
    _clean(at)
    assert any("NaN or infinite" in e.value for e in at.error)
    at.select_slider(key="epoch").set_value(16).run()
    _clean(at)
    assert not at.error and at.get("plotly_chart")


def test_a_symlink_loop_typed_as_the_folder_keeps_the_app_up(tmp_path):
    os.symlink("self", tmp_path / "self")
    at = app_on(tmp_path / "self", "digits-damcha")
    _clean(at)
    assert any("cannot open this folder" in e.value for e in at.sidebar.error)


def test_config_that_would_allocate_gigabytes_of_buffers_is_refused():
    with pytest.raises(ValueError, match="buffers"):
        ModelConfig(block_size=50_000_000, n_embd=32, position_encoding="sinusoidal", attention="mha")
    cfg = ModelConfig(block_size=4096, n_embd=32, position_encoding="sinusoidal", attention="mha")
    from damcha.model.transformer import build_model

    buffers = sum(b.numel() for b in build_model(cfg).buffers())
    assert buffers == cfg.buffer_estimate()


def test_a_config_with_an_absurd_block_size_is_refused_before_loading(tmp_path):
    run = tmp_path / "huge"
    shutil.copytree(SHIPPED / "digits-mha", run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"].update(block_size=50_000_000, position_encoding="sinusoidal")
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="buffers"):
        load_run(run)


def test_stale_temp_files_of_killed_writes_are_removed_when_training_reopens_a_run(tmp_path):
    from damcha.runs.checkpoints import remove_stale_temp_files

    run = tmp_path / "run"
    run.mkdir()
    (run / ".epoch_0003.safetensors.ab12cd_9.tmp").write_bytes(b"")
    (run / "epoch_0003.safetensors").write_bytes(b"kept")
    (run / ".notes.tmp").write_bytes(b"not ours")
    assert remove_stale_temp_files(run) == [".epoch_0003.safetensors.ab12cd_9.tmp"]
    assert sorted(p.name for p in run.iterdir()) == [".notes.tmp", "epoch_0003.safetensors"]


def test_disk_full_while_saving_is_one_clear_line(tmp_path, monkeypatch, capsys):
    from safetensors import SafetensorError

    import damcha.runs.checkpoints as checkpoints
    from damcha.__main__ import main

    calls = {"n": 0}
    real = checkpoints.save_file

    def fill_up(tensors, path, metadata=None):
        calls["n"] += 1
        if calls["n"] > 1:  # the first snapshot is written, then the disk is full
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                  'message: "No space left on device" })')
        real(tensors, path, metadata=metadata)

    monkeypatch.setattr(checkpoints, "save_file", fill_up)
    out = tmp_path / "run"
    code = main(["train", "--dataset", "digits", "--variant", "mha", "--epochs", "2", "--n-embd", "16",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0
    assert "no space left on device" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert (out / "epoch_0000.safetensors").exists()
    assert not list(out.glob(".*.tmp"))


def test_evidence_work_files_survive_a_torn_write(tmp_path):
    from damcha.evidence.documents import EvidenceFileError, read_jsonl

    units = tmp_path / "units.jsonl"
    units.write_text('{"unit": "a", "value": {"nll": 1.0}}\n{"unit": "b", "val')  # killed mid-line
    assert [r["unit"] for r in read_jsonl(units)] == ["a"]
    with units.open("a") as f:  # the next unit starts on a line of its own
        f.write('{"unit": "b", "value": {"nll": 2.0}}\n')
    assert [r["unit"] for r in read_jsonl(units)] == ["a", "b"]
    units.write_text('{"unit": "a"}\n{torn\n{"unit": "c"}\n')
    with pytest.raises(EvidenceFileError, match="units.jsonl: line 2"):
        read_jsonl(units)


def test_the_evidence_page_names_an_unreadable_results_file(tmp_path, monkeypatch):
    good = (SHIPPED / "evidence" / "results.json").read_text()
    (tmp_path / "results.json").write_text(good[: len(good) // 2])
    monkeypatch.setenv("DAMCHA_EVIDENCE", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=180)
    at.switch_page("../pages/evidence.py")
    at.run()
    _clean(at)
    shown = [e.value for e in at.error if "results.json cannot be read" in e.value]
    assert shown and str(tmp_path.parent) not in shown[0]  # named without the server's path


def test_typed_token_ids_accept_ascii_digits_within_the_vocabulary_only():
    import dataclasses

    from damcha.inputs.model_inputs import input_from_token_ids
    from damcha.inputs.uploads import InputError

    shipped = load_run(SHIPPED / "digits-mha")
    cfg = dataclasses.replace(shipped.model_config, modality="tokens", input_dim=0)
    run = dataclasses.replace(shipped, model_config=cfg)
    assert input_from_token_ids(run, "1, 2 3").tokens.tolist() == [1, 2, 3]
    for text, why in (("99999999999999999999999999", "outside this model's vocabulary"),
                      (f"1 {cfg.vocab_size}", "outside this model's vocabulary"),
                      ("١٢٣", "digits 0-9"), ("1_0", "digits 0-9"), ("+5", "digits 0-9"), ("-1", "digits 0-9"),
                      ("", "at least one")):
        with pytest.raises(InputError, match=why):
            input_from_token_ids(run, text)


def test_a_sibling_failing_with_any_exception_is_left_out_and_named(broken_root, monkeypatch):
    import app.cache

    real = app.cache.inspection

    def failing_for_mha(run, *args, **kwargs):
        if run.name == "digits-mha":
            raise TypeError("a sibling's own bug")
        return real(run, *args, **kwargs)

    monkeypatch.setattr(app.cache, "inspection", failing_for_mha)
    at = app_on(broken_root, "digits-damcha", "compare")
    _clean(at)
    assert any("digits-mha (TypeError" in w.value for w in at.warning), [w.value for w in at.warning]
    assert "digits-damcha" in set(at.dataframe[0].value["run"])


def test_a_snapshot_removed_after_the_listing_fails_for_its_epoch_only(tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(SHIPPED / "digits-mha", root / "vanishing")
    at = app_on(root, "vanishing", "inspector")
    _clean(at)
    (root / "vanishing" / "epoch_0016.safetensors").unlink()  # the listing is cached for a minute
    at.select_slider(key="epoch").set_value(16).run()
    _clean(at)
    assert any("0016.safetensors" in e.value and "no such file" in e.value for e in at.error), [e.value for e in at.error]
    at.select_slider(key="epoch").set_value(40).run()
    _clean(at)
    assert not at.error and at.get("plotly_chart")
