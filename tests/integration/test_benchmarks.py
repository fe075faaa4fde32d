import json
import subprocess
import sys
from pathlib import Path

import pytest

from damcha import ModelConfig, variant_names
from damcha.evidence.efficiency import explicit_flops, layer_flops_counted

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_benchmark_script_runs_and_writes_json(tmp_path):
    """Only that it runs and reports both implementations; no test asserts a time."""
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "benchmarks/bench.py", "--quick", "--json", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    layer = [r for r in rows if r["case"].startswith("1 layer")]
    assert layer and all(r["ratio"] > 0 and r["damcha_gflop"] > 0 and r["mha_gflop"] > 0 for r in layer)
    assert any(r["case"].startswith("inspection of one input, digits-damcha") for r in rows)
    assert "ratio" in result.stdout


def test_scale_benchmark_runs_quick(tmp_path):
    """The paper-size script at toy sizes (DDP is covered by tests/integration/test_distributed.py)."""
    out = tmp_path / "scale.json"
    result = subprocess.run([sys.executable, "benchmarks/scale.py", "--quick", "--skip", "ddp", "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    inspection = [r for r in rows if "inspector record" in r["case"]]
    assert inspection and inspection[0]["damcha_peak_mb"] >= 0 and inspection[0]["ratio"] > 0
    assert any("bf16" in r["case"] and r["max_loss_diff"] < 0.05 for r in rows)


@pytest.mark.parametrize("causal", [True, False])
def test_flops_counted_at_short_lengths_extend_exactly_to_long_ones(causal):
    """Every registered layer's counted FLOPs are a T + b T²: the two-length count equals the direct one."""
    cfg = ModelConfig(vocab_size=11, block_size=100, n_layer=1, n_head=4, n_embd=32, attention_options={"generator_widths": (16, 32)},
                      causal=causal, n_classes=0 if causal else 3)
    for variant in variant_names():
        assert layer_flops_counted(cfg, variant, 100, 2) == explicit_flops(cfg, variant, 100, 2), variant


def test_the_mechanism_table_states_each_target_from_the_measured_row():
    import bench

    row = {"T": 1024, "ratio": 3.0, "flops_ratio": 1.25, "train_ratio": 2.0, "damcha_peak_mb": 50.0,
           "mha_peak_mb": 10.0, "declared_mb": 4.0}
    assert bench.targets(row) == [("time", 3.0, 2.5), ("training step", 2.0, 2.5), ("peak MB", 50.0, 28.0)]
    assert bench.targets({**row, "T": 256}) == []  # judged at T = 1024 only


def test_the_generator_probe_starts_f_where_it_says_and_runs(tmp_path):
    """The diagnostic's identity start is the `generator_start='identity'` setting's (every head's row sum
    starts at I_d with its read-out zeroed), and the script runs end to end at a toy budget; it asserts
    no accuracy."""
    import dataclasses

    import torch
    from generator_training_probe import identity_start

    from damcha.inputs.synthetic import OneLayer

    model = OneLayer("damcha", 15)
    identity_start(model, 1.0)
    from damcha.model.mechanisms.damcha.metric import MetricGenerator
    setting = MetricGenerator(dataclasses.replace(model.config, attention_options={"generator_start": "identity"}))
    assert torch.equal(model.shared.generator.out.bias, setting.out.bias)
    identity_start(model, 0.0)
    m = model.shared.generator.fused_row_sum(torch.randn(3, model.config.n_embd), "full")  # (3, H, d, d)
    assert torch.equal(m, torch.eye(m.shape[-1]).expand_as(m))
    out = tmp_path / "probe.json"
    result = subprocess.run([sys.executable, "benchmarks/generator_training_probe.py", "--seeds", "1", "--steps", "2",
                             "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(out.read_text())) == 8 and "above 0.5" in result.stdout


def test_the_data_readers_benchmark_reads_every_format(tmp_path):
    """Only that each reader reads all of its generated file and a figure comes back; no test asserts memory."""
    out = tmp_path / "readers.json"
    result = subprocess.run([sys.executable, "benchmarks/data_readers.py", "--mb", "2", "--json", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = {r["case"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"naive", "enwik8", "enwik8.zip", "parquet-text", "parquet-images", "cifar10"}
    assert rows["enwik8"]["rows"] == rows["enwik8.zip"]["rows"] > 0 and rows["parquet-images"]["rows"] > 0


def test_hugging_face_benchmark_runs_quick(tmp_path):
    """Only that it runs and reports the three implementations (no time is asserted)."""
    pytest.importorskip("transformers", reason="the Hugging Face extra is not installed (pip install 'damcha[hf]')")
    out = tmp_path / "hf.json"
    result = subprocess.run([sys.executable, "benchmarks/hf_classes.py", "--quick", "--json", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 4 and all(r["hf_over_project"] > 0 and r["hf_over_gpt2_mha"] > 0 for r in rows)


def test_generation_benchmark_runs_quick(tmp_path):
    """Only that it runs, reports every case and DAMCHA generates the same tokens with and without its
    cache (no time is asserted)."""
    pytest.importorskip("transformers", reason="the Hugging Face extra is not installed (pip install 'damcha[hf]')")
    out = tmp_path / "generation.json"
    result = subprocess.run([sys.executable, "benchmarks/generation.py", "--quick", "--json", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = {r["case"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"MHA, cache", "DAMCHA, cache", "DAMCHA, no cache", "GPT-2 MHA, DynamicCache"}
    assert rows["MHA, cache"]["over_mha_with_cache"] == 1.0 and all(r["seconds"] > 0 for r in rows.values())


def test_the_generation_table_in_the_docs_is_the_shipped_results():
    rows = json.loads((ROOT / "benchmarks" / "results" / "generation.json").read_text())["rows"]
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    for r in rows:
        assert f"| {r['case']} | {r['seconds']:.3f} | {r['over_mha_with_cache']:.2f} |" in docs, r["case"]


def test_the_reproduction_benchmark_samples_every_kind_and_compares_value_for_value():
    """benchmarks/reproduction.py: the sample and the comparison (the recomputation itself is the benchmark's run,
    committed in benchmarks/results/reproduction.json)."""
    import reproduction

    doc = json.loads((ROOT / "checkpoints" / "evidence" / "results.json").read_text())
    picked = reproduction.sample(doc, 6)
    assert [arm.kind for _, arm, _ in picked] == ["train", "synthetic"] * 3
    assert len({arm.run_name(0, False) for _, arm, _ in picked}) == 6 and len({key for key, _, _ in picked}) == 6
    for key, arm, stored in picked:
        claim = next(c for c in doc["claims"] if c["key"] == key)
        assert claim["values"][arm.name][0] == stored
    rows = reproduction.compared({"val_nll": 1.0, "lr": 0.01, "parameters": 10.0, "other": 2.0},
                                 {"val_nll": 1.0 + 1e-7, "lr": 0.03, "parameters": 10.0, "new": 1.0})
    assert rows == [{"metric": "val_nll", "stored": 1.0, "here": 1.0 + 1e-7, "identical": False,
                     "relative_difference": pytest.approx(1e-7)}]
    assert reproduction.compared({"a": 0.5}, {"a": 0.5})[0]["identical"]


def test_the_device_check_puts_the_clone_on_the_path_before_it_imports_the_package():
    """The one script a lent GPU runs, from a fresh clone with the package not installed: no import of damcha at
    its top before its sys.path.insert (it failed with ModuleNotFoundError there)."""
    import ast

    for script in [ROOT / "benchmarks" / "device_check.py"]:
        body = ast.parse(script.read_text()).body
        inserted = next((i for i, node in enumerate(body) if "sys.path.insert" in ast.unparse(node)), None)
        for i, node in enumerate(body):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n == "damcha" or n.startswith("damcha.") for n in names):
                assert inserted is not None and i > inserted, f"{script.name}: {ast.unparse(node)}"


def test_the_device_check_runs_its_cpu_dry_run_from_another_folder_and_leaves_the_shipped_table(tmp_path):
    from damcha.evidence.costs import SHIPPED_TABLE

    shipped = SHIPPED_TABLE.read_bytes()
    script = str(ROOT / "benchmarks" / "device_check.py")
    helped = subprocess.run([sys.executable, script, "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert helped.returncode == 0 and "--costs-only" in helped.stdout
    done = subprocess.run([sys.executable, script, "--device", "cpu", "--costs-only", "--out", str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "out" / "cost_table.json").read_text())["devices"]
    assert any(device.startswith("CPU ") and all("threads" in r for r in entry["rows"] if "load_per_core" in r)
               for device, entry in written.items())
    assert SHIPPED_TABLE.read_bytes() == shipped
    again = subprocess.run([sys.executable, script, "--device", "cpu", "--costs-only", "--out", str(tmp_path / "out")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "nothing to time" in again.stdout  # a second call goes on from the first's table
    assert json.loads((tmp_path / "out" / "cost_table.json").read_text())["devices"] == written
