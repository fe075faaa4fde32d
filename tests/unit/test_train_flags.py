"""The train command's flags come from the config dataclasses: every training field has one, every
default is the library's, a saved run replays with `--config` (flags given override it)."""

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from damcha.__main__ import main
from damcha.model.config import ModelConfig
from damcha.runs.checkpoints import CheckpointError, load_run
from damcha.runs.train import TrainConfig
from damcha.runs.train_flags import MODEL_FLAGS, add_settings_flags, settings_from

ROOT = Path(__file__).resolve().parents[2]


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    return parser.parse_args(list(argv))


def test_every_training_field_has_a_flag_whose_default_is_the_librarys():
    model, train, replaying = settings_from(parsed())
    assert not replaying
    assert train == TrainConfig()
    for name in MODEL_FLAGS:
        assert getattr(model, name) == getattr(ModelConfig(), name), name
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    flags = {a.dest for a in parser._actions}
    assert {f.name for f in dataclasses.fields(TrainConfig)} | set(MODEL_FLAGS) <= flags


def test_flags_given_set_their_fields():
    model, train, _ = settings_from(parsed("--batch-size", "7", "--generator-widths", "8,9", "--min-lr-fraction",
                                           "0.2", "--data-path", "x.txt", "--snapshot-epochs", "0,3"))
    assert (train.batch_size, train.min_lr_fraction, train.data_path, train.snapshot_epochs) == (7, 0.2, "x.txt", (0, 3))
    assert model.setting("generator_widths") == (8, 9)
    with pytest.raises(SystemExit):
        parsed("--optimizer", "sgd")  # choices come from the library's own list


def test_a_saved_run_is_the_starting_point_and_flags_override_it():
    run = load_run(ROOT / "checkpoints" / "digits-iha")
    model, train, replaying = settings_from(parsed("--config", str(run.path), "--epochs", "3", "--dropout", "0.25"))
    assert replaying
    assert model == dataclasses.replace(run.model_config, dropout=0.25)  # the attention and its settings kept
    saved = {k: tuple(v) if isinstance(v, list) else v for k, v in run.train_config.items()}
    added_since = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.name not in saved}
    assert dataclasses.asdict(train) == {**added_since, **saved, "epochs": 3}  # settings added since: their defaults


def test_a_run_replays_from_the_command_line(tmp_path):
    out = tmp_path / "again"
    assert main(["train", "--config", str(ROOT / "checkpoints" / "digits-mha"), "--epochs", "1", "--train-limit", "64",
                 "--completion-images", "4", "--snapshot-epochs", "0,1", "--out", str(out)]) == 0
    original, again = (load_run(p) for p in (ROOT / "checkpoints" / "digits-mha", out))
    assert again.model_config == original.model_config
    changed = {k for k in original.train_config if original.train_config[k] != again.train_config[k]}
    assert changed == {"epochs", "train_limit", "completion_images", "snapshot_epochs"}


def test_a_setting_the_replayed_runs_mechanism_lacks_is_refused_in_words_not_dropped(tmp_path, capsys):
    """--generator-widths with --config of an MHA run: MHA has no f, so the flag is refused before anything trains
    (and with a DAMCHA run it is honoured, test_flags_given_set_their_fields)."""
    out = tmp_path / "again"
    assert main(["train", "--config", str(ROOT / "checkpoints" / "digits-mha"), "--generator-widths", "16",
                 "--out", str(out)]) == 2
    assert "mha has no settings ['generator_widths']" in capsys.readouterr().err
    assert not out.exists()


def test_a_run_without_training_settings_is_refused_in_words(tmp_path):
    run = tmp_path / "imported"
    shutil.copytree(ROOT / "checkpoints" / "digits-mha", run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["train"] = {"imported_from": "elsewhere"}
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no training settings"):
        settings_from(parsed("--config", str(run)))


def test_a_string_choice_is_one_literal_that_the_config_checks_and_the_flag_offers():
    """Every field typed by a Literal (the block layout; optimizer, schedule, precision): each of its values
    builds or parses, anything else is refused naming them all, and its flag offers exactly those values."""
    from typing import get_args

    from damcha.model.config import CHOICE_TYPES as MODEL_CHOICES
    from damcha.runs.train import CHOICE_TYPES as TRAIN_CHOICES

    typed = [(ModelConfig, f) for f in dataclasses.fields(ModelConfig) if f.type in MODEL_CHOICES]
    typed += [(TrainConfig, f) for f in dataclasses.fields(TrainConfig) if f.type in TRAIN_CHOICES]
    assert {f.name for _, f in typed} >= {"norm_placement", "position_encoding", "norm", "feed_forward", "optimizer",
                                          "schedule", "precision"}
    for kind, f in typed:
        values = get_args({**MODEL_CHOICES, **TRAIN_CHOICES}[f.type])
        for value in values:
            config = dataclasses.replace(kind(), **{f.name: value})
            if kind is ModelConfig and value != "rotary":  # (rotary needs a mechanism that scores in attend)
                config.validate()
        if kind is ModelConfig:
            with pytest.raises(ValueError) as refused:
                dataclasses.replace(kind(), **{f.name: "neither"}).validate()
            assert all(repr(v) in str(refused.value) for v in values), str(refused.value)
        else:
            with pytest.raises(ValueError):
                dataclasses.replace(kind(), **{f.name: "neither"})
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    offered = {a.dest: a.choices for a in parser._actions}
    for _, f in typed:
        if f.name in offered:
            assert tuple(offered[f.name]) == get_args({**MODEL_CHOICES, **TRAIN_CHOICES}[f.type]), f.name
