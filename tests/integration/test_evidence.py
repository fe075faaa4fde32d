"""The evidence machinery: the verdict rule, the synthetic tasks, the command (resumable) and the page."""

import json
import math
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from damcha.evidence import tuning
from damcha.evidence.catalogue import claims
from damcha.evidence.results import summarise
from damcha.evidence.runner import cpu_model, evidence_claims
from damcha.evidence.statistics import (
    CONFIRMED,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NO_VERDICT,
    NOT_CONFIRMED,
    SANITY_FAILED,
    claim_verdict,
    holm,
    holm_adjusted,
    mean_interval,
    paired_test,
    t_quantile,
    verdict,
)
from damcha.inputs.synthetic import (
    classification_labels,
    cross_head_share,
    inputs,
    label_balance,
    regression_task,
    subspace,
    teacher_metric,
)
from damcha.model.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]


def test_verdict_rule_on_constructed_inputs():
    assert verdict([0.10, 0.12, 0.11])[0] == HOLDS  # a clear win in the paper's direction
    assert verdict([-0.10, -0.12, -0.11])[0] == FAILS  # a clear loss
    assert verdict([0.2, -0.1, 0.05])[0] == INCONCLUSIVE  # the interval contains zero
    assert verdict([0.3])[0] == INCONCLUSIVE  # one seed has no interval
    m, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-4)
    assert t_quantile(0.975, 11) == pytest.approx(2.201, abs=1e-3)  # 12 seeds: not 1.96
    hold = {"verdict": HOLDS, "gain": 0.1, "p": 0.001}
    assert claim_verdict([hold, hold]) == HOLDS
    assert claim_verdict([hold, {"verdict": INCONCLUSIVE, "gain": 0.01, "p": 0.4}]) == INCONCLUSIVE
    assert claim_verdict([hold, {"verdict": FAILS, "gain": -0.1, "p": 0.001}]) == FAILS


def test_holm_controls_the_family_of_a_claims_comparisons():
    """Table 1 digits as shipped: 12 counted comparisons, the smallest p about 0.029 against the paper. One
    comparison alone would fail; under Holm (0.05 / 12 for the smallest) the claim is inconclusive."""
    against = {"verdict": FAILS, "gain": -0.01, "p": 0.029}
    others = [{"verdict": INCONCLUSIVE, "gain": 0.001, "p": 0.2 + 0.05 * i} for i in range(11)]
    assert claim_verdict([against]) == FAILS
    assert claim_verdict([against, *others]) == INCONCLUSIVE
    assert claim_verdict([dict(against, p=0.001), *others]) == FAILS  # 0.001 < 0.05 / 12
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.01 < 0.05/3; then 0.03 > 0.05/2 stops
    assert holm([0.01, 0.02, 0.04]) == [True, True, True]
    assert holm([float("nan"), 0.001]) == [False, True]


def test_trivial_completion_baselines_equal_a_direct_computation_and_are_reported():
    from damcha.evidence.baselines import completion_baseline
    from damcha.evidence.catalogue.common import DIGIT_BASELINES
    from damcha.evidence.records import Arm, Claim
    from damcha.inputs.datasets import load_dataset

    data = load_dataset("digits")
    train, val = data.train_targets.numpy().astype(float), data.val_targets[:5].numpy().astype(float)  # pixels 0..63
    nn_errors, mean_errors = [], []
    for v in val:  # loops: the nearest training top half, and the training mean of each bottom pixel
        best = min(range(len(train)), key=lambda i: float(((train[i, :32] - v[:32]) ** 2).sum()))
        nn_errors.append((((train[best, 32:] - v[32:]) / 16) ** 2).mean())
        mean_errors.append((((train[:, 32:].mean(0) - v[32:]) / 16) ** 2).mean())
    assert completion_baseline("top_half_1nn", "digits", 5)["val_completion_mse"] == pytest.approx(np.mean(nn_errors), rel=1e-5)
    assert completion_baseline("train_mean", "digits", 5)["val_completion_mse"] == pytest.approx(np.mean(mean_errors), rel=1e-5)
    images = load_dataset("sample-images").val_targets[:3].numpy()  # (3, 64, 48), 4x4x3 patches
    fill = [images[i, :32].reshape(-1, 3).mean(0) for i in range(3)]
    want = np.mean([((np.tile(fill[i], 16)[None] - images[i, 32:]) ** 2).mean() for i in range(3)])
    assert completion_baseline("top_mean_colour", "sample-images", 3)["val_completion_mse"] == pytest.approx(want, rel=1e-4)  # float32 sums

    claim = Claim("c", "t", "s", "val_completion_mse", True, (Arm("damcha"), Arm("mha"), *DIGIT_BASELINES), "damcha",
                  controls=tuple(a.name for a in DIGIT_BASELINES))
    rows = {"damcha": [0.09, 0.088, 0.091], "mha": [0.089, 0.09, 0.087], "training mean": [0.075] * 3,
            "top-half 1-NN": [0.059] * 3}
    result = summarise(claim, {k: [{"val_completion_mse": v} for v in vs] for k, vs in rows.items()})
    assert result["trivial_baselines"] and "top-half 1-NN 0.059" in result["trivial_baselines"][0]
    assert not any(c["counted"] for c in result["comparisons"])  # no model beats the fill: reported, not counted
    better = summarise(claim, {k: [{"val_completion_mse": v * (0.5 if k == "damcha" else 1)} for v in vs]
                               for k, vs in rows.items()})
    [warning] = better["trivial_baselines"]  # DAMCHA beats the fill, MHA does not: MHA is named, both count
    assert [c["than"] for c in better["comparisons"] if c["counted"]] == ["mha"]
    assert warning.startswith("Worse than the trivial baseline") and "mha 0.08867" in warning and "damcha" not in warning
    every = summarise(claim, {k: [{"val_completion_mse": v * (0.5 if k in ("damcha", "mha") else 1)} for v in vs]
                              for k, vs in rows.items()})
    assert not every["trivial_baselines"]


def test_paired_test_p_value_and_detectable_difference():
    from scipy import stats

    gains = [0.3, 0.1, 0.2, 0.5]
    t = paired_test(gains)
    assert t["p"] == pytest.approx(stats.ttest_1samp(gains, 0.0).pvalue)
    se = np.std(gains, ddof=1) / 2
    critical = stats.t.ppf(0.975, 3)  # the detectable difference has 80% power on scipy's noncentral t
    power = stats.nct.sf(critical, 3, t["mdd"] / se) + stats.nct.cdf(-critical, 3, t["mdd"] / se)
    assert power == pytest.approx(0.80, abs=1e-9)
    assert t["mdd"] > (stats.t.ppf(0.975, 3) + stats.t.ppf(0.8, 3)) * se  # the textbook sum falls short of 80%
    assert paired_test([0.2])["p"] != paired_test([0.2])["p"]  # one seed: no test (NaN)


def test_exact_detectable_difference_and_the_seeds_a_difference_needs():
    from scipy import stats

    from damcha.evidence.statistics import detectable_in_standard_errors, power_of_paired_t, seeds_to_detect

    assert detectable_in_standard_errors(3) == pytest.approx(5.653, abs=1e-3)  # not the approximation's 5.36
    assert power_of_paired_t(stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2), 3) == pytest.approx(0.766, abs=1e-3)
    for n in (2, 5, 30):
        assert power_of_paired_t(detectable_in_standard_errors(n), n) == pytest.approx(0.80, abs=1e-9)
    n = seeds_to_detect(0.5, 1.0)
    assert detectable_in_standard_errors(n) / np.sqrt(n) <= 0.5 < detectable_in_standard_errors(n - 1) / np.sqrt(n - 1)
    assert seeds_to_detect(-0.1, 1.0) is None and seeds_to_detect(1e-6, 1.0) is None


def test_the_papers_own_difference_is_set_beside_what_the_seeds_could_detect():
    from damcha.evidence.records import Arm, Claim
    from damcha.evidence.view import detectable_sentence, undetectable_papers_effect, verdict_words

    claim = Claim("c", "t", "s", "val_accuracy", False, (Arm("damcha"), Arm("mha", variant="mha")), "damcha",
                  paper={"damcha": 0.71, "mha": 0.69})
    result = summarise(claim, {"damcha": [{"val_accuracy": v} for v in (0.60, 0.70, 0.65)],
                               "mha": [{"val_accuracy": v} for v in (0.66, 0.64, 0.67)]})
    c = next(c for c in result["comparisons"] if c["counted"])
    assert c["paper_gain"] == pytest.approx(0.02) and c["mdd"] > 0.02
    assert detectable_in_standard_errors_fits(c["seeds_for_paper_gain"], c["sd"], 0.02)
    shown = result
    assert result["verdict"] == INCONCLUSIVE
    assert undetectable_papers_effect(shown) == f"cannot detect the paper's effect at 3 seeds (needs ≈{c['seeds_for_paper_gain']})"
    assert verdict_words(shown) == ("orange", "inconclusive: " + undetectable_papers_effect(shown))
    assert "cannot detect the paper's difference (+0.02) at 3 seeds" in detectable_sentence(shown, (HOLDS,))


def detectable_in_standard_errors_fits(n: int, sd: float, effect: float) -> bool:
    """n is the fewest seeds whose exact detectable difference reaches `effect`."""
    from damcha.evidence.statistics import detectable_in_standard_errors

    return (detectable_in_standard_errors(n) * sd / np.sqrt(n) <= effect
            < detectable_in_standard_errors(n - 1) * sd / np.sqrt(n - 1))


def test_results_fixed_by_construction_are_counted_apart_in_a_neutral_colour():
    from damcha.evidence.statistics import FAILS, SANITY_FAILED
    from damcha.evidence.view import verdict_tally, verdict_words

    built = {"verdict": HOLDS, "verdict_kind": "by construction", "comparisons": []}
    learned = [{"verdict": v, "verdict_kind": "learned", "comparisons": []} for v in (HOLDS, FAILS, INCONCLUSIVE)]
    untested = {"verdict": SANITY_FAILED, "verdict_kind": "learned", "comparisons": []}
    assert verdict_words(built)[0] not in ("green", "red") and "construction" in verdict_words(built)[1]
    assert [verdict_words(c)[0] for c in learned] == ["green", "red", "orange"]
    assert verdict_words(untested)[0] == "gray"
    assert verdict_tally([built, *learned, untested]) == (
        "Learned results (3 claims): 1 hold, 1 do not hold, 1 inconclusive. Expected by construction, not evidence "
        "(1): 1 confirmed. Not tested (a sanity check failed): 1.")


def test_a_claim_with_no_counted_comparison_has_no_verdict_not_an_inconclusive_one():
    """A claim none of whose counted comparisons was measured (the tiny scale's Table 1 on CIFAR-10) read
    'inconclusive': nothing was tested, so nothing can be unclear. It has no verdict, in grey, counted apart."""
    from damcha.evidence.view import verdict_tally, verdict_words

    assert claim_verdict([]) == NO_VERDICT
    empty = {"verdict": claim_verdict([]), "verdict_kind": "learned", "comparisons": []}
    assert verdict_words(empty) == ("gray", "no verdict: none of the comparisons it counts was measured")
    unclear = {"verdict": INCONCLUSIVE, "verdict_kind": "learned", "comparisons": []}
    assert "1 inconclusive, 1 without a verdict (no counted comparison measured)" in verdict_tally([empty, unclear])


@pytest.mark.parametrize("quick", [False, True])
def test_sanity_gates_sit_on_instruments_never_on_the_arm_under_judgement(quick):
    from damcha.evidence.catalogue import claims

    gated = [c for c in claims(quick) if c.sanity]
    assert gated
    for claim in gated:
        judged = {next(a for a in claim.arms if a.name == group[0]).variant for group in claim.groups} or \
            {next(a for a in claim.arms if a.name == claim.reference).variant}
        gates = {next(a for a in claim.arms if a.name == name).variant for name in claim.sanity.arms}
        assert not gates & judged, (claim.key, gates & judged)


def test_ratios_are_compared_as_log_ratios_with_geometric_means_and_controls_are_not_counted():
    from damcha.evidence.records import Arm, Claim

    claim = Claim("c", "t", "s", "time_ratio", True, (Arm("damcha", kind="efficiency"), Arm("mha", kind="efficiency"),
                                                       Arm("control", kind="efficiency")), "damcha", controls=("control",))
    values = {"damcha": [{"time_ratio": v} for v in (7.9, 0.5, 16.0)], "mha": [{"time_ratio": 1.0}] * 3,
              "control": [{"time_ratio": 100.0}] * 3}
    result = summarise(claim, values)
    row = next(r for r in result["summary"] if r["arm"] == "damcha")
    assert row["mean"] == pytest.approx((7.9 * 0.5 * 16.0) ** (1 / 3)) and row["low"] > 0  # never a negative ratio
    mha = next(c for c in result["comparisons"] if c["than"] == "mha")
    assert mha["scale"] == "log ratio" and mha["gain"] == pytest.approx(-np.mean(np.log([7.9, 0.5, 16.0])))
    assert not next(c for c in result["comparisons"] if c["than"] == "control")["counted"]


@pytest.mark.parametrize("e", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_teacher_metric_holds_exactly_its_entanglement_share(e):
    assert cross_head_share(teacher_metric(e, seed=3)) == pytest.approx(e, abs=1e-6)
    assert torch.equal(teacher_metric(e, 3), teacher_metric(e, 3))


def test_regression_teacher_is_deterministic_and_calibrated():
    task = regression_task(0.5, seed=4)
    again = regression_task(0.5, seed=4)
    assert task.beta == again.beta and torch.equal(task.W, again.W)
    torch.testing.assert_close(task.W @ task.W.T, torch.eye(task.W.shape[0]), atol=1e-5, rtol=0)
    p = task.attention(inputs(256, 9))
    entropy = float(-(p * p.log()).sum(-1).mean())
    assert entropy == pytest.approx(0.5 * math.log(p.shape[-1]), rel=0.05)


def test_the_teachers_heads_read_other_slices_only_through_cross_head_blocks():
    """At e = 0 head 0 attends by its own slice alone (an MHA restricted to the diagonal blocks); at
    e = 1 it attends by the other slices alone."""
    x = inputs(4, 2)
    other = x.clone()
    other[..., 8:] = torch.randn(4, 16, 24)  # every slice but head 0's
    own = x.clone()
    own[..., :8] = torch.randn(4, 16, 8)
    block, cross = regression_task(0.0, 5), regression_task(1.0, 5)
    torch.testing.assert_close(block.attention(x)[:, 0], block.attention(other)[:, 0])
    assert not torch.allclose(cross.attention(x)[:, 0], cross.attention(other)[:, 0])
    assert not torch.allclose(block.attention(x)[:, 0], block.attention(own)[:, 0])


def test_the_teachers_scores_are_the_cross_head_bilinear_form():
    """Head i, query t, key s: beta * x_{t,i}^T sum_j A_ij x_{s,j} (the query's own slice against every
    slice of the key), before the softmax over s."""
    task, x = regression_task(0.5, 6), inputs(1, 4)[0]  # (T, D)
    d = x.shape[1] // task.heads
    i, t = 2, 3
    blocks = [task.A[i * d:(i + 1) * d, j * d:(j + 1) * d] for j in range(task.heads)]
    scores = torch.stack([task.beta * sum(x[t, i * d:(i + 1) * d] @ blocks[j] @ x[s, j * d:(j + 1) * d]
                                          for j in range(task.heads)) for s in range(x.shape[0])])
    torch.testing.assert_close(task.attention(x[None])[0, i, t], scores.softmax(0))


def test_classification_labels_are_balanced_and_defined_in_the_subspace():
    share = label_balance(4)
    assert share.sum() == pytest.approx(1.0) and share.max() < 1 / 15 + 0.02 and share.min() > 1 / 15 - 0.02
    x = inputs(64, 5)
    U = subspace(32, 0)  # the whole space: the best match by plain dot product
    z = x[:, 1:] @ x[:, 0, :, None]
    assert torch.equal(classification_labels(x, U), z.squeeze(-1).argmax(-1))
    assert np.array_equal(label_balance(4), label_balance(4))


def test_evidence_command_runs_every_claim_and_takes_units_over_from_results(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "damcha", "evidence", "--quick", "--out", str(out), "--work", str(work)]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    doc = json.loads((out / "results.json").read_text())
    assert [c["key"] for c in doc["claims"]] == [c.key for c in claims(quick=True)]
    known_quick = {c.key: c for c in claims(quick=True)}
    assert {c["key"] for c in doc["claims"]} >= {"table1_digits", "table1_images", "table2_efficiency", "table3_depth",
                                                 "table3_modes", "table4_ablations", "table5_text",
                                                 "table6_classification", "adaptivity", "fig12_regression",
                                                 "permutation_relations", "fig13_classification", "fig13_entanglement"}
    assert 0 < doc["units_computed_in_this_call"] <= doc["units"]  # an arm shared by two claims runs once
    assert doc["compute_seconds"] > 0 and not doc["not_run"]
    assert doc["machine"] == {"architecture": platform.machine(), "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
                              "cpu": cpu_model(), "threads_per_unit": 1, "of": "the machine the units ran on"}
    for claim in doc["claims"]:
        assert claim["verdict"] in (HOLDS, FAILS, INCONCLUSIVE, NO_VERDICT, SANITY_FAILED, CONFIRMED, NOT_CONFIRMED)
        assert all(len(v) == 2 for v in claim["values"].values())
        baselines = {a.name for a in known_quick[claim["key"]].arms if a.kind == "baseline"}
        for metric in (claim["metric"], *claim["columns"]):  # every reported metric was measured for every arm
            assert all(metric in row or "constant" in row or (arm in baselines and not metric.startswith("val_completion"))
                       for arm, rows in claim["values"].items() for row in rows)
    digits = next(c for c in doc["claims"] if c["key"] == "table1_digits")
    for rows in digits["values"].values():
        for row in rows:
            assert 0 <= row["val_completion_mse_q25"] <= row["val_completion_mse_q75"] and row["val_completion_mse"] > 0
    # the rates: chosen per run configuration on tuning fits of their own seeds, before the reported seeds
    chosen = {row["run"]: row["chosen"] for row in doc["tuning"]}
    assert doc["tuning"] and all(set(row["seeds"]).isdisjoint(doc["seeds"]) for row in doc["tuning"])
    tuned = {c.key: c for c in tuning.tuned(evidence_claims(True), doc["tuning"])}
    for claim in doc["claims"]:
        for arm in tuned[claim["key"]].arms:
            if arm.rate_tuned:  # a run's and a synthetic model's at a level alike
                assert claim["learning_rates"][arm.name] == arm.lr == chosen[tuning.describe(tuning.configuration(arm))]
            if arm.kind == "synthetic" and arm.rate_tuned:
                assert [row["lr"] for row in claim["values"][arm.name]] == [arm.lr] * 2  # every seed trained at it
    fit = json.loads(next((work / "runs").glob("*-tuning-quick-seed1000")).joinpath("config.json").read_text())
    assert fit["train"]["tuning_holdout"] == tuning.HOLDOUT and fit["data"]["tuning_holdout"] == tuning.HOLDOUT
    # (a second call redoing nothing: tests/integration/test_evidence_at_scale.py, on the same code path)
    assert (out / "adaptivity.csv").read_text().startswith("arm,seed,metric,value")
    assert "params_ratio" in (out / "table2_efficiency.csv").read_text()
    # A fresh work folder that takes the units over from these results, redoing one claim and one variant
    # (the cheap ones: timing Table 2 again would double the test's longest part)
    again = subprocess.run([*cmd[:-4], "--out", str(tmp_path / "again"), "--work", str(tmp_path / "work2"), "--reuse",
                            str(out / "results.json"), "--redo", "table6_classification", "mha",
                            "--only", "table6_classification", "table5_text"],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    redone = json.loads((tmp_path / "again" / "results.json").read_text())
    known = {c.key: c for c in tuning.tuned(evidence_claims(True), redone["tuning"])
             if c.key in ("table6_classification", "table5_text")}
    fits = tuning.tuning_units(list(known.values()), True)
    units = {a.unit(s, True) for c in known.values() for a in c.arms for s in range(2)} | set(fits)
    expected = {a.unit(s, True) for c in known.values() for a in c.arms for s in range(2)
                if c.key == "table6_classification" or (a.variant == "mha" and a.kind != "constant")}
    expected |= {u for u, (arm, _) in fits.items() if arm.variant == "mha" or arm.dataset == "digits-cls"}
    assert redone["units_computed_in_this_call"] == len(expected) and redone["units"] == len(units)
    assert redone["reused_units"] == len(units) - len(expected)
    assert [c["key"] for c in redone["claims"]] == ["table5_text", "table6_classification"]  # in page order
    first_claims = {c["key"]: c for c in doc["claims"]}
    for claim in redone["claims"]:  # arms not redone carry the very same values
        for arm, rows in claim["values"].items():
            if claim["key"] != "table6_classification" and not any(a.name == arm and a.variant == "mha"
                                                                    for a in known[claim["key"]].arms):
                assert rows == first_claims[claim["key"]]["values"][arm]


def test_the_page_renders_the_shipped_results_without_training():
    from streamlit.testing.v1 import AppTest

    from damcha.evidence.view import (
        claims_at_scale,
        grid_edge_warning,
        paper_beside,
        results_at_other_scales,
        verdict_tally,
        verdict_words,
    )

    shipped = json.loads((ROOT / "checkpoints" / "evidence" / "results.json").read_text())
    # the shipped rehearsal (checkpoints/evidence-tiny) beside them: per claim it covers, its arms, its
    # comparisons and, where the paper gives numbers, the paper beside our test split
    scaled = [doc for _, doc, problem in results_at_other_scales(ROOT / "checkpoints" / "evidence") if not problem]
    assert scaled, "the shipped rehearsal is missing"

    def scale_tables(key: str) -> int:
        return sum(2 + bool(paper_beside(at)) for doc in scaled for at in claims_at_scale(doc, key))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
    at.switch_page("../pages/evidence.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    titles = [c["title"] for c in shipped["claims"]]
    summary = at.dataframe[0].value  # every verdict on the first screen, one claim in full below
    assert list(summary["claim"]) == titles
    assert list(summary["verdict"]) == [verdict_words(c)[1] for c in shipped["claims"]]
    assert verdict_tally(shipped["claims"]) in [c.value for c in at.caption]  # learned results counted apart
    edge = grid_edge_warning(shipped)  # rates chosen at the grid's edge are named
    assert [w.value for w in at.warning if w.value == edge] == ([edge] if edge else [])
    assert [h.value for h in at.header] == [titles[0], "What this evidence cannot speak to"]
    for claim in shipped["claims"]:
        at.selectbox(key="claim").set_value(claim["title"]).run()
        assert not at.exception, [e.value for e in at.exception]
        assert [h.value for h in at.header] == [claim["title"], "What this evidence cannot speak to"]
        contrasted = any(c.get("measures") for c in claim["comparisons"])
        counted = any(c["counted"] for c in claim["comparisons"])  # none where every one is a construction check
        assert len(at.get("plotly_chart")) == 1 + counted + contrasted  # arms, differences, contrasts
        assert len(at.dataframe) == 3 + bool(claim.get("construction_checks")) + bool(claim.get("families")) \
            + bool(shipped.get("tuning")) + scale_tables(claim["key"])  # (the rates' table: in an expander)
    at.selectbox(key="claim").set_value(at.selectbox(key="claim").options[-1]).run()  # every claim
    assert [h.value for h in at.header] == [*titles, "What this evidence cannot speak to"]


def test_a_failed_sanity_check_withholds_the_verdict_and_a_missing_comparison_system_is_only_reported():
    from damcha.evidence.records import Arm, Claim, Sanity

    names = ("damcha e=0.0", "mha e=0.0", "moa e=0.0")
    claim = Claim("c", "t", "s", "relative_mse", True, tuple(Arm(n, variant=n.split()[0]) for n in names), names[0],
                  verdict_against=("mha",), groups=(names,), sanity=Sanity(names[:2], 0.2, "below", names[2:]))

    def rows(*vs):
        return [{"relative_mse": v} for v in vs]
    learned = summarise(claim, {"mha e=0.0": rows(0.10, 0.11, 0.12), "damcha e=0.0": rows(0.05, 0.06, 0.05),
                                "moa e=0.0": rows(0.6, 0.7, 0.6)})
    assert learned["verdict"] == HOLDS and not learned["sanity_failures"]
    assert learned["sanity_caveats"] == ["moa e=0.0: 0.632 (needs below 0.2; 0 of 3 seeds reach it)"]  # geometric mean
    unlearned = summarise(claim, {"mha e=0.0": rows(0.50, 0.51, 0.52), "damcha e=0.0": rows(0.30, 0.31, 0.30),
                                  "moa e=0.0": rows(0.1, 0.1, 0.1)})
    assert unlearned["verdict"] == SANITY_FAILED and len(unlearned["sanity_failures"]) == 2


def test_a_threshold_arm_and_several_verdict_metrics():
    """Table 2's form: the reference against a constant, each metric compared; any failure fails the claim."""
    from damcha.evidence.records import Arm, Claim

    claim = Claim("c", "t", "s", "time_ratio", True, (Arm("damcha", kind="efficiency"),
                                                       Arm("comparable", kind="constant", level=1.2)), "damcha",
                  columns=("params_ratio",), verdict_metrics=("time_ratio", "params_ratio"))
    cheap = [{"time_ratio": t, "params_ratio": 1.0} for t in (0.9, 1.0, 0.95)]
    constant = [{"constant": 1.2}] * 3
    assert summarise(claim, {"damcha": cheap, "comparable": constant})["verdict"] == HOLDS
    heavy = [dict(r, params_ratio=130.0) for r in cheap]
    result = summarise(claim, {"damcha": heavy, "comparable": constant})
    assert result["verdict"] == FAILS
    assert [c["verdict"] for c in result["comparisons"]] == [HOLDS, FAILS]
    assert {(r["arm"], r["metric"]) for r in result["details"]} == {
        (a, m) for a in ("damcha", "comparable") for m in ("time_ratio", "params_ratio")}


def test_arms_with_other_settings_train_their_own_runs():
    from damcha.evidence.catalogue.common import F_DEPTHS
    from damcha.evidence.records import Arm

    shallow = Arm("f depth 1", overrides=(("generator_widths", F_DEPTHS[1]),))
    assert shallow.run_name(0, False) != Arm("damcha").run_name(0, False)
    assert Arm("full").run_name(2, False) == Arm("diagonal-only", mode="diagonal").run_name(2, False)  # one run, two modes
    assert Arm("adaptivity gap", kind="adaptivity").run_name(0, True) == Arm("damcha").run_name(0, True)


def test_efficiency_ratios_of_mha_against_itself_are_one():
    from damcha.evidence.efficiency import EFFICIENCY_BESIDE, efficiency_ratios
    from damcha.evidence.results import RATIO_METRICS

    assert set(EFFICIENCY_BESIDE) <= set(RATIO_METRICS)  # compared as log ratios like the others

    r = efficiency_ratios(ModelConfig(vocab_size=8, block_size=32, n_layer=1, n_head=4, n_embd=32), "mha", T=32,
                          batch=2, repeats=2)
    assert r["params_ratio"] == 1.0 and r["flops_ratio"] == 1.0 and r["time_ratio"] > 0 and r["memory_ratio"] > 0
    assert set(r) == {"params_ratio", "flops_ratio", "time_ratio", "memory_ratio", *EFFICIENCY_BESIDE}
    assert all(r[k] > 0 for k in EFFICIENCY_BESIDE)
    damcha = efficiency_ratios(ModelConfig(vocab_size=8, block_size=32, n_layer=1, n_head=4, n_embd=32), "damcha",
                               T=32, batch=2, repeats=2)
    assert damcha["params_ratio"] > 1 and damcha["flops_ratio"] > 1  # f outputs a D x D metric per input


def test_the_memory_probe_is_an_exact_replay_the_same_every_run_and_a_zero_peak_is_refused(monkeypatch):
    """A sampler of malloc's level missed the tiny rehearsal's peaks (0.0016 MB one time, 0.047 the next, and
    0 under CI's load: a refused run). The probe replays every allocation and free: its peak equals the one
    counted by hand, the same in every fresh process; a peak of 0 is refused in words, never made a ratio."""
    from damcha.evidence import efficiency

    def held_at_once():
        first = torch.empty(1000)  # 4,000 bytes
        second = torch.empty(2000)  # + 8,000: the peak, 12,000
        del first
        third = torch.empty(500)  # 8,000 + 2,000
        return second, third

    assert efficiency.peak_allocated_bytes(held_at_once) == 12_000
    cfg = ModelConfig(vocab_size=256, block_size=64, n_layer=1, n_head=4, n_embd=32,
                      attention_options={"generator_widths": (64, 128)})
    peaks = [efficiency.peak_memories_mb(cfg, ("dcmha", "mha"), 32, 2) for _ in range(3)]
    assert peaks[0] == peaks[1] == peaks[2] and min(peaks[0]) > 0, peaks
    monkeypatch.setattr(efficiency, "peak_memories_mb", lambda *a: [0.4, 0.0])
    with pytest.raises(ValueError, match="no memory ratio can be formed"):
        efficiency.efficiency_ratios(cfg, "dcmha", T=32, batch=2, repeats=1)


def test_interval_figure_puts_the_papers_numbers_on_their_own_axis():
    from damcha.views.figures import interval_figure

    fig = interval_figure(["a", "b"], [1.0, 2.0], [0.5, 1.5], [1.5, 2.5], paper=[None, 120.0])
    ours, paper = fig.data
    assert list(ours.error_y.array) == [0.5, 0.5] and list(ours.error_y.arrayminus) == [0.5, 0.5]
    assert paper.yaxis == "y2" and math.isnan(paper.y[0]) and paper.y[1] == 120.0
    assert fig.layout.yaxis.type != "log"
    ratios = interval_figure(["a", "b"], [0.002, 0.04], [0.001, 0.0001], [0.003, 16.0], paper=[None, 1.0], log_scale=True)
    assert ratios.layout.yaxis.type == "log" and ratios.layout.yaxis2.type != "log"
    differences = interval_figure(["a"], [0.1], [-0.1], [0.3], zero_line=True)
    assert len(differences.data) == 1 and differences.layout.shapes[0].y0 == 0
    rows = interval_figure(["first", "second"], [0.1, -0.2], [0.0, -0.3], [0.3, 0.0], paper=[None, 2.0],
                           zero_line=True, log_scale=False, horizontal=True)
    ours, paper = rows.data
    assert list(ours.y) == ["first", "second"] and list(ours.x) == [0.1, -0.2] and ours.error_y.array is None
    assert list(ours.error_x.arrayminus) == pytest.approx([0.1, 0.1]) and paper.xaxis == "x2" and paper.x[1] == 2.0
    assert rows.layout.shapes[0].x0 == 0 and rows.layout.yaxis.autorange == "reversed"


def test_a_claim_can_ask_for_more_seeds_than_the_command_outside_quick_runs():
    full = {c.key: c for c in claims(quick=False)}
    assert full["table1_digits"].seeds(3, quick=False) == 5  # the main DAMCHA-against-MHA comparison
    assert full["table1_digits"].seeds(7, quick=False) == 7 and full["table1_digits"].seeds(2, quick=True) == 2
    assert full["table4_ablations"].seeds(3, quick=False) == 8  # with 5 its verdict turned on one seed
    assert full["table3_depth"].seeds(3, quick=False) == 5 and full["newer_head_interaction"].seeds(3, quick=False) == 5
    assert full["table6_classification"].seeds(3, quick=False) == 3


def test_tables_1_4_and_5_carry_an_mha_at_damchas_parameter_count_and_every_arm_its_count():
    from damcha.evidence.capacity import base_config, model_parameters
    from damcha.evidence.runner import arm_parameters
    from damcha.evidence.view import arm_table
    from damcha.inputs.datasets import load_dataset
    from damcha.model.transformer import Transformer
    from damcha.runs.train import model_config_for

    full = {c.key: c for c in claims(quick=False)}
    for key, dataset in (("table1_digits", "digits"), ("table4_ablations", "digits"), ("table5_text", "text")):
        claim = full[key]
        matched = next(a for a in claim.arms if a.variant == "mha" and a.overrides)
        assert matched.dataset == dataset and (matched.name in claim.controls) == (key == "table4_ablations")
        damcha = model_parameters("damcha", dataset)
        mha = model_parameters("mha", dataset)
        assert abs(model_parameters("mha", dataset, matched.overrides) - damcha) < 0.03 * damcha and damcha > 4 * mha
        counts = arm_parameters(claim)
        assert set(counts) == {a.name for a in claim.arms if a.kind == "train"}
        cfg = base_config(matched.variant, matched.overrides)
        built = Transformer(model_config_for(load_dataset(dataset, block_size=cfg.block_size), cfg))
        assert counts[matched.name] == sum(p.numel() for p in built.parameters())  # the model that trains
    record = {"metric": "val_nll", "summary": [{"arm": "a", "mean": 1.0, "low": 0.9, "high": 1.1},
                                               {"arm": "b", "mean": 2.0, "low": 1.9, "high": 2.1}],
              "parameters": {"a": 1234567}}
    assert [row["parameters"] for row in arm_table(record)] == ["1,234,567", "—"]
    assert "parameters" not in arm_table({**record, "parameters": {}})[0]  # results written before the counts


def test_table3s_h_scaled_diagonal_is_a_control_beside_the_counted_modes():
    modes = {c.key: c for c in claims(quick=False)}["table3_modes"]
    scaled = next(a for a in modes.arms if a.mode == "diagonal_scaled")
    assert scaled.name in modes.controls and "diagonal-only" not in modes.controls
    assert scaled.run_name(0, False) == next(a for a in modes.arms if a.name == "full").run_name(0, False)


def test_the_synthetic_test_set_is_no_training_batch_and_teachers_are_drawn_per_seed():
    from damcha.inputs.synthetic import TEST_INPUT_SEED, regression_task, task_seed

    test = inputs(1024, TEST_INPUT_SEED)
    for seed in range(5):  # regression: the test set began with seed 0's batch at step 7
        for step in (0, 7, 1499):
            batch = inputs(64, seed * 100_003 + step)
            assert not torch.isclose(batch[:, None], test[None]).all(-1).all(-1).any()
    assert len({task_seed(0.5, s) for s in range(5)} | {task_seed(0.25, s) for s in range(5)}) == 10
    a, b = regression_task(0.5, task_seed(0.5, 0)), regression_task(0.5, task_seed(0.5, 1))
    x = inputs(4, 1)
    assert not torch.allclose(a.targets(x), b.targets(x))  # another seed, another teacher


def test_teachers_training_batches_and_test_inputs_draw_from_separate_seed_spaces(monkeypatch):
    """Every generator seed a claim's teacher (or class subspace) draws from lies in TEACHER_SEEDS, above
    every training batch's seed and below the validation and test inputs' (issue 40: 18 of seed 0's
    teacher seeds were training-batch seeds)."""
    from damcha.evidence.catalogue.common import synthetic_steps
    from damcha.inputs.synthetic import TEACHER_SEEDS, TEST_INPUT_SEED, VALIDATION_INPUT_SEED, make_task

    drawn = []

    class Recording(torch.Generator):
        def manual_seed(self, seed):
            drawn.append(seed)
            return super().manual_seed(seed)

    levels = {(a.task, a.level) for c in claims(False) for a in c.arms if a.kind == "synthetic"}
    assert {task for task, _ in levels} >= {"regression", "permutation", "within-slice", "classification"}
    seeds = (0, 7)  # the first and the last a claim runs
    monkeypatch.setattr(torch, "Generator", Recording)
    for task, level in sorted(levels):
        for seed in seeds:
            make_task(task, level, seed)
    monkeypatch.undo()
    assert drawn and all(s in TEACHER_SEEDS for s in drawn), sorted(s for s in drawn if s not in TEACHER_SEEDS)[:5]
    last_batch = max(seeds) * 100_003 + synthetic_steps(False) - 1
    assert last_batch < TEACHER_SEEDS.start and TEACHER_SEEDS[-1] < VALIDATION_INPUT_SEED < TEST_INPUT_SEED < 2**32


def _flat(tree, path="") -> dict:
    """Every leaf of a JSON tree by its path: numbers as floats (None as NaN), text as it is."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{path}/{key}").items()}
    if isinstance(tree, list):
        return {k: v for i, sub in enumerate(tree) for k, v in _flat(sub, f"{path}/{i}").items()}
    return {path: float("nan") if tree is None else float(tree) if isinstance(tree, int | float) else tree}


def test_the_shipped_statistics_are_what_the_current_code_computes_from_the_shipped_values(tmp_path):
    """`evidence --restate` on a copy of the shipped results changes no statistic, verdict or CSV: the
    shipped page says what this code computes; a claim whose arms changed is left as it was, and named."""
    import shutil

    from damcha.evidence.runner import restate

    shipped = ROOT / "checkpoints" / "evidence"
    copy = tmp_path / "evidence"
    shutil.copytree(shipped, copy)
    before = json.loads((shipped / "results.json").read_text())
    after = restate(copy, "test")
    assert [c["verdict"] for c in after["claims"]] == [c["verdict"] for c in before["claims"]]
    new, old = _flat(after["claims"]), _flat(before["claims"])
    assert new.keys() == old.keys()
    numbers = [k for k, v in old.items() if isinstance(v, float)]
    assert [new[k] for k in numbers] == pytest.approx([old[k] for k in numbers], rel=1e-9, nan_ok=True)  # CPU's last bits
    assert {k: new[k] for k in old if k not in numbers} == {k: v for k, v in old.items() if k not in numbers}
    assert sorted(p.name for p in copy.glob("*.csv")) == sorted(p.name for p in shipped.glob("*.csv"))
    doc = json.loads((copy / "results.json").read_text())
    doc["claims"][0]["arms"][next(iter(doc["claims"][0]["arms"]))][0] = "renamed"
    (copy / "results.json").write_text(json.dumps(doc))
    assert restate(copy)["restated"]["unchanged_claims"] == [doc["claims"][0]["key"]]


def test_a_family_of_comparisons_is_worded_under_its_own_holm_correction_beside_the_verdict():
    """Table 2's form: the verdict against a threshold; the paper's comparison set read as a family."""
    from damcha.evidence.records import Arm, Claim

    claim = Claim("c", "t", "s", "time_ratio", True,
                  (Arm("damcha", kind="efficiency"), Arm("tha", kind="efficiency", variant="tha"),
                   Arm("mma", kind="efficiency", variant="mma"), Arm("iha", kind="efficiency", variant="iha"),
                   Arm("comparable", kind="constant", level=1.2)), "damcha",
                  verdict_metrics=("time_ratio", "params_ratio"), verdict_against=("constant",),
                  families=(("the paper's set", ("tha", "mma")),))
    values = {"damcha": [{"time_ratio": t, "params_ratio": 130.0} for t in (2.0, 2.1, 1.9, 2.05, 1.95)],
              "tha": [{"time_ratio": t, "params_ratio": 1.0} for t in (4.0, 4.2, 3.9, 4.1, 4.0)],  # damcha ahead
              "mma": [{"time_ratio": t, "params_ratio": 1.0} for t in (2.0, 2.3, 1.8, 2.0, 2.1)],  # within noise
              "iha": [{"time_ratio": t, "params_ratio": 200.0} for t in (9.0, 9.1, 9.2, 9.0, 9.3)],  # not in the family
              "comparable": [{"constant": 1.2}] * 5}
    result = summarise(claim, values)
    assert result["verdict"] == FAILS  # the threshold decides: 2x is over 1.2x
    family = [c for c in result["comparisons"] if c.get("family")]
    assert {c["than"] for c in family} == {"tha", "mma"} and not any(c["counted"] for c in family)
    assert [c["family_holm_p"] for c in family] == pytest.approx(holm_adjusted([c["p"] for c in family]), nan_ok=True)
    rows = {r["metric"]: r for r in result["families"]}
    assert rows["time_ratio"]["ahead"] == "tha" and rows["time_ratio"]["within noise"] == "mma"
    assert rows["params_ratio"]["behind"] == "tha, mma"  # exact: no spread over repeats
    assert all(r["against"] == "the paper's set" for r in result["families"])
    table2 = next(c for c in claims(quick=False) if c.key == "table2_efficiency")
    assert dict(table2.families)["the paper's comparison set"] == ("tha", "dcmha", "colmha", "mma", "moa")


def test_holm_adjusted_p_values_and_the_words_a_comparison_may_use():
    from damcha.evidence.statistics import holm, holm_adjusted, reading

    ps = [0.01, 0.04, 0.03, 0.005, float("nan")]
    assert holm_adjusted(ps)[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and math.isnan(holm_adjusted(ps)[4])
    assert [a < 0.05 for a in holm_adjusted(ps)[:4]] == holm(ps)[:4]
    ahead = {"gain": 0.02, "low": 0.001, "high": 0.04, "sd": 0.01}
    assert reading({**ahead, "holm_p": 0.01}) == "ahead"
    assert reading({**ahead, "holm_p": 0.29}) == "nominally ahead (Holm-adjusted p 0.29)"
    assert reading({**ahead, "low": -0.01, "holm_p": 0.5}) == "within noise"
    assert reading({"gain": -0.3, "low": -0.3, "high": -0.3, "sd": 0.0}) == "behind (exact)"  # parameters: no test


def test_equivalence_is_two_one_sided_t_tests():
    from scipy import stats

    from damcha.evidence.statistics import equivalence_p

    gains = np.array([0.01, -0.02, 0.015, 0.0, -0.005])
    expected = max(stats.ttest_1samp(gains, -0.05, alternative="greater").pvalue,
                   stats.ttest_1samp(gains, 0.05, alternative="less").pvalue)
    assert equivalence_p(gains.mean(), gains.std(ddof=1), 5, 0.05) == pytest.approx(expected)
    assert equivalence_p(gains.mean(), gains.std(ddof=1), 5, 0.001) > 0.05  # a margin too tight: no tie shown


def test_comparisons_fixed_by_construction_are_checked_apart_and_never_counted():
    from damcha.evidence.records import Arm, Claim, ConstructionCheck

    arms = (Arm("damcha"), Arm("mha", variant="mha"), Arm("mha-slice", variant="mha-slice"))
    values = {"damcha": [{"loss": v} for v in (1.0, 1.1, 1.05)], "mha": [{"loss": v} for v in (0.2, 0.25, 0.22)],
              "mha-slice": [{"loss": v} for v in (1.01, 1.09, 1.06)]}
    behind = ConstructionCheck("damcha", "mha", "behind", "MHA represents it; DAMCHA cannot.")
    tie = ConstructionCheck("damcha", "mha-slice", "tie", "The same function class.", 0.05)
    fixed = summarise(Claim("c", "t", "s", "loss", True, arms, "damcha", verdict_against=("mha",),
                            construction_checks=(behind, tie)), values)
    assert not any(c["counted"] for c in fixed["comparisons"])
    assert fixed["verdict"] == CONFIRMED and fixed["verdict_kind"] == "by construction"
    assert [k["outcome"] for k in fixed["construction_checks"]] == ["confirmed", "tie confirmed"]
    learned = summarise(Claim("c", "t", "s", "loss", True, arms, "damcha", construction_checks=(behind,)), values)
    assert learned["verdict_kind"] == "learned" and learned["verdict"] == INCONCLUSIVE  # only the slice MHA counts
    assert [c["than"] for c in learned["comparisons"] if c["counted"]] == ["mha-slice"]
    wrong = ConstructionCheck("damcha", "mha", "ahead", "a wrong prediction")
    assert summarise(Claim("c", "t", "s", "loss", True, arms, "damcha", verdict_against=("mha",),
                           construction_checks=(wrong,)), values)["construction_checks"][0]["outcome"] == "not confirmed"


@pytest.mark.parametrize("quick", [False, True])
def test_every_construction_check_names_a_comparison_the_claim_makes(quick):
    for claim in claims(quick):
        names = {a.name for a in claim.arms}
        for check in claim.construction_checks:
            assert {check.better, check.than} <= names, (claim.key, check)
            assert check.predicted in ("ahead", "behind", "tie") and check.why
            assert check.predicted != "tie" or check.margin > 0, (claim.key, "a tie needs its margin")


@pytest.mark.parametrize("quick", [False, True])
def test_every_claim_on_a_paper_result_says_what_it_cannot_speak_to(quick):
    """A claim on one of the paper's tables or figures lists what the paper reports there that it does not
    measure; the page's section is generated from those lists and the paper's results no claim tests."""
    from damcha.evidence.catalogue.common import PAPER_RESULTS_NOT_CLAIMED
    from damcha.evidence.view import cannot_speak_to

    on_paper = [c for c in claims(quick) if c.title.startswith(("Table", "Fig."))]
    assert on_paper
    for claim in on_paper:
        assert claim.cannot_speak_to and all(gap.strip() for gap in claim.cannot_speak_to), claim.key
    records = [{"title": c.title, "cannot_speak_to": list(c.cannot_speak_to)} for c in claims(quick)]
    section = cannot_speak_to(records)
    assert [t for t, _ in section[:-1]] == [c.title for c in claims(quick) if c.cannot_speak_to]
    assert section[-1][1] == list(PAPER_RESULTS_NOT_CLAIMED)


def test_the_page_draws_nlls_in_bits_as_every_other_page_and_differences_on_their_own_scale():
    """The stored results keep nats; what the page draws and tabulates of an NLL is in bits per token
    (nats / ln 2), and a difference axis says whether it holds log ratios or differences in which unit."""
    from damcha.evidence.view import arm_table, evidence_figures, metric_label
    from damcha.views.figures import interval_cell

    doc = json.loads((ROOT / "checkpoints" / "evidence" / "results.json").read_text())
    claims = doc["claims"] if isinstance(doc["claims"], list) else list(doc["claims"].values())
    nll = next(c for c in claims if c["metric"] == "val_nll" and c["summary"])
    summary = dict(evidence_figures(nll))["evidence_summary"]
    trace = summary.data[0]
    drawn = list(trace.y if trace.orientation != "h" else trace.x)
    np.testing.assert_allclose(drawn, [r["mean"] / math.log(2) for r in nll["summary"]], rtol=1e-12)
    assert "bits per token" in summary.to_json() and "nats" not in summary.to_json()
    table = arm_table(nll)
    label = metric_label("val_nll")
    assert label == "val_nll (bits per token)"
    first = next((d for d in nll.get("details", []) if d["metric"] == "val_nll"), nll["summary"][0])
    row = next(r for r in table if r["arm"] == first["arm"])
    k = 1 / math.log(2)
    assert row[label] == interval_cell(first["mean"] * k, first["low"] * k, first["high"] * k)
    ratio = next(c for c in claims if c["metric"] in ("relative_mse", "time_ratio")
                 and any(x.get("counted", True) for x in c["comparisons"]))
    assert "log ratio" in dict(evidence_figures(ratio))["evidence_differences"].to_json()


def test_synthetic_configurations_at_the_edge_of_their_rates_are_warned_of_as_run_configurations_are():
    """A synthetic configuration's tuning row (validation scores, higher is better for accuracy) is read by the
    same warning as a run's: an edge short of the ladder's end is named, an end is a stated bound."""
    from damcha.evidence.view import grid_edge_warning, rate_edges_sentence, tuning_rows

    def row(run, chosen, grid=(0.001, 0.003, 0.01), metric="accuracy"):
        return {"run": run, "metric": metric, "seeds": [1000], "validation": {f"{r:g}": [0.5] for r in grid},
                "chosen": chosen}
    real = {"run": "mha on digits", "losses": {"0.001": [1.5], "0.003": [1.4], "0.01": [1.6]}, "chosen": 0.003}
    doc = {"tuning": [real, row("damcha on the classification task at 2", 0.001), row("mha on the regression task at 0", 0.003)]}
    assert grid_edge_warning(doc) == ("1 of 3 tuned configurations chose the edge of the rates they tried, the bottom "
                                      "rate: damcha on the classification task at 2 (0.001). A rate beyond the edge was "
                                      "not tried, so these arms may be under-tuned.")
    at_bound = {"tuning": [row("mha on the regression task at 0", 0.1, (0.01, 0.03, 0.1))]}
    assert grid_edge_warning(at_bound).startswith("1 of 1 tuned configurations chose a bound of the tuning ladder")
    inside = {"tuning": [real, row("damcha on the regression task at 0", 0.003, metric="relative_mse")]}
    assert grid_edge_warning(inside) is None
    assert rate_edges_sentence(inside) == ("All 2 tuned configurations (1 real-data runs, 1 synthetic models at a level) "
                                           "chose a rate inside the rates they tried.")
    assert rate_edges_sentence(doc) == grid_edge_warning(doc)  # the docs say what the page warns
    assert [r["scored by"] for r in tuning_rows(inside)] == ["hold-out loss", "validation relative_mse"]
