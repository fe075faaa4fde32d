"""Training, resume and checkpoints on tiny runs."""

import json
import math

import pytest
import torch

from damcha import ModelConfig, variant_config
from damcha.runs.checkpoints import CheckpointError, list_runs, load_model, load_run, resolve_under, snapshot_name
from damcha.runs.train import STATE_FILE, TrainConfig, default_snapshot_epochs, train
from tests.support.training import TINY, tiny_train_config


def _weights(run_dir, epoch):
    return load_model(run_dir, epoch).state_dict()


def test_two_epochs_lower_the_loss_and_write_the_run(tmp_path):
    result = train(TINY, tiny_train_config(), tmp_path / "run", progress=False)
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.json", "metrics.jsonl", snapshot_name(0), snapshot_name(1), snapshot_name(2), STATE_FILE} <= names
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert rows[2]["val_nll"] < rows[0]["val_nll"] - 0.3
    assert rows[2]["val_bits_per_pixel"] == pytest.approx(rows[2]["val_nll"] / math.log(2))
    assert 0 <= rows[2]["val_completion_mse"] < rows[0]["val_completion_mse"]
    assert result.metrics == rows
    run = load_run(tmp_path / "run")
    assert run.epochs == (0, 1, 2) and run.dataset == "digits"
    assert run.model_config.vocab_size == 18 and run.model_config.block_size == 64
    assert len(run.data["val_indices"]) == run.data["n_val"] == 359


def test_evaluating_the_last_epoch_only_trains_the_same_steps(tmp_path):
    """The evidence's runs skip the epochs' evaluation (run_unit scores the model): no step changes."""
    cfg = tiny_train_config(epochs=3)
    every = train(TINY, cfg, tmp_path / "every", progress=False).metrics
    last = train(TINY, cfg, tmp_path / "last", progress=False, evaluate_every_epoch=False).metrics
    timing = ("epoch_seconds", "train_seconds")
    assert [{k: v for k, v in r.items() if k not in timing} for r in last[:-1]] == \
        [{k: r[k] for k in ("epoch", "step", "train_loss_running")} for r in every[:-1]]  # losses only, the same
    assert {k: v for k, v in last[-1].items() if k not in timing} == {k: v for k, v in every[-1].items() if k not in timing}
    wa, wb = _weights(tmp_path / "every", 3), _weights(tmp_path / "last", 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_after_a_kill_continues_exactly(tmp_path):
    cfg = tiny_train_config(epochs=3)
    train(TINY, cfg, tmp_path / "straight", progress=False)
    train(TINY, cfg, tmp_path / "killed", progress=False, stop_after_epoch=1)
    # A kill after the metrics row of epoch 2 was written but before its state was saved:
    with open(tmp_path / "killed" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"epoch": 2, "val_nll": 123.0}) + "\n")
    train(TINY, cfg, tmp_path / "killed", progress=False)
    a = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    b = (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()
    strip = lambda rows: [{k: v for k, v in json.loads(r).items() if k not in ("epoch_seconds", "train_seconds")} for r in rows]
    assert strip(a) == strip(b)
    wa, wb = _weights(tmp_path / "straight", 3), _weights(tmp_path / "killed", 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_refuses_a_different_run(tmp_path):
    train(TINY, tiny_train_config(epochs=1), tmp_path / "run", progress=False)
    with pytest.raises(CheckpointError, match="different run"):
        train(TINY, tiny_train_config(epochs=1, lr=1e-2), tmp_path / "run", progress=False)


def test_checkpoint_round_trip_gives_identical_logits(tmp_path):
    cfg = variant_config(TINY, "damcha-unshared")
    train(cfg, tiny_train_config(epochs=1), tmp_path / "run", progress=False)
    model = load_model(tmp_path / "run", 1)
    x = torch.randint(0, 18, (3, 20))
    again = load_model(tmp_path / "run", 1)
    assert torch.equal(model(x).logits, again(x).logits)
    assert not model.training


def test_text_corpus_and_classifier_train(tmp_path):
    text_cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)}, block_size=16)
    r = train(text_cfg, tiny_train_config(dataset="text", epochs=1, batch_size=8), tmp_path / "text", progress=False)
    assert "val_bits_per_char" in r.metrics[-1] and r.metrics[-1]["val_nll"] < r.metrics[0]["val_nll"]
    r = train(TINY, tiny_train_config(dataset="digits-cls", epochs=3, train_limit=0), tmp_path / "cls", progress=False)
    assert r.metrics[-1]["val_nll"] < r.metrics[0]["val_nll"] - 0.1
    assert r.metrics[-1]["val_accuracy"] > r.metrics[0]["val_accuracy"] + 0.1
    assert load_run(tmp_path / "cls").model_config.n_classes == 10


def test_snapshot_schedule_keeps_initialisation_and_last():
    assert default_snapshot_epochs(30)[0] == 0 and default_snapshot_epochs(30)[-1] == 30
    assert len(default_snapshot_epochs(30)) >= 6
    assert TrainConfig(epochs=10, snapshot_epochs=(3, 50)).snapshots() == (0, 3, 10)


# ----------------------------------------------------------------------------- validation errors

@pytest.fixture
def run_dir(tmp_path):
    train(TINY, tiny_train_config(epochs=1), tmp_path / "run", progress=False)
    return tmp_path / "run"


def test_missing_config_and_snapshots(tmp_path, run_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_run(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="no such run directory"):
        load_run(tmp_path / "nowhere")
    for f in run_dir.glob("epoch_*"):
        f.unlink()
    with pytest.raises(CheckpointError, match="no snapshot"):
        load_run(run_dir)


def test_unknown_format_version(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["format_version"] = 99
    (run_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unknown format version 99"):
        load_run(run_dir)


def test_shapes_that_disagree_with_the_config(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["model"]["n_embd"] = 24  # same keys, other shapes
    cfg["model"]["n_head"] = 2
    (run_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="shape"):
        load_model(run_dir, 1)


def test_foreign_and_truncated_safetensors(run_dir):
    from safetensors.torch import save_file

    save_file({"something.else": torch.zeros(3)}, str(run_dir / snapshot_name(1)))
    with pytest.raises(CheckpointError, match="foreign"):
        load_model(run_dir, 1)
    data = (run_dir / snapshot_name(0)).read_bytes()
    (run_dir / snapshot_name(0)).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        load_model(run_dir, 0)
    (run_dir / snapshot_name(0)).write_bytes(b"\x80\x04garbage pickle-ish bytes")
    with pytest.raises(CheckpointError, match="safetensors"):
        load_model(run_dir, 0)


def test_absurd_config_is_refused_before_allocation(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["model"]["n_embd"] = 4096
    cfg["model"].setdefault("attention_options", {})["generator_widths"] = [4096]
    (run_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="parameters"):
        load_run(run_dir)


def test_list_runs_reports_bad_runs_beside_good_ones_and_stays_under_root(tmp_path, run_dir):
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    runs, failures = list_runs(tmp_path)
    assert [r.name for r in runs] == ["run"]
    assert failures and "not valid JSON" in failures[0][1]
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir(exist_ok=True)
    (tmp_path / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(CheckpointError, match="outside"):
        resolve_under(tmp_path, "../etc")
    with pytest.raises(CheckpointError, match="outside"):
        resolve_under(tmp_path, "escape")
    assert resolve_under(tmp_path, "run") == run_dir.resolve()


def test_bf16_autocast_trains_close_to_fp32(tmp_path):
    from damcha import ModelConfig, variant_config

    base = variant_config(ModelConfig(n_layer=1, n_head=4, n_embd=16, attention_options={"generator_widths": (16,)}), "damcha")
    rows = {}
    for precision in ("fp32", "bf16"):
        tcfg = TrainConfig(dataset="digits", epochs=1, precision=precision, train_limit=256, completion_images=4)
        rows[precision] = train(base, tcfg, tmp_path / precision, progress=False).metrics[-1]
    assert abs(rows["bf16"]["val_nll"] - rows["fp32"]["val_nll"]) < 0.02
    assert rows["bf16"]["val_nll"] != rows["fp32"]["val_nll"]  # autocast did run in lower precision
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")
