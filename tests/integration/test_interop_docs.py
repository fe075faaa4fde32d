"""docs/interop.md's examples run as written (in a scratch folder) and give what the page says."""

import linecache
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the Hugging Face extra is not installed (pip install 'damcha[hf]'); "
                    "CI installs it")

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")


def _run_block(heading: str, folder: Path) -> dict:
    start = PAGE.index("```python", PAGE.index(heading)) + len("```python")
    code = re.sub(r'"checkpoints/', f'"{ROOT}/checkpoints/', PAGE[start:PAGE.index("```", start)])
    scope: dict = {}
    name = f"<docs/interop.md: {heading}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # nnsight reads a trace's own source
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(code, name, "exec"), scope)
    finally:
        os.chdir(cwd)
    return scope


def test_the_hugging_face_example_trains_saves_and_gives_attention(tmp_path):
    scope = _run_block("## Hugging Face classes for every mechanism", tmp_path)
    assert type(scope["model"]).__name__ == "DamchaForCausalLM"
    assert (tmp_path / "my-damcha" / "model.safetensors").is_file()
    attentions = scope["out"].attentions
    assert len(attentions) == 2 and attentions[0].shape == (1, 4, 16, 16)


def test_the_export_example_gives_the_runs_logits(tmp_path):
    scope = _run_block("## Export a trained run", tmp_path)
    assert scope["done"].max_difference == 0.0 and scope["done"].epoch == 40
    assert scope["model"].config.attention == "damcha"


def test_the_trainer_example_gives_a_run_with_its_checkpoints_as_epochs(tmp_path):
    scope = _run_block("## Open a Hugging Face folder in the app", tmp_path)
    run = scope["run"]
    assert run.epochs == (1, 2) and run.variant == "mha" and len(run.metrics) == 2


def test_the_swap_example_carries_v_and_o_and_trains(tmp_path):
    scope = _run_block("## Swap a mechanism into GPT-2, Llama or ViT", tmp_path)
    swap = scope["swap"]
    assert {name.rsplit(".", 2)[-2] for name in swap.carried} == {"value", "proj"}
    assert swap.fresh and all(name.startswith("damcha_shared.") for name in swap.fresh)


def test_the_nnsight_example_reads_and_edits_the_shared_metric(tmp_path):
    pytest.importorskip("nnsight", reason="nnsight is not installed (pip install 'damcha[lens]'); CI installs it")
    import torch

    scope = _run_block("## nnsight: read and edit the shared metric", tmp_path)
    assert scope["metric"].shape == (2, 64, 4, 8, 8) and scope["attended"].shape == (2, 4, 64, 8)
    assert not torch.isclose(scope["edited"], scope["loss"])
    model, tokens, targets = scope["model"]._module, scope["tokens"], scope["targets"]
    own = model(tokens, targets=targets).token_loss  # the model as trained, untouched by the traces
    torch.testing.assert_close(scope["second"], own[1:], rtol=0, atol=1e-6)
    assert not torch.allclose(scope["first"], own[:1])


def test_the_transformer_lens_example_caches_and_edits(tmp_path):
    pytest.importorskip("transformer_lens", reason="TransformerLens is not installed (pip install 'damcha[lens]')")
    import torch

    scope = _run_block("## TransformerLens: the canonical hooks on any mechanism", tmp_path)
    assert scope["pattern"].shape == (2, 4, 64, 64) and scope["metrics"].shape == (2, 64, 4, 8, 8)
    assert not torch.allclose(scope["edited"], scope["logits"])
