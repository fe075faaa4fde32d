"""Readings the Evidence page sets beside the numbers, computed from them."""

from pathlib import Path

from damcha.evidence.documents import load_results
from damcha.evidence.view import IMPLEMENTATION_BOUND, implementation_bound_sentence, summary_pair_sentence

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


def test_a_claims_summary_pairs_are_worded_at_every_level_with_how_sure_each_is():
    pair = "w/o f(x) against DAMCHA (does f train?)"
    claim = {"metric": "accuracy", "summary_pairs": [pair], "comparisons": [
        {"better": "s e=0", "than": "d e=0", "gain": 0.46, "low": -0.55, "high": 1.48, "measures": pair},
        {"better": "s e=1", "than": "d e=1", "gain": 0.10, "low": 0.01, "high": 0.20, "measures": pair},
        {"better": "x", "than": "y", "gain": 0.5, "low": 0.4, "high": 0.6, "measures": "another pair"}]}
    said = summary_pair_sentence(claim)
    assert "s e=0 nominally ahead of d e=0 (+0.46 [-0.55, +1.48])" in said and "s e=1 ahead of d e=1" in said
    assert "x ahead" not in said and summary_pair_sentence({**claim, "summary_pairs": []}) is None


def test_the_identity_start_is_an_arm_beside_the_default_and_never_counted():
    from damcha.evidence.catalogue import claims
    from damcha.evidence.results import summarise
    from tests.support.evidence_values import made_up_values

    started = 0
    for claim in claims(False):
        identity = {a.name for a in claim.arms if a.variant == "damcha-identity"
                    or ("generator_start", "identity") in a.overrides}
        started += bool(identity)
        for c in summarise(claim, made_up_values(claim))["comparisons"]:
            assert not (c["counted"] and {c["better"], c["than"]} & identity), (claim.key, c["better"], c["than"])
    assert started == 7  # Fig. 12, Fig. 13, the knob, Table 1 on digits and on colour images, Tables 4 and 5
    shipped = {c["key"]: c for c in load_results(ROOT / "checkpoints" / "evidence")["claims"]}
    assert "damcha-static e=1.0 ahead of damcha e=1.0" in summary_pair_sentence(shipped["fig13_entanglement"])


def test_the_record_caption_names_the_reused_documents_compute_and_the_machine():
    from damcha.evidence.view import record_caption

    shipped = load_results(ROOT / "checkpoints" / "evidence")
    if shipped.get("reused_from"):  # the shipped results took units over (Table 2 re-timed): the caption says so
        assert f"{shipped['reused_units']} units taken over from earlier results" in record_caption(shipped)
    shipped = {k: v for k, v in shipped.items() if k not in ("reused_from", "reused_units")}  # as one fresh run
    shipped["units_computed_in_this_call"] = shipped["units"]
    said = record_caption(shipped)
    assert "taken over" not in said and "earlier document" not in said
    assert f"CPU kernels {shipped['machine']['cpu_kernels']}" in said and said.startswith(f"`{shipped['command']}`")
    first = {"command": "python -m damcha evidence --work a", "wall_seconds_all_calls": 8403.9, "compute_seconds": 16456.0}
    second = {"command": "python -m damcha evidence --reuse x", "wall_seconds_all_calls": 740.8, "compute_seconds": 728.8,
              "machine": {**shipped["machine"], "cpu": "another CPU"}, "reused_from": first}
    composed = record_caption({**shipped, "reused_units": 500, "reused_from": second})
    assert ("500 units taken over from earlier results (`--reuse`), computed over 2 earlier document(s) in 9144.7 s of "
            "wall time and 17184.8 s of compute (the first by `python -m damcha evidence --work a`)") in composed
    assert "units taken over ran on another CPU (one not recorded, another CPU)" in composed
    assert "smoke test" in record_caption({**shipped, "quick": True}) and "smoke test" not in said
    assert shipped["units_computed_in_this_call"] == shipped["units"] and "resumed" not in said  # (every unit here)
    assert f"for 10 of {shipped['units']} units (the others resumed)" in record_caption(
        {**shipped, "units_computed_in_this_call": 10})
