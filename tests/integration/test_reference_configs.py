"""Checkpoints as the authors' current code writes them (erwinmsmith/DAMCHA at ffa99807: their
`utils.save_checkpoint` called from `train.train` and `train_nlp.py`), for every configuration their
`main.py` can produce. The model, its components and the saved dict are written here, in our own
code, from reading theirs: same keys, nesting and value types. Each converted run must compute
what an independent forward of their model computes, to float tolerance: the decoder, the row
sums, and with the trained components the whole model on an image or on token ids."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from damcha.analysis.inspection import inspect_input
from damcha.inputs.modalities import modality_named
from damcha.runs.checkpoints import load_model, load_run
from damcha.runs.reference import ReferenceCheckpointError, import_reference
from tests.support.app_views import open_tab
from tests.support.reference_fake import (
    D,
    Decoder,
    Patcher,
    ReconstructionHead,
    Seq2SeqHead,
    T,
    V,
    identity_ends,
    jiggle,
    save_like_their_code,
    their_config,
)

CONFIGURATIONS = {  # name: (kind, decoder settings, config changes beyond the kind's)
    "shared, both scales": ("shared", dict(diag_scale=0.7, off_diag_scale=0.5), dict(diag_scale=0.7, off_diag_scale=0.5)),
    "own generators, both scales": ("own", dict(diag_scale=0.7, off_diag_scale=0.5),
                                    dict(diag_scale=0.7, off_diag_scale=0.5)),
    "shared with layer bias": ("layer_bias", dict(off_diag_scale=0.8), dict(off_diag_scale=0.8)),
    "static M0": ("static", {}, {}),
    "standard Q/K": ("qk", {}, {}),
    "any d_ff (80 at width 48)": ("shared", dict(d_ff=80), dict(d_ff=80)),
}


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_each_configuration_converts_to_the_same_decoder(tmp_path, name):
    kind, settings, changes = CONFIGURATIONS[name]
    torch.manual_seed(0)
    decoder = Decoder(kind, **settings)
    jiggle(decoder)
    save_like_their_code(tmp_path / "checkpoint_epoch_10.pt", decoder, {}, their_config(kind, **changes))
    run = load_run(import_reference(tmp_path / "checkpoint_epoch_10.pt", tmp_path / "run", block_size=T))
    sources = run.train_config["setting_sources"]
    if kind != "qk" and kind != "static":
        assert sources["off_diag_scale"] in ("off_diag_params", "the file's config")
    assert (run.train_config["diag_scale"], run.train_config["off_diag_scale"]) == (
        settings.get("diag_scale", 1.0), settings.get("off_diag_scale", 1.0))
    ours = identity_ends(load_model(run, 10))
    X = torch.randn(2, T, D)
    with torch.no_grad():
        torch.testing.assert_close(ours(X).logits, decoder.eval()(X), atol=3e-5, rtol=1e-4)
    if kind in ("shared", "own", "static"):  # the row sums head i scores with, position by position
        x = X[:1] + decoder.decoder.pe.pe[:T]
        with torch.no_grad():
            expected = decoder.row_sums(x, decoder.decoder.layers[0])[0, -1].numpy()  # (H, d, d) at the last position
        record = inspect_input(ours, X[0].numpy(), positions=[T - 1])
        np.testing.assert_allclose(record.values("head_metrics")[0, 0], expected, atol=3e-5)


def test_an_image_run_with_components_computes_their_whole_model(tmp_path):
    torch.manual_seed(1)
    decoder, patcher, head = Decoder("shared", off_diag_scale=0.5), Patcher(), ReconstructionHead()
    jiggle(decoder, patcher, head)
    save_like_their_code(tmp_path / "best_model.pt", decoder, {"head": head, "patcher": patcher},
                         their_config("shared", off_diag_scale=0.5))
    run = load_run(import_reference(tmp_path / "best_model.pt", tmp_path / "run"))
    assert run.model_config.modality == "patches_in_place" and run.model_config.head_hidden == 2 * D
    report = next(iter(run.train_config["import_report"].values()))
    assert not report["initialised"] and not report["unknown"]
    assert any("from the file's components" in n for n in run.raw_config["notes"])
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    with torch.no_grad():  # theirs: normalise to [-1, 1], (C, p, p) patches, patcher, decoder, head
        u = (torch.as_tensor(image).permute(2, 0, 1)[None].float() / 255 - 0.5) / 0.5
        pred = head.proj(decoder.eval()(patcher.proj(patcher.patches(u))))  # (1, 64, 48) in their layout and range
        theirs = (pred.reshape(1, 64, 3, 4, 4).permute(0, 1, 3, 4, 2).reshape(1, 64, 48) + 1) / 2
    tokens, targets = modality_named("patches_in_place").photo_sequences(image[None])
    ours = load_model(run)(torch.as_tensor(tokens)).logits
    torch.testing.assert_close(ours, theirs, atol=3e-5, rtol=1e-4)


def test_a_text_run_with_components_uses_their_embedding_and_head(tmp_path):
    torch.manual_seed(2)
    decoder, embedding, head = Decoder("own", off_diag_scale=0.5), nn.Embedding(V, D, padding_idx=1), Seq2SeqHead()
    jiggle(decoder, embedding, head)
    save_like_their_code(tmp_path / "checkpoint_epoch_10.pt", decoder, {"embedding": embedding, "head": head},
                         their_config("own", dataset="commongen", off_diag_scale=0.5))
    run = load_run(import_reference(tmp_path / "checkpoint_epoch_10.pt", tmp_path / "run"))
    assert run.model_config.vocab_size == V and run.model_config.modality == "tokens"
    ids = torch.randint(0, V, (1, T))
    with torch.no_grad():
        theirs = head.proj(decoder.eval()(embedding(ids)))
    torch.testing.assert_close(load_model(run)(ids).logits, theirs, atol=3e-5, rtol=1e-4)


def test_what_cannot_be_represented_is_refused_by_name_and_leaves_nothing(tmp_path):
    torch.manual_seed(3)
    decoder = Decoder("shared")
    for changes, why in ((dict(baseline="tha"), "baseline='tha'"), (dict(compact_rank=8), "compact_rank=8"),
                         (dict(in_ch=1, dataset="mnist"), "32x32 colour images")):
        path = tmp_path / "refused.pt"
        components = {"patcher": Patcher()} if "in_ch" in changes else {}
        save_like_their_code(path, decoder, components, their_config("shared", **changes))
        with pytest.raises(ReferenceCheckpointError, match=why):
            import_reference(path, tmp_path / "out")
        assert not (tmp_path / "out").exists(), "a refused import leaves no folder behind"


def test_a_text_file_named_pt_is_refused_in_words(tmp_path):
    fake = tmp_path / "notes.pt"
    fake.write_text("epoch 10 loss 0.12\n")
    with pytest.raises(ReferenceCheckpointError, match="looks like a text file"):
        import_reference(fake, tmp_path / "out")
    assert Path(tmp_path / "out").exists() is False


def test_every_page_opens_a_converted_image_run_and_says_what_it_reads(tmp_path):
    from streamlit.testing.v1 import AppTest

    torch.manual_seed(4)
    decoder, patcher, head = Decoder("shared"), Patcher(), ReconstructionHead()
    save_like_their_code(tmp_path / "best_model.pt", decoder, {"head": head, "patcher": patcher}, their_config("shared"))
    import_reference(tmp_path / "best_model.pt", tmp_path / "runs" / "ref-image")
    app = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")
    for page in sorted(p.stem for p in (Path(app).parent.parent / "pages").glob("*.py")):
        at = AppTest.from_file(app, default_timeout=180)
        at.session_state["checkpoint_root"] = str(tmp_path / "runs")
        at.switch_page(f"../pages/{page}.py")
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        if page == "inspector":
            assert any("patches read in place" in w.value for w in at.warning)
            open_tab(at, "Attention")
            assert any("reads patch r8c8" in c.proto.spec for c in at.get("plotly_chart"))
