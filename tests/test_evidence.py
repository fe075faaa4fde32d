"""The evidence machinery: the verdict rule, the synthetic tasks, the command (resumable) and the page."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from damcha.evidence import FAILS, HOLDS, INCONCLUSIVE, SANITY_FAILED, claim_verdict, mean_interval, summarise, verdict
from damcha.synthetic import (
    classification_labels,
    cross_head_share,
    inputs,
    label_balance,
    regression_task,
    subspace,
    teacher_metric,
    teacher_sanity,
)

ROOT = Path(__file__).resolve().parent.parent


def test_verdict_rule_on_constructed_inputs():
    assert verdict([0.10, 0.12, 0.11])[0] == HOLDS  # a clear win in the paper's direction
    assert verdict([-0.10, -0.12, -0.11])[0] == FAILS  # a clear loss
    assert verdict([0.2, -0.1, 0.05])[0] == INCONCLUSIVE  # the interval contains zero
    assert verdict([0.3])[0] == INCONCLUSIVE  # one seed has no interval
    m, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert claim_verdict([HOLDS, HOLDS]) == HOLDS and claim_verdict([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert claim_verdict([HOLDS, FAILS]) == FAILS


@pytest.mark.parametrize("e", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_teacher_metric_holds_exactly_its_entanglement_share(e):
    assert cross_head_share(teacher_metric(e, seed=3)) == pytest.approx(e, abs=1e-6)
    assert torch.equal(teacher_metric(e, 3), teacher_metric(e, 3))


def test_regression_teacher_is_deterministic_calibrated_and_learnable_from_its_own_attention():
    task = regression_task(0.5, seed=4)
    again = regression_task(0.5, seed=4)
    assert task.beta == again.beta and torch.equal(task.W, again.W)
    torch.testing.assert_close(task.W @ task.W.T, torch.eye(task.W.shape[0]), atol=1e-5, rtol=0)
    p = task.attention(inputs(256, 9))
    entropy = float(-(p * p.log()).sum(-1).mean())
    assert entropy == pytest.approx(0.5 * math.log(p.shape[-1]), rel=0.05)
    assert teacher_sanity(0.5) < 1e-6


def test_classification_labels_are_balanced_and_defined_in_the_subspace():
    share = label_balance(4)
    assert share.sum() == pytest.approx(1.0) and share.max() < 1 / 15 + 0.02 and share.min() > 1 / 15 - 0.02
    x = inputs(64, 5)
    U = subspace(32, 0)  # the whole space: the best match by plain dot product
    z = x[:, 1:] @ x[:, 0, :, None]
    assert torch.equal(classification_labels(x, U), z.squeeze(-1).argmax(-1))
    assert np.array_equal(label_balance(4), label_balance(4))


def test_evidence_command_runs_resumes_and_the_page_reads_it(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "damcha", "evidence", "--quick", "--out", str(out), "--work", str(work)]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    doc = json.loads((out / "results.json").read_text())
    assert [c["key"] for c in doc["claims"]] == ["table1_digits", "table4_ablations", "table3_modes", "adaptivity",
                                                 "fig12_regression", "fig13_classification"]
    assert 0 < doc["units_computed_in_this_call"] <= doc["units"]  # an arm shared by two claims runs once
    for claim in doc["claims"]:
        assert claim["verdict"] in (HOLDS, FAILS, INCONCLUSIVE, SANITY_FAILED)
        assert all(len(v) == 2 for v in claim["values"].values())
    units = (work / "units.jsonl").read_text().splitlines()
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and (work / "units.jsonl").read_text().splitlines() == units  # nothing redone
    assert json.loads((out / "results.json").read_text())["units_computed_in_this_call"] == 0
    assert (out / "adaptivity.csv").read_text().startswith("arm,seed,value")


def test_the_page_renders_the_shipped_results_without_training():
    from streamlit.testing.v1 import AppTest

    shipped = json.loads((ROOT / "checkpoints" / "evidence" / "results.json").read_text())
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120)
    at.switch_page("../pages/evidence.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [h.value for h in at.header] == [c["title"] for c in shipped["claims"]]
    assert len(at.get("plotly_chart")) == len(shipped["claims"])


def test_a_failed_sanity_check_withholds_the_verdict():
    from damcha.evidence import Arm, Claim

    claim = Claim("c", "t", "s", "relative_mse", True, (Arm("mha e=0.0"), Arm("damcha e=0.0")), "",
                  verdict_against="mha ", groups=(("mha e=0.0", "damcha e=0.0"),),
                  sanity=(("mha e=0.0", "damcha e=0.0"), 0.2, "below"))
    learned = summarise(claim, {"mha e=0.0": [0.10, 0.11, 0.12], "damcha e=0.0": [0.05, 0.06, 0.05]})
    assert learned["verdict"] == HOLDS and not learned["sanity_failures"]
    unlearned = summarise(claim, {"mha e=0.0": [0.50, 0.51, 0.52], "damcha e=0.0": [0.30, 0.31, 0.30]})
    assert unlearned["verdict"] == SANITY_FAILED and len(unlearned["sanity_failures"]) == 2
