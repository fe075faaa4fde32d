"""Folders of damcha.hf's classes opened as runs (damcha.runs.hf_folders): an exported run and a run trained
with Hugging Face's Trainer (its checkpoint-N folders as epochs, its logged eval loss as the validation
loss) on every page of the app, and what is not such a folder refused in words, nothing unpickled."""

import json
import shutil
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the Hugging Face extra is not installed "
                                   "(pip install 'damcha[hf]'); CI installs it")

from damcha.runs.checkpoints import CheckpointError, list_runs, load_model, load_run  # noqa: E402
from tests.support.app_views import (  # noqa: E402
    RUN_PAGES,
    every_view,  # noqa: E402
    page_app,
)
from tests.support.trainer_runs import trainer_run  # noqa: E402
from tests.support.units import losses_without_unit, shown_texts  # noqa: E402

hf = pytest.importorskip("damcha.hf")
transformers.logging.set_verbosity_error()
CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hf-runs")
    hf.export_run(CHECKPOINTS / "text-damcha", root / "text-damcha-hf")
    hf.export_run(CHECKPOINTS / "digits-cls-mma", root / "digits-cls-mma-hf", epoch=6)
    trainer_run(root / "trainer-damcha")
    return root


def test_an_exported_folder_is_its_run_at_its_epoch(folders):
    run = load_run(folders / "text-damcha-hf")
    source = load_run(CHECKPOINTS / "text-damcha")
    assert run.epochs == (40,) and run.dataset == "text" and run.model_config == source.model_config
    assert "Exported from the run text-damcha at epoch 40." in run.raw_config["provenance"]
    x = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(load_model(run)(x).logits, load_model(source)(x).logits, rtol=0, atol=0)
    assert load_run(folders / "digits-cls-mma-hf").epochs == (6,)


def test_a_trainer_run_shows_its_checkpoints_as_epochs_and_its_eval_loss(folders):
    run = load_run(folders / "trainer-damcha")
    assert run.epochs == (1, 2)
    assert [row["epoch"] for row in run.metrics] == [1, 2]
    state = json.loads((folders / "trainer-damcha" / "checkpoint-4" / "trainer_state.json").read_text())
    logged = [entry["eval_loss"] for entry in state["log_history"] if "eval_loss" in entry]
    assert [row["val_nll"] for row in run.metrics] == logged
    saved = hf.DamchaForCausalLM.from_pretrained(folders / "trainer-damcha" / "checkpoint-2").transformer.state_dict()
    assert all(torch.equal(saved[k], v) for k, v in load_model(run, 1).state_dict().items())
    names = {r.name for r in list_runs(folders)[0]}
    assert names == {"text-damcha-hf", "digits-cls-mma-hf", "trainer-damcha"}


def test_trainer_checkpoints_off_whole_epochs_are_numbered_by_step(tmp_path):
    trainer_run(tmp_path / "by-step", save_strategy="steps")
    run = load_run(tmp_path / "by-step")
    assert run.epochs == (3, 4) and any("training step" in note for note in run.raw_config["provenance"])
    assert [row["epoch"] for row in run.metrics] == [3, 4]  # evaluated every 3 steps and where training ends


@pytest.mark.parametrize("run", ["text-damcha-hf", "digits-cls-mma-hf", "trainer-damcha"])
def test_every_page_opens_a_hugging_face_folder(folders, run):
    for page in RUN_PAGES:
        at = page_app(folders, run, page)
        assert at.selectbox(key="run").value == run
        for view in every_view(at):
            assert not view.exception, (page, [e.value for e in view.exception])
            assert not losses_without_unit(shown_texts(view)), (page, losses_without_unit(shown_texts(view)))


def _copy(folders: Path, tmp_path: Path, name: str = "text-damcha-hf") -> Path:
    return Path(shutil.copytree(folders / name, tmp_path / name))


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_remote_code_pickles_and_foreign_folders_are_refused_in_words(folders, tmp_path):
    remote = _copy(folders, tmp_path / "remote")
    _edit_config(remote, auto_map={"AutoModel": "modeling_evil.EvilModel"})
    with pytest.raises(CheckpointError, match="asks for remote code"):
        load_run(remote)
    pickled = _copy(folders, tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickled weights, never loaded here"):
        load_run(pickled)
    foreign = tmp_path / "gpt2"
    transformers.GPT2Config(n_layer=1, n_embd=16, n_head=4, vocab_size=11).save_pretrained(foreign)
    with pytest.raises(CheckpointError, match="model_type 'gpt2', not of DAMCHA Lab's classes"):
        load_run(foreign)
    wrong = _copy(folders, tmp_path / "wrong")
    _edit_config(wrong, n_embd=64)
    with pytest.raises(CheckpointError, match=r"tok_emb.weight has shape \[256, 32\] F32, the config needs \[256, 64\]"):
        load_model(load_run(wrong))
    runs, bad = list_runs(tmp_path / "remote")
    assert not runs and "remote code" in bad[0][1]


@pytest.mark.parametrize(("name", "value"), [("num_key_value_heads", 2), ("head_dim", 4), ("tie_word_embeddings", True),
                                           ("sliding_window", 8)])
def test_the_app_refuses_a_folder_the_classes_refuse_naming_the_setting(folders, tmp_path, name, value):
    """A folder whose config sets what damcha.hf's classes refuse (grouped-query heads, another head width ...)
    was opened by the app and drawn as a model the classes never build; it is refused alike, in words."""
    folder = _copy(folders, tmp_path)
    _edit_config(folder, **{name: value})
    with pytest.raises(ValueError, match=name):  # the classes' own refusal
        hf.DamchaForCausalLM.from_pretrained(folder)
    with pytest.raises(CheckpointError, match=rf"{name}={value}.*damcha.hf's classes refuse"):
        load_run(folder)
    runs, bad = list_runs(tmp_path)
    assert not runs and name in bad[0][1]


def test_the_app_opens_an_exported_folder_in_chromium(folders, tmp_path):
    """The server as a user starts it, pointed at a folder of Hugging Face folders: the Inspector draws an
    exported run's structures with no exception."""
    import os
    import subprocess
    import sys

    from playwright.sync_api import sync_playwright

    from tests.support.browser import (
        ARTIFACTS,
        CHROMIUM_ARGS,
        ROOT,
        free_port,
        require_chromium,
        wait_for_figures,
        wait_until_healthy,
    )

    exe = require_chromium()
    port = free_port()
    env = {**os.environ, "DAMCHA_CHECKPOINTS": str(folders)}
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app"), "--server.port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 2400})
            page.goto(f"{url}/inspector?run=text-damcha-hf")
            assert wait_for_figures(page, 1) >= 1
            assert page.locator(".stException").count() == 0
            assert page.get_by_text("Exported from the run text-damcha at epoch 40.").count() >= 1
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "inspector-hf-folder.png"), full_page=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_hostile_config_of_the_classes_is_refused_without_breaking_the_listing(folders, tmp_path):
    for name, changes in {"odd-sections": {"damcha_run": {"train": "x", "data": [1, 2], "epoch": -3}},
                          "bad-width": {"n_embd": "wide"}, "not-an-object": None}.items():
        folder = _copy(folders, tmp_path, "text-damcha-hf")
        if changes is None:
            (folder / "config.json").write_text("[1, 2, 3]")
        else:
            _edit_config(folder, **changes)
        folder.rename(tmp_path / name)
    runs, bad = list_runs(tmp_path)
    assert [r.name for r in runs] == ["odd-sections"] and runs[0].epochs == (0,) and runs[0].dataset == "?"
    assert {Path(p).name for p, _ in bad} == {"bad-width", "not-an-object"}
    assert all(isinstance(why, str) and why for _, why in bad)


def test_a_folder_of_one_snapshot_says_there_is_nothing_to_compare_across_epochs(folders):
    at = page_app(folders, "text-damcha-hf", "dynamics")
    said = [i.value for i in at.info]
    assert any("one snapshot (epoch 40): there is nothing to compare across epochs" in s for s in said), said
    assert not at.get("plotly_chart")  # no animation of one frame, no "epoch 40 − epoch 40"
    shown = " ".join(shown_texts(at))
    assert "relative distance from epoch" not in shown and "first vs last" not in shown.lower()
    at = page_app(folders, "text-damcha-hf", "interventions")
    assert any("nothing to compare across epochs" in i.value for i in at.info)
    assert not at.exception
    # where the folder came from is information, not a yellow warning
    assert any("A Hugging Face folder of damcha.hf's classes" in i.value for i in at.info)
    assert not any("Hugging Face folder" in w.value for w in at.warning)
