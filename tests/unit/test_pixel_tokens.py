"""The pixel-token modality (Section 5.1's 1024 spatial tokens of 8-bit pixels): its 3-3-2 colour coding
recomputed by hand, CIFAR's batches read as it, a model of it trained, and a photo uploaded into one."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from damcha import ModelConfig, inspect_input
from damcha.inputs.datasets import load_dataset
from damcha.inputs.datasets.cifar import read_cifar_folder
from damcha.inputs.datasets.generated import write_standard_format_files
from damcha.inputs.datasets.image_sets import carve_validation
from damcha.inputs.modalities import modality_named
from damcha.inputs.modalities.pixel_tokens import PIXEL_START, rgb332_image, rgb332_tokens
from damcha.inputs.model_inputs import input_from_photo, validation_input
from damcha.inputs.uploads import InputError
from damcha.runs.checkpoints import load_model, load_run, read_test
from damcha.runs.train import TrainConfig, train


def _image(rgb) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, dtype=np.uint8), (32, 32, 3)).copy()


def test_3_3_2_codes_recomputed_by_hand():
    # red in the top 3 bits, green in the next 3, blue in the last 2; each channel to its nearest of 8 (4) levels
    for rgb, token in [((255, 0, 0), 0b111_000_00), ((0, 255, 0), 0b000_111_00), ((0, 0, 255), 0b000_000_11),
                       ((255, 255, 255), 255), ((0, 0, 0), 0), ((109, 36, 170), 0b011_001_10), ((19, 17, 43), 0b001_000_01)]:
        assert (rgb332_tokens(_image(rgb)) == token).all(), rgb
    palette = rgb332_image(np.arange(256))  # (16, 16, 3): every token's colour
    assert (rgb332_tokens(palette) == np.arange(256)).all()  # each palette colour codes to its own token
    assert tuple(palette.reshape(256, 3)[0b011_001_10]) == (109, 36, 170)  # 3/7, 1/7, 2/3 of 255
    grey = np.repeat(np.arange(256, dtype=np.uint8), 3).reshape(16, 16, 3)
    worst = np.abs(rgb332_image(rgb332_tokens(grey)).astype(int) - grey).max(axis=(0, 1))
    assert worst.tolist() == [18, 18, 42]  # as the module says: half a level's step, 255/14 and 255/6


@pytest.fixture(scope="module")
def cifar_folder(tmp_path_factory):
    return write_standard_format_files(tmp_path_factory.mktemp("data"), images_per_batch=12)["cifar10"]


def test_cifar_pixels_are_the_carved_images_as_tokens(cifar_folder):
    data = load_dataset("cifar10-pixels", str(cifar_folder), split_seed=3, nonstandard_ok=True)
    assert (data.task, data.vocab_size, data.block_size, data.unit) == ("next_token", 257, 1024, "pixel")
    folder = read_cifar_folder(cifar_folder, "cifar10", nonstandard_ok=True)
    train_idx, val_idx = carve_validation(len(folder.train_images), 3)
    expected = rgb332_tokens(folder.train_images[val_idx])  # (n_val, 1024)
    assert torch.equal(data.val_targets[:], torch.from_numpy(expected))
    assert (data.val_inputs[:, 0] == PIXEL_START).all()
    assert torch.equal(data.val_inputs[:, 1:], data.val_targets[:, :-1])  # position t reads pixel t - 1
    assert torch.equal(data.test_targets[:], torch.from_numpy(rgb332_tokens(folder.test_images)))
    patches = load_dataset("cifar10", str(cifar_folder), split_seed=3, nonstandard_ok=True)
    assert patches.split["n_val"] == data.split["n_val"]  # the same split as the patch model's


@pytest.fixture(scope="module")
def pixel_run(cifar_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "pixels"
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)})
    result = train(cfg, TrainConfig(dataset="cifar10-pixels", data_path=str(cifar_folder), epochs=3, batch_size=8,
                                    lr=1e-2, nonstandard_data=True), out, progress=False)
    return out, result.metrics


def test_a_pixel_model_trains_and_is_scored_in_bits_per_pixel(pixel_run):
    out, rows = pixel_run
    assert rows[-1]["val_bits_per_pixel"] < rows[0]["val_bits_per_pixel"] < 8.5
    run = load_run(out)
    assert (run.model_config.modality, run.model_config.vocab_size, run.model_config.block_size) == ("pixel_tokens", 257, 1024)
    assert "test_bits_per_pixel" in (read_test(out) or {})


def test_an_uploaded_photo_becomes_the_1024_tokens_of_its_run(pixel_run):
    run = load_run(pixel_run[0])
    img = np.zeros((64, 48, 3), dtype=np.uint8)
    img[:, :, 0] = 255  # red everywhere: a centre crop resized stays red
    img[:32, :, 2] = 255  # magenta above
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    inp = input_from_photo(run, buf.getvalue(), "photo.png")
    assert inp.tokens.shape == (1024,) and inp.tokens[0] == PIXEL_START
    assert inp.targets[-1] == 0b111_000_00 and inp.targets[0] == 0b111_000_11  # red below, magenta above
    assert np.array_equal(inp.tokens[1:], inp.targets[:-1])
    assert inp.image.shape == (32, 32, 3) and tuple(inp.image[-1, -1]) == (255, 0, 0)
    assert "1024 pixel tokens" in inp.note
    assert inp.token_labels()[:3] == ["start", "r1c1", "r1c2"] and inp.target_labels()[0] == "r1c1=#ff00ff"
    rec = inspect_input(load_model(run), inp.tokens, inp.targets)
    assert rec.values("metric").shape == (1, 1024, 16, 16) and rec.token_loss.shape == (1024,)
    with pytest.raises(InputError, match="takes photo uploads, not image"):
        from damcha.inputs.model_inputs import input_from_image
        input_from_image(run, buf.getvalue())
    with pytest.raises(InputError, match="need its local files"):
        validation_input(run, 0)  # CIFAR is the user's: no validation sample without its folder


def test_the_modality_labels_and_pictures_what_the_model_reads():
    m = modality_named("pixel_tokens")
    tokens = rgb332_tokens(_image((0, 255, 0)))
    assert m.token_text(PIXEL_START) == "start" and m.token_text(0b000_111_00) == "#00ff00"
    assert m.seen_picture(np.r_[PIXEL_START, tokens[:-1]], tokens, "next_token")[5, 7].tolist() == [0, 255, 0]


def test_the_likelihood_baseline_is_every_pixel_at_its_training_frequency(cifar_folder):
    from damcha.evidence.baselines import baseline_values, token_frequency_nll

    data = load_dataset("cifar10-pixels", str(cifar_folder), nonstandard_ok=True)
    train, val = data.train_targets[:].numpy().ravel(), data.val_targets[:].numpy().ravel()
    counts = np.bincount(train, minlength=257) + 1.0  # add-one over the 257 ids
    expected = float(-np.log(counts[val] / counts.sum()).mean())
    assert baseline_values("token_frequencies", "cifar10-pixels", 0, lambda name: data)["val_nll"] == pytest.approx(expected)
    assert token_frequency_nll("cifar10-pixels", lambda name: data, rows=5)["val_nll"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="reads the next-token samples"):
        token_frequency_nll("cifar10", lambda name: load_dataset("cifar10", str(cifar_folder), nonstandard_ok=True))
