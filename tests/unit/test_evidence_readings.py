"""Readings the Evidence page sets beside the numbers, computed from them."""

from pathlib import Path

from damcha.evidence.results import load_results
from damcha.evidence.view import IMPLEMENTATION_BOUND, implementation_bound_sentence

ROOT = Path(__file__).resolve().parents[2]


def _claim(times: dict[str, tuple[float, float]]) -> dict:
    return {"arms": {arm: [arm, "efficiency"] for arm in times} | {"bar": ["bar", "constant"]},
            "details": [{"arm": arm, "metric": metric, "mean": value} for arm, (t, f) in times.items()
                        for metric, value in (("time_ratio", t), ("flops_ratio", f))]
            + [{"arm": "bar", "metric": "time_ratio", "mean": 1.2}, {"arm": "bar", "metric": "flops_ratio", "mean": 0.1}]}


def test_an_arm_slowed_by_its_implementation_is_named_with_its_numbers_and_the_others_spread():
    said = implementation_bound_sentence(_claim({"damcha": (6.5, 10.0), "slow": (8.0, 1.5), "tha": (2.2, 1.25)}))
    assert said.startswith("slow takes 8x MHA's time for 1.5x its FLOPs (5.3x MHA's time per FLOP)")
    assert "every other arm is within 1.8x" in said and "damcha takes" not in said and "bar" not in said
    assert implementation_bound_sentence(_claim({"a": (IMPLEMENTATION_BOUND * 0.99, 1.0)})) is None
    assert implementation_bound_sentence({"arms": {}, "details": []}) is None


def test_the_shipped_table_2_reads_dcmha_on_flops():
    shipped = {c["key"]: c for c in load_results(ROOT / "checkpoints" / "evidence")["claims"]}
    said = implementation_bound_sentence(shipped["table2_efficiency"])
    assert said is not None and said.startswith("dcmha takes")
    assert all(implementation_bound_sentence(c) is None for key, c in shipped.items() if key != "table2_efficiency")
