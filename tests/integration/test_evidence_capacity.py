"""Matched capacity: every counted comparison whose arms differ by more than 1.5x in parameters sits in a claim
that also compares its reference with an arm matched to the reference's count (MHA widened, a shallow f widened),
so a gain of capacity shows against the reference."""

import pytest

import damcha.inputs.synthetic as syn
from damcha.evidence.capacity import model_parameters
from damcha.evidence.catalogue import claims
from damcha.evidence.catalogue.common import DEPTH_1_AT_DEPTH_5, F_DEPTHS
from damcha.evidence.results import summarise
from damcha.evidence.runner import arm_parameters
from tests.support.evidence_values import made_up_values

RATIO = 1.5


def _synthetic_parameters(model: str) -> int:
    return sum(p.numel() for p in syn.OneLayer(model, 1).parameters())


def _parameters(claim) -> dict[str, int]:
    counts = arm_parameters(claim)
    counts.update({a.name: _synthetic_parameters(a.variant) for a in claim.arms if a.kind == "synthetic"})
    return counts


def _apart(a: int, b: int) -> float:
    return max(a, b) / min(a, b)


def test_no_counted_comparison_of_unequal_capacity_lacks_a_matched_arm():
    seen = 0
    for claim in claims(False):  # (a smoke run's claims are a subset of these arms)
        counts = _parameters(claim)
        comparisons = summarise(claim, made_up_values(claim))["comparisons"]
        compared = {(c["better"], c["than"]) for c in comparisons}
        for c in comparisons:
            if not (c["counted"] and c["better"] in counts and c["than"] in counts):
                continue
            if _apart(counts[c["better"]], counts[c["than"]]) <= RATIO:
                continue
            seen += 1
            group = next((g for g in claim.groups if c["better"] == g[0] and c["than"] in g), None)
            candidates = [m for m in claim.matched_arms if group is None or m in group]
            matched = [m for m in candidates if _apart(counts[m], counts[c["better"]]) <= RATIO
                       and (c["better"], m) in compared]
            assert matched, (claim.key, c["better"], c["than"], "no arm matched to the reference's parameters")
    assert seen > 10  # the rule has comparisons to hold (DAMCHA holds about 6x MHA's parameters on digits)


def test_the_depth_1_f_is_widened_to_the_5_layer_fs_parameter_count():
    target = model_parameters("damcha", "digits", (("generator_widths", F_DEPTHS[5]),))
    counts = {w: model_parameters("damcha", "digits", (("generator_widths", (w,)),)) for w in range(64, 400, 8)}
    assert DEPTH_1_AT_DEPTH_5 == (min(counts, key=lambda w: abs(counts[w] - target)),)
    assert _apart(counts[DEPTH_1_AT_DEPTH_5[0]], target) < 1.05


@pytest.mark.parametrize("outputs", [1, 15, 32, 64])
def test_the_synthetic_tasks_matched_mha_holds_damchas_parameters(outputs):
    def count(model):
        return sum(p.numel() for p in syn.OneLayer(model, outputs).parameters())

    assert _apart(count("mha-matched"), count("damcha")) < 1.02
    assert _apart(count("mha"), count("damcha")) > 25  # what it is matched against
