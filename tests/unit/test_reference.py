"""Checkpoints of the authors' reference implementation: a model with their layout and key names is
built here (an independent re-implementation of their forward, written from reading their code,
with the full D x D metric at every position), saved the way their code saves it, converted, and
the converted run must compute the same outputs and metrics. Hostile files are refused."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from damcha.analysis.inspection import inspect_input
from damcha.runs.checkpoints import load_model, load_run
from damcha.runs.reference import ReferenceCheckpointError, import_reference, read_reference
from tests.support.reference_fake import WIDTHS, D, L, T, identity_ends, save_like_them, their_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("generator", [dict(off_diag_scale=0.5), dict(diag_scale=1.0, layer_bias=True)])
def test_converted_reference_model_computes_what_theirs_computes(tmp_path, generator):
    torch.manual_seed(0)
    theirs = their_model(**generator)
    with torch.no_grad():  # move LayerNorms off their identity init so the check sees them
        for p in theirs.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save_like_them(theirs, tmp_path / "checkpoint_epoch_3.pt",
                   **({"off_diag_scale": generator["off_diag_scale"]} if "off_diag_scale" in generator else {}))
    run_dir = import_reference(tmp_path / "checkpoint_epoch_3.pt", tmp_path / "run", block_size=T)
    run = load_run(run_dir)
    assert run.epochs == (3,) and run.model_config.norm_placement == "post" and not run.model_config.final_norm
    assert run.model_config.setting("metric_sharing") == ("per_layer" if generator.get("layer_bias") else "shared")
    report = next(iter(run.train_config["import_report"].values()))
    per_layer_copies = 2 * (len(WIDTHS) + 1) + (3 if generator.get("layer_bias") else 0)  # the generator's tensors
    assert not report["unknown"] and len(report["duplicates"]) == L * per_layer_copies
    assert {k.split(".")[0] for k in report["initialised"]} == {"tok_emb", "head"}
    ours = identity_ends(load_model(run))
    X = torch.randn(1, T, D)
    with torch.no_grad():
        expected = theirs.eval()(X)
        got = ours(X).logits
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
    if not generator.get("layer_bias"):  # the shared metric itself: our M(c_t) is their scaled M at the same mean
        record = inspect_input(ours, X[0].numpy(), positions=[T - 1])
        c = (X + theirs.decoder.pe.pe[:T])[0].mean(0)
        with torch.no_grad():
            M = theirs.decoder.shared_mlp_module.metric(c, 0)
        np.testing.assert_allclose(record.values("metric")[0, 0], M.numpy(), atol=2e-5)


def test_cli_converts_a_folder_of_epochs_and_the_app_opens_it(tmp_path):
    torch.manual_seed(1)
    theirs = their_model()
    (tmp_path / "ref").mkdir()
    for epoch in (1, 2):
        save_like_them(theirs, tmp_path / "ref" / f"checkpoint_epoch_{epoch}.pt", epoch=epoch)
    out = subprocess.run([sys.executable, "-m", "damcha", "import-reference", str(tmp_path / "ref"), "--out",
                          str(tmp_path / "runs" / "ref-damcha")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "tensors mapped" in out.stdout and "seeded-random" in out.stdout
    run = load_run(tmp_path / "runs" / "ref-damcha")
    assert run.epochs == (1, 2) and [m["reference_val_loss"] for m in run.metrics] == [0.25, 0.25]
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=180)
    at.session_state["checkpoint_root"] = str(tmp_path / "ref")  # the folder of .pt files itself
    at.switch_page("../pages/inspector.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="run").value == "ref"
    assert any("seeded-random" in (w.value or "") for w in at.warning)


class Payload:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/damcha-reference-payload-ran"),))


def test_hostile_and_broken_files_are_refused_by_name(tmp_path):
    marker = Path("/tmp/damcha-reference-payload-ran")
    marker.unlink(missing_ok=True)
    evil = tmp_path / "evil.pt"
    torch.save({"model_state_dict": {"decoder.x": torch.zeros(1)}, "extra": Payload()}, evil)
    with pytest.raises(ReferenceCheckpointError, match="refused"):
        read_reference(evil)
    assert not marker.exists()
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ReferenceCheckpointError):
        read_reference(raw)
    assert not marker.exists()

    torch.manual_seed(2)
    good = tmp_path / "good.pt"
    save_like_them(their_model(), good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:2000])
    with pytest.raises(ReferenceCheckpointError, match="not a readable"):
        read_reference(truncated)

    foreign = tmp_path / "foreign.pt"
    torch.save({"model_state_dict": {"encoder.weight": torch.zeros(2, 2)}}, foreign)
    with pytest.raises(ReferenceCheckpointError, match="decoder"):
        import_reference(foreign, tmp_path / "x")

    state = torch.load(good, weights_only=True)
    state["model_state_dict"]["decoder.layers.1.ff.net.0.weight"] = torch.zeros(3, D)
    bad_shape = tmp_path / "bad_shape.pt"
    torch.save(state, bad_shape)
    with pytest.raises(ReferenceCheckpointError, match=r"layers\.1\.ff\.net\.0\.weight"):
        import_reference(bad_shape, tmp_path / "y")

    state = torch.load(good, weights_only=True)
    state["model_state_dict"]["decoder.layers.0.self_attn.surprise"] = torch.zeros(1)
    extra = tmp_path / "extra.pt"
    torch.save(state, extra)
    run = load_run(import_reference(extra, tmp_path / "z"))
    report = next(iter(run.train_config["import_report"].values()))
    assert report["unknown"] == ["decoder.layers.0.self_attn.surprise"]
    assert json.loads((tmp_path / "z" / "config.json").read_text())["notes"]
