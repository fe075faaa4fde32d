"""`damcha train --log-dir`: TensorBoard's own reader finds the scalars, images and embeddings,
and watching a run never changes what it trains."""

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from damcha.__main__ import main
from damcha.analysis.inspection import inspect_input
from damcha.runs.checkpoints import load_model
from damcha.runs.train import train
from damcha.views.training_log import TensorBoardLog, structure_image
from tests.support.models import ALL_VARIANTS, tiny_model
from tests.support.training import TINY, tiny_train_config

TINY_CLI = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--generator-widths", "16", "--batch-size", "256",
            "--epochs", "2", "--snapshot-epochs", "0,2"]


def read_log(log_dir) -> EventAccumulator:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_the_cli_logs_what_tensorboard_reads_back(tmp_path):
    assert main(["train", "--dataset", "digits", *TINY_CLI, "--out", str(tmp_path / "run"),
                 "--log-dir", str(tmp_path / "tb")]) == 0
    acc = read_log(tmp_path / "tb")
    tags = acc.Tags()
    steps_per_epoch = -(-1438 // 256)  # the digits training split in batches of 256
    for tag in ("train/step_loss", "train/learning_rate", "train/tokens_per_second"):
        events = acc.Scalars(tag)
        assert [e.step for e in events] == list(range(1, 2 * steps_per_epoch + 1)), tag
        assert all(np.isfinite(e.value) and e.value > 0 for e in events), tag
    assert acc.Scalars("train/tokens_per_second")[0].value > 256 * 64 / 60  # a real rate, not a count
    val = acc.Scalars("validation/nll")
    assert [e.step for e in val] == [0, steps_per_epoch, 2 * steps_per_epoch]
    assert val[-1].value < val[0].value  # it trained, and the log says so
    assert {"validation/bits_per_pixel", "epoch/epoch_seconds", "train/loss_running"} <= set(tags["scalars"])
    record = inspect_input(load_model(tmp_path / "run", 2), np.zeros(64, dtype=np.int64))
    image_tags = {f"structure/{s.name} (validation input 0)" for s in record.structures}
    assert image_tags <= set(tags["images"])
    for tag in image_tags:
        assert [e.step for e in acc.Images(tag)] == [0, 2 * steps_per_epoch]  # the snapshot epochs' global steps
        first = acc.Images(tag)[0]
        assert min(first.width, first.height) >= 64 and first.encoded_image_string[:4] == b"\x89PNG"
    projector = (tmp_path / "tb" / "projector_config.pbtxt").read_text()
    assert "validation inputs" in projector and "metadata" in projector  # labelled by digit class


def test_watching_a_run_never_changes_its_training(tmp_path):
    cfg = tiny_train_config()
    train(TINY, cfg, tmp_path / "plain", progress=False)
    train(TINY, cfg, tmp_path / "watched", progress=False, observer=TensorBoardLog(tmp_path / "tb"))
    a, b = load_model(tmp_path / "plain").state_dict(), load_model(tmp_path / "watched").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_log(tmp_path / "tb").Scalars("validation/nll")


def test_a_text_run_logs_an_unlabelled_embedding(tmp_path):
    train(TINY, tiny_train_config(dataset="text", epochs=1), tmp_path / "run", progress=False,
          observer=TensorBoardLog(tmp_path / "tb", embedded_inputs=4))
    assert read_log(tmp_path / "tb").Tags()["images"]
    projector = (tmp_path / "tb" / "projector_config.pbtxt").read_text()
    assert "4 validation inputs" in projector and "metadata" not in projector


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_every_structure_of_every_mechanism_draws_as_an_image(variant):
    model = tiny_model(variant, dtype=torch.float32)
    record = inspect_input(model, torch.randint(0, 11, (16,)))
    for s in record.structures:
        img = structure_image(s, {"layer": 0, "position": -1})
        assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and 128 <= max(img.shape[:2]) <= 2048, s.name
        if np.ptp(np.asarray(s.at(layer=0, position=-1), dtype=float)) > 0:
            assert img.std() > 0, s.name  # values that differ are drawn in colours that differ


def test_without_tensorboard_the_cli_says_what_to_install(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the extra were not installed
    assert main(["train", "--dataset", "digits", *TINY_CLI, "--out", str(tmp_path / "run"),
                 "--log-dir", str(tmp_path / "tb")]) == 2
    assert "pip install 'damcha[tensorboard]'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and not (tmp_path / "tb").exists()  # refused before anything was written


def test_a_logged_image_is_coloured_by_the_apps_own_scale():
    """The signed extremes and zero take the ends and the middle of the app's diverging scale; a
    non-negative structure's maximum takes the top of its sequential scale."""
    from plotly.colors import get_colorscale, sample_colorscale

    from damcha.model.mechanisms import Identifiability, Structure, StructureKind, ValueKind
    from damcha.views.figures import DIVERGING, SEQUENTIAL

    def rgb(scale, at):
        return np.rint(np.asarray(sample_colorscale(get_colorscale(scale), [at], colortype="tuple")[0]) * 255)

    signed = Structure("s", "S", np.array([[[-2.0, 0.0, 2.0]]]), ("layer", "row", "col"), StructureKind.MATRIX, "",
                       Identifiability.LEARNED, value_kind=ValueKind.SIGNED)
    img = structure_image(signed, {"layer": 0})
    k = img.shape[1] // 3
    for j, at in enumerate((0.0, 0.5, 1.0)):
        np.testing.assert_allclose(img[0, j * k], rgb(DIVERGING, at), atol=1)
    magnitude = Structure("m", "M", np.array([[[0.0, 3.0]]]), ("layer", "row", "col"), StructureKind.MATRIX, "",
                          Identifiability.LEARNED, value_kind=ValueKind.MAGNITUDE)
    img = structure_image(magnitude, {"layer": 0})
    np.testing.assert_allclose(img[0, -1], rgb(SEQUENTIAL, 1.0), atol=1)
    np.testing.assert_allclose(img[0, 0], rgb(SEQUENTIAL, 0.0), atol=1)
