"""The Fréchet distance of damcha.runs.fid (torchmetrics') against an independent computation on known
features, and its refusals in words; the Inception pipeline is tested in tests/integration/test_fid_pipeline.py."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import scipy.linalg
import torch

from damcha.runs.fid import FID_TOP_50_UNDEFINED, FidUnavailable, fid_score, frechet_metric, inception_weights


def require_fid():
    try:
        frechet_metric(features=torch.nn.Flatten())
    except FidUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the FID tests: {e} (.ci/run installs both)")
        pytest.skip(f"FID's libraries are not installed: {e}")


class KnownFeatures(torch.nn.Module):
    """Image i (its first pixel's red value is i) -> row i of a fixed feature table."""

    def __init__(self, table: np.ndarray):
        super().__init__()
        self.table = torch.as_tensor(table, dtype=torch.float64)
        self.num_features = table.shape[1]  # read by torchmetrics instead of probing with a random image

    def forward(self, images):  # (N, 3, 32, 32) uint8 -> (N, F)
        return self.table[images[:, 0, 0, 0].long()]


def _indexed_images(first: int, n: int) -> np.ndarray:
    images = np.zeros((n, 32, 32, 3), dtype=np.uint8)
    images[:, 0, 0, 0] = np.arange(first, first + n)
    return images


def _independent_frechet(a: np.ndarray, b: np.ndarray) -> float:
    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = scipy.linalg.sqrtm(s_a @ s_b).real
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a + s_b - 2 * root))


def test_the_distance_is_the_frechet_distance_of_the_features():
    require_fid()
    rng = np.random.default_rng(0)
    table = np.concatenate([rng.normal(0, 1, (60, 5)), rng.normal(0.7, 2.0, (60, 5)) @ rng.normal(0, 1, (5, 5))])
    real, generated = _indexed_images(0, 60), _indexed_images(60, 60)
    score = fid_score(real, generated, features=KnownFeatures(table), batch=16)
    assert score.fid == pytest.approx(_independent_frechet(table[:60], table[60:]), rel=1e-6)
    assert (score.real, score.generated) == (60, 60)
    # the closed form: the same cloud shifted by d is |d|^2 away
    shifted = np.concatenate([table[:60], table[:60] + [3.0, 0, 0, 4.0, 0]])
    assert fid_score(real, generated, features=KnownFeatures(shifted)).fid == pytest.approx(25.0, rel=1e-6)


def test_fid_is_refused_in_words_without_the_weights_or_with_a_foreign_file(tmp_path):
    require_fid()
    images = _indexed_images(0, 4)
    with pytest.raises(FidUnavailable, match="pass --fid-weights .*nothing is downloaded"):
        fid_score(images, images)
    with pytest.raises(FidUnavailable, match="no such file"):
        inception_weights(tmp_path / "absent.pth")
    (tmp_path / "text.pth").write_text("not weights")
    with pytest.raises(FidUnavailable, match="not a file of weights alone"):
        inception_weights(tmp_path / "text.pth")

    class Hostile:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    (tmp_path / "hostile.pth").write_bytes(pickle.dumps({"w": Hostile()}))
    with pytest.raises(FidUnavailable, match="not a file of weights alone"):
        fid_score(images, images, weights=tmp_path / "hostile.pth")
    assert not (tmp_path / "ran").exists()
    torch.save([torch.zeros(2)], tmp_path / "list.pth")
    with pytest.raises(FidUnavailable, match="not a state dict of tensors"):
        inception_weights(tmp_path / "list.pth")
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "linear.pth")
    with pytest.raises(FidUnavailable, match="not the Inception weights torch-fidelity reads"):
        fid_score(images, images, weights=tmp_path / "linear.pth")
    with pytest.raises(ValueError, match="at least 2 real and 2 generated"):
        fid_score(images[:1], images, features=torch.nn.Flatten())
    assert "not computed" in FID_TOP_50_UNDEFINED
