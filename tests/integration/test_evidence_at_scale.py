"""`evidence --scale tiny`: the paper-scale path end to end on generated files in the standard formats,
resumed, restated, and under torchrun on two Gloo processes."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from damcha.evidence.statistics import FAILS, HOLDS, INCONCLUSIVE, NO_VERDICT, SANITY_FAILED
from damcha.inputs.datasets.generated import write_standard_format_files

ROOT = Path(__file__).resolve().parents[2]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_the_tiny_scale_runs_the_paper_path_end_to_end(tmp_path):
    data = tmp_path / "data"
    write_standard_format_files(data, images_per_batch=12)  # 54 training images of 1024 pixel tokens: 4 batches
    before = _files(tmp_path)
    out = tmp_path / "evidence-tiny"
    cmd = [sys.executable, "-m", "damcha", "evidence", "--scale", "tiny", "--data-dir", str(data), "--out", str(out),
           "--workers", "1"]
    env = {k: v for k, v in os.environ.items() if k != "DAMCHA_CACHE"}
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert first.returncode == 0, first.stderr
    assert "device-hours" in first.stdout and "standard files: no" in first.stdout  # the budget, before it starts
    plan = {(r["claim"], r["arm"]): r["micro_batch"] for r in json.loads((out / "results.json").read_text())["memory"]}
    rows_at_once = sorted(set(plan.values()))  # every run's whole batch at once on this machine: 8 text, 16 images
    assert rows_at_once == [8, 16] and "each step's batch in micro-batches of 8 to 16 rows" in first.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["scale"] == "tiny" and doc["complete"]
    assert sum(r["runs"] for r in doc["budget"]["claims"]) == 28 and doc["budget"]["device"].startswith("CPU ")
    assert [c["key"] for c in doc["claims"]] == ["table1_images@cifar10-pixels", "table2_efficiency@tiny", "table3_depth@cifar10-pixels",
                                                 "table4_ablations@cifar10-pixels", "table5_text@enwik8", "table5_text@text8"]
    assert {d: r["standard_files"] for d, r in doc["data"].items()} == {"cifar10-pixels": False, "enwik8": False,
                                                                         "text8": False}
    for claim in doc["claims"]:
        assert claim["verdict"] in (HOLDS, FAILS, INCONCLUSIVE, NO_VERDICT, SANITY_FAILED)
        assert all(len(v) == 2 for v in claim["values"].values())
        assert all(claim["metric"] in row or "constant" in row for rows in claim["values"].values() for row in rows)
    runs = sorted((out / "work" / "runs").iterdir())
    config = json.loads((runs[0] / "config.json").read_text())
    assert config["model"]["n_layer"] == 2 and config["data"]["standard_files"] is False
    text8 = next(r for r in runs if r.name.startswith("text8-damcha"))
    assert json.loads((text8 / "config.json").read_text())["data"]["split"].startswith("90% / 5% / 5%")
    assert "test_bits_per_char" in json.loads((text8 / "test.json").read_text())  # the test split, once, at the end
    text = next(c for c in doc["claims"] if c["key"] == "table5_text@text8")
    recorded = {json.loads((r / "test.json").read_text())["test_bits_per_char"] for r in runs
                if r.name.startswith("text8-damcha") and "tuning" not in r.name}
    assert "test_bits_per_char" in text["columns"]
    assert {row["test_bits_per_char"] for row in text["values"]["damcha"]} <= recorded  # what each run recorded
    images = next(c for c in doc["claims"] if c["key"] == "table1_images@cifar10-pixels")  # the pixel model's NLL
    assert (images["metric"], images["columns"]) == ("val_nll", ["test_nll"])
    assert all("test_nll" in row for arm, rows in images["values"].items() for row in rows
               if images["arms"][arm][1] == "train")  # beside validation, for every model arm (a baseline has none)
    baseline = images["values"]["training tokens' frequencies"]  # every pixel at its training frequency
    assert all(0 < row["val_nll"] <= math.log(256) + 0.1 for row in baseline)
    pixel_run = next(r for r in runs if r.name.startswith("cifar10-pixels-damcha"))
    assert json.loads((pixel_run / "config.json").read_text())["model"]["block_size"] == 1024  # 1024 pixel tokens
    # nothing outside --out: the zip's member was extracted into OUT/cache
    assert _files(tmp_path) - before == {p for p in _files(tmp_path) if p.startswith("evidence-tiny")}
    assert any((out / "cache").rglob("*enwik8*"))
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0 and json.loads((out / "results.json").read_text())["units_computed_in_this_call"] == 0
    restated = subprocess.run([*cmd, "--restate"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert restated.returncode == 0, restated.stderr
    redone = json.loads((out / "results.json").read_text())
    assert redone["restated"]["unchanged_claims"] == []
    assert [c["verdict"] for c in redone["claims"]] == [c["verdict"] for c in doc["claims"]]


@pytest.mark.skipif(sys.platform != "linux", reason="torchrun with Gloo is tested on Linux")
def test_under_torchrun_every_rank_trains_each_run_and_rank_0_writes_the_same_numbers(tmp_path):
    """Two Gloo processes train each run together (DDP: the same steps to float rounding as one process)."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    only = ["--only", "table5_text@text8", "--seeds", "1"]
    single = subprocess.run([sys.executable, "-m", "damcha", "evidence", "--scale", "tiny", "--data-dir", str(data),
                             "--out", str(tmp_path / "one"), "--workers", "1", *only],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr
    both = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           "29531", "-m", "damcha", "evidence", "--scale", "tiny", "--data-dir", str(data),
                           "--out", str(tmp_path / "two"), "--device", "cpu", *only],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert both.returncode == 0, both.stderr[-3000:]
    one, two = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    assert two["calls"][-1]["processes"] == 2
    for a, b in zip(one["claims"], two["claims"], strict=True):
        for arm, rows in a["values"].items():
            for x, y in zip(rows, b["values"][arm], strict=True):
                assert set(x) == set(y)
                assert all(abs(x[k] - y[k]) <= 1e-4 * max(1.0, abs(x[k])) for k in x), (arm, x, y)
