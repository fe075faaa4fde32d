"""The cost table and the budget it gives (damcha.evidence.costs): each run costed at its own configuration's
measured step on the named device, every run without one named, never costed at another arm's rate."""

import json
import math
from pathlib import Path

import pytest
import torch

from damcha.__main__ import main
from damcha.evidence import costs
from damcha.evidence.costs import (
    SHIPPED_TABLE,
    CostTable,
    budget,
    budget_lines,
    generated_setting,
    measure_step,
    planned_row_keys,
    planned_runs,
    scale_claims_chosen,
    uncosted,
)
from damcha.evidence.scales import TINY
from damcha.inputs.datasets.generated import write_standard_format_files

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "a test device"


@pytest.fixture(scope="module")
def tiny():
    with generated_setting(TINY) as setting:
        yield setting, scale_claims_chosen(setting)


def test_a_tiny_run_walks_its_epochs_steps_and_a_shared_run_is_counted_once(tiny):
    setting, claims = tiny
    runs = list(planned_runs(setting, claims, 2))
    assert len({r.run for r in runs}) == len(runs)
    table4 = [r for r in runs if r.claim == "table4_ablations@cifar10-pixels"]
    assert "damcha" not in {r.arm for r in table4}  # its DAMCHA runs are Table 1's, counted there
    steps = {r.claim.split("@")[1]: r.steps for r in runs}
    cifar, corpus = TINY.place("cifar10-pixels").train, TINY.place("enwik8").train
    assert steps["cifar10-pixels"] == cifar["epochs"] * math.ceil(TINY.place("cifar10-pixels").train_samples / cifar["batch_size"])
    assert steps["enwik8"] == corpus["epochs"] * corpus["steps_per_epoch"]


def test_the_budget_costs_each_run_at_its_own_step_and_names_every_run_it_cannot_cost(tiny):
    setting, claims = tiny
    runs = list(planned_runs(setting, claims, 2))
    kinds = list(dict.fromkeys(r.kind for r in runs))
    seconds = {kind: 0.01 * (i + 1) for i, kind in enumerate(kinds[:-2])}  # the last two kinds: one not
    table = CostTable({DEVICE: {"rows": [{**k.row_key(), "step_seconds": s} for k, s in seconds.items()]
                                + [{**kinds[-2].row_key(), "does_not_fit": "too large"}]}})  # measured, one unmeasured
    rows = {r["claim"]: r for r in budget(setting, claims, 2, table, DEVICE)}
    for claim in rows:
        mine = [r for r in runs if r.claim == claim]
        assert rows[claim]["runs"] == len(mine)
        assert rows[claim]["hours"] == pytest.approx(sum(r.steps * seconds[r.kind] / 3600 for r in mine if r.kind in seconds))
        unmeasured = {r.arm for r in mine if r.kind == kinds[-1]}
        assert set(rows[claim]["unmeasured"]) == unmeasured
        assert set(rows[claim]["does_not_fit"]) == {r.arm for r in mine if r.kind == kinds[-2]}
    assert uncosted(list(rows.values())) == sum(r.kind in kinds[-2:] for r in runs)
    said = "\n".join(budget_lines(list(rows.values()), DEVICE, table, TINY))
    assert "not measured on a test device" in said and "python -m damcha costs --scale tiny" in said
    assert "does not fit the device" in said

    on_another = budget(setting, claims, 2, table, "another device")  # the rates of one device never cost another's
    assert all(r["hours"] == 0 and sum(r["unmeasured"].values()) == r["runs"] for r in on_another)


def test_a_step_is_timed_for_real_and_a_run_the_memory_rule_refuses_is_recorded_as_not_fitting(tiny, monkeypatch):
    setting, claims = tiny
    kind = next(r.kind for r in planned_runs(setting, claims, 1) if r.claim == "table5_text@enwik8")
    row = measure_step(kind, torch.device("cpu"), repeats=2)
    assert row["timed_steps"] == 2 and row["spread"][0] <= row["step_seconds"] <= row["spread"][1]
    assert row["step_seconds"] > 0
    assert row["micro_batch"] == kind.batch  # the whole batch at once where it fits
    monkeypatch.setattr(costs, "device_memory", lambda device: 1)
    assert "does_not_fit" in measure_step(kind, torch.device("cpu"))


def test_the_costs_command_writes_this_devices_rows_and_keeps_the_others(tmp_path, capsys):
    table = tmp_path / "costs.json"
    CostTable({"elsewhere": {"rows": [{"config": {}, "batch": 1, "precision": "fp32", "compiled": False,
                                       "step_seconds": 1.0}]}}).write(table)
    assert main(["costs", "--scale", "tiny", "--only", "table5_text@text8", "--repeats", "1", "--table", str(table)]) == 0
    written = json.loads(table.read_text())["devices"]
    mine = next(d for d in written if d.startswith("CPU "))
    assert mine.endswith(", 1 thread") and "elsewhere" in written
    assert {a for r in written[mine]["rows"] for a in r["arms"]} == {"table5_text@text8: damcha", "table5_text@text8: mha",
                                                                    "table5_text@text8: MHA at DAMCHA's parameters"}
    assert "wrote 3 step kinds" in capsys.readouterr().out
    table.write_text("{not json")
    assert main(["costs", "--scale", "tiny", "--table", str(table)]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_the_budget_is_held_to_only_where_every_run_is_costed(tmp_path, capsys):
    data = tmp_path / "data"
    write_standard_format_files(data)
    base = ["evidence", "--scale", "tiny", "--data-dir", str(data), "--out", str(tmp_path / "out"), "--budget", "0"]
    assert main([*base, "--cost-device", "nowhere"]) == 2
    said = capsys.readouterr()
    assert "--budget cannot be held to: 28 run(s) have no measured cost on nowhere" in said.err
    assert "not measured on nowhere" in said.out
    with generated_setting(TINY) as setting:
        kinds = {r.kind for r in planned_runs(setting, scale_claims_chosen(setting), 2)}
    table = tmp_path / "costs.json"
    CostTable({DEVICE: {"rows": [{**k.row_key(), "step_seconds": 1.0} for k in kinds]}}).write(table)
    assert main([*base, "--cost-table", str(table), "--cost-device", DEVICE]) == 2
    assert "more than --budget 0" in capsys.readouterr().err
    assert not (tmp_path / "out" / "work").exists()  # refused before anything trained
    assert main(["evidence", "--budget", "1"]) == 2
    assert "--budget applies with --scale" in capsys.readouterr().err


@pytest.mark.slow  # plans every scale's runs: 12 s (the slow tier runs it)
def test_every_shipped_row_is_a_step_the_scales_plan_now():
    """A row whose configuration no claim trains any more (the code changed) is stale: measure again, or drop it
    (`damcha costs --drop-stale`)."""
    table = CostTable.read(SHIPPED_TABLE)
    planned = planned_row_keys()
    assert not table.without(planned)[1], [(device, row["arms"]) for device, row in table.without(planned)[1]]


def test_a_time_limit_writes_what_was_timed_and_missing_only_goes_on_with_the_rest(tmp_path, capsys):
    """A lent GPU's call is 10 minutes: each call times what the table lacks until its limit, and says what is left."""
    table = tmp_path / "costs.json"
    base = ["costs", "--scale", "tiny", "--only", "table5_text@text8", "--repeats", "1", "--table", str(table)]
    assert main([*base, "--time-limit", "0.001"]) == 0  # the first kind is always timed, then the limit is passed
    assert "2 step kind(s) not timed within --time-limit 0.001" in capsys.readouterr().out
    rows = lambda: next(iter(json.loads(table.read_text())["devices"].values()))["rows"]  # noqa: E731
    assert len(rows()) == 1
    assert main([*base, "--missing-only", "--time-limit", "0.001"]) == 0 and len(rows()) == 2
    assert main([*base, "--missing-only"]) == 0 and len(rows()) == 3
    assert "wrote 1 step kinds" in capsys.readouterr().out
    assert main([*base, "--missing-only"]) == 0 and "nothing to time" in capsys.readouterr().out
    assert len({json.dumps([r["config"], r["batch"]], sort_keys=True) for r in rows()}) == 3  # each kind once
    for flags, said in ((["--missing-only", "--replace"], "give one"), (["--time-limit", "0"], "a positive number")):
        assert main([*base, *flags]) == 2 and said in capsys.readouterr().err


def test_drop_stale_removes_the_rows_no_claim_plans_and_keeps_every_other(tmp_path, capsys):
    """The rows of a configuration the code no longer trains (here: the paper scale's before its f had 9 layers and
    its batch 128) are named and removed, on every device; the rows still planned stay as they were."""
    with generated_setting(TINY) as setting:
        current = next(r.kind for r in planned_runs(setting, scale_claims_chosen(setting, ["table5_text@text8"]), 1))
    now = {**current.row_key(), "step_seconds": 0.5, "arms": ["table5_text@text8: damcha"]}
    old = {**now, "batch": 16, "arms": ["table5_text@enwik8: damcha"], "measured": "2026-11-30"}
    path = tmp_path / "costs.json"
    CostTable({"a GPU": {"rows": [old, now]}, "a CPU": {"rows": [now]}}).write(path)
    assert main(["costs", "--drop-stale", "--table", str(path)]) == 0
    out = capsys.readouterr().out
    assert "dropped a GPU: table5_text@enwik8: damcha (measured 2026-11-30)" in out and "1 row(s)" in out
    assert CostTable.read(path).devices == {"a GPU": {"rows": [now]}, "a CPU": {"rows": [now]}}
    assert main(["costs", "--drop-stale", "--scale", "tiny", "--table", str(path)]) == 2
    assert "--drop-stale times nothing" in capsys.readouterr().err
    assert main(["costs", "--table", str(path)]) == 2
    assert "--scale is required" in capsys.readouterr().err


def test_a_device_not_on_this_machine_is_costed_by_name_or_refused_in_words(tmp_path, capsys):
    """From a login node without the units' GPU: the budget names what to give (--cost-device), each unit
    checks its memory on its node; the local launcher is refused the device outright; a cost table that is
    not there is refused, not silently left out."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the case is a machine without one")
    data = tmp_path / "data"
    write_standard_format_files(data)
    base = ["evidence", "--scale", "tiny", "--data-dir", str(data), "--out", str(tmp_path / "out"), "--device", "cuda"]
    assert main([*base, "--launcher", "slurm", "--budget", "1"]) == 2
    said = capsys.readouterr()
    assert "--budget cannot be held to: 28 run(s) have no measured cost on a GPU not on this machine (name it with " \
           "--cost-device)" in said.err
    assert "each unit checks that its run fits on its node" in said.out
    assert main(base) == 2
    assert "--device cuda: no such device on this machine" in capsys.readouterr().err
    assert main([*base[:-2], "--cost-table", str(tmp_path / "absent.json")]) == 2
    assert f"--cost-table {tmp_path / 'absent.json'}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out" / "work").exists()


def test_the_costs_commands_threads_and_repeats_are_honoured_and_torchs_threads_given_back(tmp_path):
    table = tmp_path / "costs.json"
    threads = torch.get_num_threads()
    assert main(["costs", "--scale", "tiny", "--only", "table5_text@text8", "--threads", "2", "--repeats", "2",
                 "--table", str(table)]) == 0
    assert torch.get_num_threads() == threads  # the calling process keeps its own
    (device, entry), = json.loads(table.read_text())["devices"].items()
    assert device.endswith(", 2 threads")
    assert [r["timed_steps"] for r in entry["rows"]] == [2, 2, 2]


def test_a_rerun_into_a_table_replaces_this_devices_rows_only_when_asked_and_says_so(tmp_path, capsys):
    table = tmp_path / "costs.json"
    command = ["costs", "--scale", "tiny", "--only", "table5_text@text8", "--repeats", "1", "--table", str(table)]
    assert main(command) == 0
    first = table.read_bytes()
    rows = json.loads(first)["devices"]
    (device, entry), = rows.items()
    for row in entry["rows"]:  # what each row was measured under, beside it
        assert row["threads"] == 1 and row["load_per_core"] >= 0 and len(row["measured"]) == 10
    assert "load per core up to" in capsys.readouterr().out
    assert main(command) == 2
    said = capsys.readouterr().err
    assert f"{table} already holds 3 of these 3 step kinds measured on {device}" in said and "--replace" in said
    assert table.read_bytes() == first  # refused before anything was timed or written
    assert main([*command, "--replace"]) == 0
    assert "replacing 3 rows measured before" in capsys.readouterr().out


@pytest.mark.parametrize("flags, words", [
    (["--threads", "-4"], "--threads -4: a step runs on at least one thread"),
    (["--threads", "0"], "--threads 0: a step runs on at least one thread"),
    (["--repeats", "0"], "--repeats 0: at least one timed step is needed"),
    (["--device", "banana"], "--device 'banana': cpu, cuda or cuda:N"),
    (["--only", "table6_classification"], "--only table6_classification: no claim at --scale tiny trains a run there"),
])
def test_the_costs_command_refuses_what_it_cannot_time_in_words_and_writes_nothing(tmp_path, capsys, flags, words):
    table = tmp_path / "costs.json"
    assert main(["costs", "--scale", "tiny", "--table", str(table), *flags]) == 2
    assert words in capsys.readouterr().err
    assert not table.exists()
