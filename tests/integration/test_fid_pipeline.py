"""FID end to end offline: a pixel model's drawn images against real ones through torch-fidelity's Inception
with randomly initialised weights saved as the user's file, equal to the Fréchet distance recomputed on the
same network's features; and drawing with a cache equal to drawing by recomputation."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch

from damcha import ModelConfig
from damcha.inputs.modalities.pixel_tokens import PIXEL_START, rgb332_image
from damcha.model.transformer import Transformer
from damcha.runs import fid
from tests.unit.test_fid_distance import _independent_frechet, require_fid


@pytest.fixture(scope="module")
def random_inception(tmp_path_factory):
    """torch-fidelity's Inception with its layers' default random initialisation, saved as a weights file."""
    require_fid()
    fid.frechet_metric(features=torch.nn.Flatten())  # makes torch-fidelity's Inception module importable
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    torch.manual_seed(0)
    with mock.patch.object(torch, "load", return_value={}), \
            mock.patch.object(FeatureExtractorInceptionV3, "load_state_dict"):  # only to build it without weights
        net = FeatureExtractorInceptionV3("inception-v3-compat", ["2048"], feature_extractor_weights_path="unused")
    path = tmp_path_factory.mktemp("weights") / "random-inception.pth"
    torch.save(net.state_dict(), path)
    return path


def _pixel_model(seed: int = 0, mechanism: str = "damcha") -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=PIXEL_START + 1, block_size=1024, n_layer=1, n_head=2, n_embd=16,
                      modality="pixel_tokens", attention=mechanism, attention_options=(
                          {"generator_widths": (16,)} if mechanism == "damcha" else {}))
    return Transformer(cfg).eval()


def test_fid_of_drawn_images_is_the_frechet_distance_of_the_inception_features(random_inception):
    rng = np.random.default_rng(0)
    real = rgb332_image(rng.integers(0, 256, (4, 1024)))  # (4, 32, 32, 3)
    drawn = fid.generated_images(_pixel_model(), 4, seed=1)
    assert drawn.shape == (4, 32, 32, 3) and drawn.dtype == np.uint8
    score = fid.fid_score(real, drawn, weights=random_inception, batch=4)
    assert (score.real, score.generated, score.weights) == (4, 4, str(random_inception)) and score.fid > 0
    metric = fid.frechet_metric(random_inception)
    with torch.no_grad():
        features = [metric.inception(torch.from_numpy(x).permute(0, 3, 1, 2)).double().numpy() for x in (real, drawn)]
    assert features[0].shape == (4, 2048)
    assert score.fid == pytest.approx(_independent_frechet(*features), rel=1e-4)
    assert abs(fid.fid_score(real, real, weights=random_inception).fid) <= 1e-4 * score.fid


@pytest.mark.parametrize("mechanism", ["damcha", "mha"])
def test_drawing_with_a_cache_draws_what_recomputation_draws(mechanism):
    model = _pixel_model(mechanism=mechanism)
    cached = fid.sample_sequences(model, 3, 40, PIXEL_START, PIXEL_START, seed=5)
    with mock.patch.object(type(model.mechanism), "decodes_with_cache", False):
        recomputed = fid.sample_sequences(model, 3, 40, PIXEL_START, PIXEL_START, seed=5)
    assert cached.shape == (3, 40) and cached.max() < PIXEL_START
    assert np.array_equal(cached, recomputed)


def test_the_fid_command_scores_a_pixel_run_as_recomputed_and_refuses_in_words(random_inception, tmp_path, capsys):
    from damcha.cli import main
    from damcha.inputs.datasets import load_dataset
    from damcha.inputs.datasets.generated import write_standard_format_files
    from damcha.runs.checkpoints import load_model
    from damcha.runs.train import TrainConfig, train

    folder = write_standard_format_files(tmp_path / "data", images_per_batch=6)["cifar10"]
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)})
    train(cfg, TrainConfig(dataset="cifar10-pixels", data_path=str(folder), epochs=1, batch_size=8, nonstandard_data=True),
          tmp_path / "run", progress=False)
    command = ["fid", str(tmp_path / "run"), "--fid-weights", str(random_inception), "--data-path", str(folder),
               "--images", "3", "--seed", "2", "--nonstandard-data"]
    assert main(command) == 0
    out = capsys.readouterr().out
    test = load_dataset("cifar10-pixels", str(folder), nonstandard_ok=True).tensor("test_targets")[:3].numpy()
    expected = fid.fid_score(rgb332_image(test), fid.generated_images(load_model(tmp_path / "run"), 3, seed=2),
                             weights=random_inception)
    assert out.startswith(f"FID {expected.fid:.3f}: 3 images drawn from run (epoch 1, seed 2) against 3 test images")
    assert fid.FID_TOP_50_UNDEFINED in out
    assert main([*command[:3], str(tmp_path / "absent.pth"), *command[4:]]) == 2
    assert "absent.pth: no such file" in capsys.readouterr().err
    assert main([*command[:7], "1", *command[8:]]) == 2
    assert "at least 2" in capsys.readouterr().err
