"""A results document names the CPU model its units ran on: the same torch CPU kernels (AVX512) on two
models rounded differently (docs/evidence.md, "What reproduces where")."""

import json
from pathlib import Path

from damcha.evidence.runner import cpu_model
from damcha.evidence.view import record_caption

SHIPPED = Path(__file__).parents[2] / "checkpoints" / "evidence" / "results.json"


def test_the_cpu_model_is_read_from_the_first_processor_and_missing_info_is_an_empty_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                    "model name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\n\nprocessor\t: 1\nmodel\t\t: 1\n")
    assert cpu_model(info) == "GenuineIntel family 6 model 143 stepping 8 (Intel(R) Xeon(R) Platinum 8480+)"
    assert cpu_model(tmp_path / "absent") == ""


def test_the_page_names_the_cpu_model_beside_the_kernels():
    machine = {"architecture": "x86_64", "cpu_kernels": "AVX512", "cpu": "GenuineIntel family 6 model 143 stepping 8 (X)",
               "threads_per_unit": 1, "of": "the machine the units ran on"}
    line = record_caption({**json.loads(SHIPPED.read_text()), "machine": machine})
    assert "CPU kernels AVX512 on x86_64, GenuineIntel family 6 model 143 stepping 8 (X)" in line
    assert "same CPU model" in line


def test_units_taken_over_from_another_cpu_are_said_to_be():
    doc = json.loads(SHIPPED.read_text())
    here = {"architecture": "x86_64", "cpu_kernels": "AVX512", "cpu": "GenuineIntel family 6 model 167 stepping 1 (X)",
            "threads_per_unit": 1, "of": "the machine the units ran on"}
    earlier = {"command": "first", "machine": {**here, "cpu": "GenuineIntel family 6 model 143 stepping 8 (Y)"}}
    said = record_caption({**doc, "machine": here, "reused_units": 5, "reused_from": earlier})
    assert "units taken over ran on another CPU (GenuineIntel family 6 model 143 stepping 8 (Y))" in said
    assert "another CPU" not in record_caption({**doc, "machine": here, "reused_units": 5,
                                                "reused_from": {**earlier, "machine": here}})


def test_the_reproduction_sentence_says_reported_values_apart_from_the_fits_that_choose_a_rate():
    from damcha.evidence.view import reproduction_sentence

    def row(metric, stored, here):
        return {"metric": metric, "stored": stored, "here": here, "identical": stored == here,
                "relative_difference": abs(here - stored) / abs(stored)}
    report = {"recomputed_on": {"cpu": "B", "cpu_kernels": "AVX512"}, "stored_on": {"cpu_kernels": "AVX512"}, "units": [
        {"kind": "train", "values": [row("val_nll", 1.0, 1.0), row("val_mse", 2.0, 2.002)], "same_rate_chosen": True},
        {"kind": "synthetic", "values": [row("accuracy", 0.5, 0.5), row("validation_accuracy_lr=0.003", 0.25, 0.5)],
         "same_rate_chosen": False}]}
    said = reproduction_sentence(report)
    assert "(B, torch kernels AVX512; stored on a CPU not recorded, torch kernels AVX512)" in said
    assert "1 real-data units, every metric: 1 of 2 identical to the last bit" in said and "largest 1.0e-03 (val_mse 2 stored, 2.002 here)" in said
    assert "1 synthetic units, the test score: 1 of 1 identical" in said
    assert "validation scores (which choose the rate): 0 of 1 identical to the last bit, relative difference median 1.0e+00" in said
    assert said.endswith("; 1 synthetic unit(s) chose another rate here.")


def test_a_fresh_runs_cost_is_estimated_from_every_calls_recorded_compute():
    from damcha.evidence.view import fresh_run_sentence

    doc = {"compute_seconds": 3600.0, "reused_from": {"compute_seconds": 10800.0, "reused_from": {"compute_seconds": 0.0}}}
    said = fresh_run_sentence(doc)
    assert ("The calls that made these results spent 14,400 s of compute in all, so a run from an empty work folder "
            "on 2 one-thread workers needs at most about 2.0 hours of wall time") in said
    composed = {**doc, "units": 800, "reused_units": 300}
    assert fresh_run_sentence(composed).startswith(
        "The last call's work folder computed 500 of the 800 units these results use (3,600 s of compute) and took "
        "300 over from an earlier document, whose calls record 10,800 s. The calls that made these results spent 14,400 s")
    one_call = {"units": 700, "reused_units": 0, "compute_seconds": 13000.0,
                "calls": [{"wall_seconds": 7000.4, "units_computed": 700, "workers": 2}]}
    assert fresh_run_sentence(one_call) == ("One call from an empty work folder computed every unit these results use "
                                            "(700 units, nothing taken over): 7,000 s (117 minutes) of wall time on 2 "
                                            "one-thread workers, 13,000 s of compute summed over them, measured.")
    resumed = {**one_call, "calls": [*one_call["calls"], {"wall_seconds": 600.0, "units_computed": 0, "workers": 2}]}
    assert fresh_run_sentence(resumed).startswith("2 calls over one work folder, begun empty, computed "
                                                  "every unit these results use (700 units, nothing taken over): 7,600 s "
                                                  "(127 minutes) of wall time")  # a resumed run: its calls' time summed
    taken_over = {**resumed, "reused_units": 100}
    assert "spent 13,000 s of compute in all" in fresh_run_sentence(taken_over)  # units taken over: an estimate
