"""What the arms can represent decides a comparison the same way on both sides: a construction check
when only one arm can represent the task there, whichever side it favours; reported, never counted, when
neither can; a learned result only when both can."""

import pytest

from damcha.evidence.catalogue import claims
from damcha.evidence.records import Arm, Claim
from damcha.evidence.results import UNREPRESENTED, representability_checks, summarise
from damcha.evidence.statistics import CONFIRMED
from tests.support.evidence_values import made_up_values


@pytest.mark.parametrize("quick", [False, True])
def test_no_counted_comparison_of_any_claim_is_decided_by_representability(quick):
    declared = 0
    for claim in claims(quick):
        result = summarise(claim, made_up_values(claim))
        for c in result["comparisons"]:
            fixed = claim.representability(c["better"], c["than"])
            declared += fixed is not None
            assert not (c["counted"] and fixed is not None), (claim.key, c["better"], c["than"], fixed)
            if fixed in ("ahead", "behind") and claim.counts(c["than"]) and not c["control"] and not c.get("measures"):
                assert c.get("construction") == fixed, (claim.key, c["better"], c["than"])
            if fixed == "neither":
                assert c.get("not_counted") == UNREPRESENTED
    assert declared > 0  # the synthetic tasks declare what their arms can represent


def _toy(represents: dict, against=("mha", "damcha-static")) -> Claim:
    arms = (Arm("damcha"), Arm("mha", variant="mha"), Arm("damcha-static", variant="damcha-static"))
    return Claim("toy", "t", "s", "loss", True, arms, "damcha", verdict_against=against, represents=represents)


TOY_VALUES = {"damcha": [{"loss": v} for v in (0.10, 0.12, 0.11)], "mha": [{"loss": v} for v in (0.9, 0.8, 0.85)],
              "damcha-static": [{"loss": v} for v in (0.5, 0.55, 0.52)]}


def test_the_rule_is_the_same_whichever_side_representability_favours():
    for_damcha = summarise(_toy({"damcha": True, "mha": False}), TOY_VALUES)  # w/o f(x) not declared: learned
    against_damcha = summarise(_toy({"damcha": False, "mha": True}), TOY_VALUES)
    for result, predicted in ((for_damcha, "ahead"), (against_damcha, "behind")):
        (check,) = result["construction_checks"]
        assert (check["than"], check["predicted"]) == ("mha", predicted)
        assert [c["than"] for c in result["comparisons"] if c["counted"]] == ["damcha-static"]
        assert result["verdict_kind"] == "learned"
    assert for_damcha["construction_checks"][0]["outcome"] == "confirmed"
    assert against_damcha["construction_checks"][0]["outcome"] == "not confirmed"  # DAMCHA won what it cannot represent


def test_a_comparison_where_neither_arm_represents_the_task_is_reported_never_counted():
    neither = summarise(_toy({"damcha": False, "mha": False, "damcha-static": False}), TOY_VALUES)
    assert not any(c["counted"] for c in neither["comparisons"]) and not neither["construction_checks"]
    assert all(c["not_counted"] == UNREPRESENTED for c in neither["comparisons"])
    both = summarise(_toy({"damcha": True, "mha": True, "damcha-static": True}), TOY_VALUES)
    assert [c["than"] for c in both["comparisons"] if c["counted"]] == ["mha", "damcha-static"]
    undeclared = summarise(_toy({}), TOY_VALUES)
    assert [c["than"] for c in undeclared["comparisons"] if c["counted"]] == ["mha", "damcha-static"]


def test_only_construction_checks_left_make_a_verdict_by_construction():
    result = summarise(_toy({"damcha": False, "mha": True, "damcha-static": False}), {
        **TOY_VALUES, "damcha": [{"loss": v} for v in (2.0, 2.1, 2.05)]})
    assert result["verdict"] == CONFIRMED and result["verdict_kind"] == "by construction"


def test_the_within_slice_task_counts_what_f_learns_and_checks_what_representability_fixes():
    claim = next(c for c in claims(False) if c.key == "within_slice_codes")
    checks = {(c.better, c.than): c.predicted for c in representability_checks(claim)}
    assert checks == {("damcha K=4", "mha K=4"): "ahead", ("damcha K=4", "damcha-static K=4"): "ahead",
                      ("damcha K=16", "mha K=16"): "ahead", ("damcha K=16", "damcha-static K=16"): "ahead"}
    counted = [(c["better"], c["than"]) for c in summarise(claim, made_up_values(claim))["comparisons"] if c["counted"]]
    bound = next(a.name for a in claim.arms if a.kind == "constant")
    assert counted == [("damcha K=4", bound), ("damcha K=16", bound)]


def test_the_shipped_results_read_the_synthetic_tasks_by_the_rule():
    from pathlib import Path

    from damcha.evidence.documents import load_results
    from damcha.evidence.view import unrepresented_comparisons

    shipped = {c["key"]: c for c in load_results(Path(__file__).resolve().parents[2] / "checkpoints" / "evidence")["claims"]}
    permutation, within = shipped["permutation_relations"], shipped["within_slice_codes"]
    assert permutation["verdict_kind"] == "by construction" and not any(c["counted"] for c in permutation["comparisons"])
    assert {"damcha K=4 vs mha K=4", "damcha K=24 vs mha K=24", "damcha K=1 vs damcha-static K=1"} <= \
        set(unrepresented_comparisons(permutation))
    assert within["verdict"] == "holds" and within["verdict_kind"] == "learned"
    assert all(c["than"].startswith("learns the codes") for c in within["comparisons"] if c["counted"])
    assert not unrepresented_comparisons(within)
