"""Checkpoints of the authors' reference implementation: a model with their layout and key names is
built here (an independent re-implementation of their forward, written from reading their code,
with the full D x D metric at every position), saved the way their code saves it, converted, and
the converted run must compute the same outputs and metrics. Hostile files are refused."""

import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from damcha.analysis.inspection import inspect_input
from damcha.runs.checkpoints import load_model, load_run
from damcha.runs.reference import ReferenceCheckpointError, import_reference, read_reference

ROOT = Path(__file__).resolve().parent.parent
D, H, L, T, WIDTHS = 48, 4, 2, 12, (16, 24)


class TheirGenerator(nn.Module):
    def __init__(self, diag_scale=1.0, off_diag_scale=1.0, layer_bias=False):
        super().__init__()
        layers, width = [], D
        for w in WIDTHS:
            layers += [nn.Linear(width, w), nn.GELU(), nn.Dropout(0.0)]
            width = w
        self.mlp = nn.Sequential(*layers, nn.Linear(width, D * D))
        d = D // H
        diag = torch.block_diag(*[torch.ones(d, d)] * H)
        self.register_buffer("diag_mask", diag)
        self.register_buffer("off_diag_mask", 1 - diag)
        self.scales = diag * diag_scale + (1 - diag) * off_diag_scale
        if layer_bias:
            self.layer_bias_U = nn.Parameter(torch.randn(D, 3) * 0.1)
            self.layer_bias_V = nn.Parameter(torch.randn(D, 3) * 0.1)
            self.layer_scales = nn.Parameter(torch.randn(L, 3))

    def metric(self, context, layer):  # (..., D) -> (..., D, D)
        M = self.mlp(context).unflatten(-1, (D, D))
        if hasattr(self, "layer_scales"):
            M = M + (self.layer_bias_U * self.layer_scales[layer]) @ self.layer_bias_V.T
        return M * self.scales


class TheirAttention(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.W_v, self.out_proj = nn.Linear(D, D), nn.Linear(D, D)
        self._shared_mlp = shared  # registered as a submodule: its keys repeat under every layer


class TheirLayer(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.self_attn = TheirAttention(shared)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff = nn.Module()
        self.ff.net = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * D, D), nn.Dropout(0.0))


class TheirPositions(nn.Module):
    def __init__(self, max_len=64):
        super().__init__()
        pe = torch.zeros(max_len, D)
        pos = torch.arange(max_len)[:, None].float()
        div = torch.exp(torch.arange(0, D, 2).float() * (-math.log(10000.0) / D))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)


class TheirModel(nn.Module):
    def __init__(self, **generator):
        super().__init__()
        self.decoder = nn.Module()
        self.decoder.shared_mlp_module = TheirGenerator(**generator)
        self.decoder.layers = nn.ModuleList(TheirLayer(self.decoder.shared_mlp_module) for _ in range(L))
        self.decoder.pe = TheirPositions()

    def forward(self, X):  # (B, T, D) embedded input -> (B, T, D), every per-position M built whole
        dec, gen = self.decoder, self.decoder.shared_mlp_module
        x = X + dec.pe.pe[: X.shape[1]]
        d = D // H
        per_layer = hasattr(gen, "layer_scales")
        source = x
        for i, layer in enumerate(dec.layers):
            metric_input = x if per_layer else source
            c = metric_input.cumsum(1) / torch.arange(1, X.shape[1] + 1)[None, :, None]  # prefix means
            m = gen.metric(c, i).reshape(*c.shape[:2], H, d, H, d).sum(-2)  # (B, T, H, d, d) row sums
            xh = x.reshape(*x.shape[:2], H, d).transpose(1, 2)  # (B, H, T, d)
            q = torch.einsum("bhtd,bthde->bhte", xh, m)
            s = q @ xh.transpose(-1, -2) / math.sqrt(d)
            s = s.masked_fill(torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
            v = layer.self_attn.W_v(x).reshape(*x.shape[:2], H, d).transpose(1, 2)
            y = layer.self_attn.out_proj((F.softmax(s, -1) @ v).transpose(1, 2).reshape(x.shape))
            x = layer.ln1(x + y)
            x = layer.ln2(x + layer.ff.net(x))
        return x


def save_like_them(model, path, epoch=3, **off_diag):
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    model(torch.randn(1, T, D)).sum().backward()
    opt.step()
    torch.save({"epoch": epoch, "model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict(),
                "loss": 0.25, "off_diag_params": {"off_diag_mode": "mlp", **off_diag}}, path)


def identity_ends(model):
    """Embedding and head as identities, so the converted model's output is the decoder's."""
    with torch.no_grad():
        model.tok_emb.weight.copy_(torch.eye(D))
        model.tok_emb.bias.zero_()
        model.head.weight.copy_(torch.eye(D))
        model.head.bias.zero_()
    return model


@pytest.mark.parametrize("generator", [dict(off_diag_scale=0.5), dict(diag_scale=1.0, layer_bias=True)])
def test_converted_reference_model_computes_what_theirs_computes(tmp_path, generator):
    torch.manual_seed(0)
    theirs = TheirModel(**generator)
    with torch.no_grad():  # move LayerNorms off their identity init so the check sees them
        for p in theirs.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save_like_them(theirs, tmp_path / "checkpoint_epoch_3.pt",
                   **({"off_diag_scale": generator["off_diag_scale"]} if "off_diag_scale" in generator else {}))
    run_dir = import_reference(tmp_path / "checkpoint_epoch_3.pt", tmp_path / "run", block_size=T)
    run = load_run(run_dir)
    assert run.epochs == (3,) and run.model_config.norm_placement == "post" and not run.model_config.final_norm
    assert run.model_config.metric_sharing == ("per_layer" if generator.get("layer_bias") else "shared")
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
        np.testing.assert_allclose(record.metric[0, 0], M.numpy(), atol=2e-5)


def test_cli_converts_a_folder_of_epochs_and_the_app_opens_it(tmp_path):
    torch.manual_seed(1)
    theirs = TheirModel()
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
    save_like_them(TheirModel(), good)
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
