"""Ablation table against a direct evaluation, and the statistics of M on matrices with known answers."""

import math

import numpy as np
import pytest
import torch

from damcha import ModelConfig, inspect_input, variant_config
from damcha.analysis.ablation import ablation_modes, mode_title, validation_ablation
from damcha.analysis.dynamics import generator_weight_drift, metric_statistics, symmetric_spectrum
from damcha.analysis.intervals import mean_interval
from damcha.model.mechanisms.damcha.metric import MetricMode
from damcha.model.mechanisms.mha import qk_forms
from damcha.runs.checkpoints import load_model, load_run
from damcha.runs.train import TrainConfig, train
from tests.support.models import opts, tiny_model


def test_ablation_table_matches_a_direct_evaluation_with_the_mode_set_by_hand(tmp_path):
    cfg = variant_config(ModelConfig(n_layer=1, n_head=2, n_embd=16, attention_options={"generator_widths": (16,)}), "damcha")
    train(cfg, TrainConfig(dataset="digits", epochs=1, batch_size=64, train_limit=128, completion_images=4,
                           completion_samples=2), tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run")
    model = load_model(run)
    rows = validation_ablation(run, model, completion_images=4, completion_samples=2)
    from damcha.inputs.datasets import load_dataset

    d = load_dataset("digits")
    per_input = {}
    for row in rows:
        with torch.no_grad():
            out = model(d.val_inputs, targets=d.val_targets, options=opts(model, row["mode"]), stochastic=False)
        assert row["nll"] == pytest.approx(float(out.loss), rel=1e-6)
        assert row["bits_per_pixel"] == pytest.approx(float(out.loss) / math.log(2), rel=1e-6)
        per_input[row["mode"]] = out.token_loss.mean(1).double().numpy()  # (N,) each input's mean over its pixels
    full = rows[0]
    assert full["mode"] == "full" and "delta_interval" not in full
    for row in rows[1:]:  # the change from full, paired by input: a t-interval over the validation inputs
        _, low, high = mean_interval(per_input[row["mode"]] - per_input["full"])
        assert row["delta_interval"]["nll"] == pytest.approx([low, high], rel=1e-5)
        assert row["delta_interval"]["bits_per_pixel"] == pytest.approx([low / math.log(2), high / math.log(2)], rel=1e-5)
        assert low <= row["nll"] - full["nll"] <= high and row["inputs"] == len(d.val_inputs)
    assert len({round(r["nll"], 6) for r in rows}) == len(rows) == len(MetricMode)  # the modes do differ


def test_statistics_on_known_matrices():
    identity = np.eye(8)
    s = metric_statistics(identity, 4)
    assert s["frobenius"] == pytest.approx(np.sqrt(8))
    assert s["diagonal_share"] == pytest.approx(1) and s["off_diagonal_share"] == pytest.approx(0)
    assert s["asymmetry"] == pytest.approx(0) and s["negative_share"] == pytest.approx(0)
    assert s["effective_rank"] == pytest.approx(8)
    assert s["learned_share"] == pytest.approx(1 / 4)  # each diagonal block spreads over 4 blocks of its row
    rng = np.random.default_rng(0)
    A = rng.normal(size=(8, 8))
    psd = A @ A.T
    assert metric_statistics(psd, 2)["negative_share"] == pytest.approx(0, abs=1e-12)
    assert np.all(symmetric_spectrum(psd) > -1e-9)
    skew = A - A.T
    ss = metric_statistics(skew, 2)
    assert ss["asymmetry"] == pytest.approx(2.0)  # ||M - M^T|| = 2 ||M|| for a skew matrix
    assert np.allclose(symmetric_spectrum(skew), 0)
    u = rng.normal(size=8)
    r1 = metric_statistics(np.outer(u, u), 2)
    assert r1["effective_rank"] == pytest.approx(1, abs=1e-6)
    assert metric_statistics(-identity, 2)["negative_share"] == pytest.approx(1)
    s2 = metric_statistics(A, 2)
    assert s2["learned_share"] + s2["residue_share"] == pytest.approx(1)
    assert s2["diagonal_share"] + s2["off_diagonal_share"] == pytest.approx(1)


def test_weight_drift_separates_row_sum_from_bilinear():
    from tests.support.models import train_copy_task

    for variant, frozen in [("damcha", True), ("damcha-bilinear", False)]:
        m0 = tiny_model(variant, True)
        m1 = tiny_model(variant, True)
        train_copy_task(m1, steps=40)
        drift = generator_weight_drift([m0, m1])
        assert drift["row_mean"][1] > 1e-3
        assert (drift["residual"][1] < 1e-12) == frozen


def test_mha_qk_forms_reproduce_its_scores_and_are_its_inspected_structure():
    model = tiny_model("mha", True)
    B = qk_forms(model.blocks[0].attn).numpy()  # (H, D, D)
    record = inspect_input(model, [1, 2, 3])
    np.testing.assert_array_equal(record.structure("qk_forms").at(layer=0), B)
    attn = model.blocks[0].attn
    x = torch.randn(5, 16, dtype=torch.float64)
    with torch.no_grad():
        q = (x @ attn.query.weight.T).view(5, 4, 4)  # without biases
        k = (x @ attn.key.weight.T).view(5, 4, 4)
        for h in range(4):
            np.testing.assert_allclose((q[:, h] @ k[:, h].T).numpy(), (x @ torch.as_tensor(B[h]) @ x.T).numpy(), atol=1e-10)


def test_class_separation_is_read_against_shuffled_labels():
    """With 10 classes random labels already give a negative silhouette: the null range says so,
    and a real separation lies above it."""
    from damcha.analysis.dynamics import class_separation

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 13)
    noise = rng.normal(size=(130, 4, 4))
    none = class_separation(noise, labels)
    assert none.null_low < 0 and none.null_low <= none.score <= none.null_high + 0.02 and none.p_value > 0.05
    centres = rng.normal(size=(10, 4, 4)) * 3
    real = class_separation(centres[labels] + noise, labels)
    assert real.score > real.null_high and real.p_value < 0.01


@pytest.mark.parametrize("seed", range(4))
def test_batched_silhouettes_equal_scikit_learns(seed):
    """Every labelling's score as silhouette_score computes it, classes of one member included."""
    from sklearn.metrics import pairwise_distances, silhouette_score

    from damcha.analysis.dynamics import silhouette_scores

    rng = np.random.default_rng(seed)
    distances = pairwise_distances(rng.normal(size=(40, 6)), metric="cosine")
    labelings = rng.integers(0, 2 + seed * 3, size=(6, 40))
    labelings[:, 0] = 99  # a class of one in every labelling
    expected = [silhouette_score(distances, labels, metric="precomputed") for labels in labelings]
    np.testing.assert_allclose(silhouette_scores(distances, labelings), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="Number of labels is 1"):
        silhouette_scores(distances, np.zeros((1, 40), dtype=int))


def test_unstructured_baselines_are_those_of_a_random_matrix():
    from damcha.analysis.dynamics import unstructured_baselines

    base = unstructured_baselines(32, 4)
    assert base["asymmetry"] == pytest.approx(np.sqrt(2 * 31 / 32), rel=0.02)  # ‖M − Mᵀ‖² ≈ 2 D (D − 1)
    assert base["negative_share"] == pytest.approx(0.5, abs=0.03)  # a symmetric spectrum, half below 0
    assert base["off_diagonal_share"] == pytest.approx(3 / 4, abs=0.02)


def test_the_definiteness_sentence_names_the_indefinite_heads():
    from damcha.analysis.inspection import definiteness_reading

    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 4, 4))
    psd = np.einsum("hij,hkj->hik", a, a)  # A Aᵀ: positive semi-definite
    assert "Every per-head metric" in definiteness_reading(psd)
    mixed = psd.copy()
    mixed[1] = -mixed[1]
    said = definiteness_reading(mixed)
    assert "m_2" in said and "m_1" not in said and "Not positive semi-definite" in said
    assert definiteness_reading(rng.normal(size=(3, 4, 16))) is None  # bilinear rows: not square


def test_the_ablation_rows_take_the_papers_table_3_shape():
    from damcha.analysis.ablation import modes_by_run

    rows = [{"run": r, "variant": "damcha", "mode": m, "bits_per_pixel": v}
            for r, base in (("a", 2.0), ("b", 3.0)) for m, v in (("full", base), ("diagonal", base + 0.5),
                                                                 ("off_diagonal", base + 0.25))]
    rows[1]["delta_interval"] = {"bits_per_pixel": [0.25, 0.75], "nll": [0.17, 0.52]}
    table = {row["run"]: row for row in modes_by_run(rows, "bits_per_pixel")}
    assert table["a"]["full"] == 2.0 and table["a"]["Δ diagonal"] == 0.5 and table["b"]["Δ off_diagonal"] == 0.25
    assert "Δ full" not in table["a"]
    assert table["a"]["Δ diagonal 95% interval"] == "[+0.25, +0.75]"  # in the table's metric, not the other
    assert "Δ diagonal 95% interval" not in table["b"]  # rows computed before intervals existed: none invented


@pytest.mark.parametrize("run_name", ["digits-damcha", "images-damcha"])
def test_the_completions_under_each_mode_are_a_named_figure_rebuilt_from_its_provenance(run_name):
    """The Metric ablations page's completions are one named model figure: truth and one completed
    image per metric mode, as input_under_modes computes them, rebuilt from the exported provenance."""
    from pathlib import Path

    from damcha.analysis.ablation import input_under_modes
    from damcha.inputs.model_inputs import validation_input
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.views.export import figure_data
    from damcha.views.model_figures import figure_set
    from damcha.views.regeneration import regenerate

    run = load_run(Path(__file__).resolve().parents[2] / "checkpoints" / run_name)
    inp = validation_input(run, 3)
    (item,) = figure_set(run, [run.epochs[-1]], inp.tokens, inp.targets, names=["completion_by_mode"])
    titles = [a["text"] for a in item.figure.to_dict()["layout"]["annotations"]]
    assert titles == ["truth", *(mode_title(run.model_config, m) for m in ablation_modes(run.model_config))]  # titles
    assert not any("_" in t for t in titles)
    outcomes = input_under_modes(load_model(run), inp.tokens, inp.targets)
    shown = figure_data(item.figure)
    last = np.asarray(shown[sorted(shown)[-1]])  # the last mode's picture
    o = outcomes[-1]
    if o.completed_patches is not None:
        from damcha.inputs.modalities.image_patches import patches_image

        np.testing.assert_array_equal(last, patches_image(o.completed_patches))
    else:
        np.testing.assert_array_equal(last[..., 0], np.rint(255 - np.clip(o.completed, 0, 16) / 16 * 255))
    again = figure_data(regenerate(item.provenance).figure)
    assert again.keys() == shown.keys() and all(np.array_equal(again[k], shown[k]) for k in shown)
