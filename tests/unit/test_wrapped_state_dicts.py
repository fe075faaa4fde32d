"""State dicts saved from a wrapped model (DistributedDataParallel's `module.`, torch.compile's
`_orig_mod.`) load as the model itself, in our snapshots and in the authors' checkpoints."""

import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import save_file

from damcha.runs.checkpoints import CheckpointError, load_model, load_run, unwrapped_name
from damcha.runs.reference import ReferenceCheckpointError, import_reference, read_reference
from tests.support.reference_fake import T, save_like_them, their_model

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "digits-mha"


@pytest.fixture(scope="module")
def ddp_group():
    """A one-process gloo group: enough to wrap a model in DistributedDataParallel on the CPU."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def wrapped_state(model, how: str) -> dict:
    if how == "compile":
        return torch.compile(model).state_dict()  # names only: nothing is compiled until it is called
    if how == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model).state_dict()
    return torch.compile(torch.nn.parallel.DistributedDataParallel(model)).state_dict()


@pytest.mark.parametrize("how", ["compile", "ddp", "compile+ddp"])
def test_a_snapshot_saved_from_a_wrapped_model_loads_and_computes_the_same(tmp_path, how, ddp_group):
    run_dir = tmp_path / "run"
    shutil.copytree(SHIPPED, run_dir)
    run = load_run(run_dir)
    model = load_model(run).requires_grad_(True)
    state = wrapped_state(model, how)
    prefix = {"compile": "_orig_mod.", "ddp": "module.", "compile+ddp": "_orig_mod.module."}[how]
    assert all(k.startswith(prefix) for k in state)  # the wrapper really renamed them
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(run.snapshot_path(run.epochs[-1])))
    loaded = load_model(load_run(run_dir))
    x = torch.randint(0, run.model_config.vocab_size, (2, 12))
    torch.testing.assert_close(loaded(x).logits, model(x).logits)


def test_two_stored_names_for_one_tensor_are_refused(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(SHIPPED, run_dir)
    run = load_run(run_dir)
    state = load_model(run).state_dict()
    name = next(iter(state))
    save_file({**state, f"module.{name}": state[name].clone()}, str(run.snapshot_path(run.epochs[-1])))
    with pytest.raises(CheckpointError, match=f"name the tensor '{name}'"):
        load_model(load_run(run_dir))


def test_unwrapped_name_takes_off_wrappers_only():
    assert unwrapped_name("_orig_mod.module.blocks.0.attn.q.weight") == "blocks.0.attn.q.weight"
    assert unwrapped_name("blocks.0.module.weight") == "blocks.0.module.weight"  # a layer named module stays


def test_an_authors_checkpoint_saved_under_ddp_imports_like_the_plain_one(tmp_path):
    torch.manual_seed(0)
    theirs = their_model()
    save_like_them(theirs, tmp_path / "plain.pt")
    ckpt = torch.load(tmp_path / "plain.pt", weights_only=True)
    ckpt["model_state_dict"] = {f"module.{k}": v for k, v in ckpt["model_state_dict"].items()}
    torch.save(ckpt, tmp_path / "ddp.pt")
    plain = load_model(load_run(import_reference(tmp_path / "plain.pt", tmp_path / "a", block_size=T)))
    wrapped = load_model(load_run(import_reference(tmp_path / "ddp.pt", tmp_path / "b", block_size=T)))
    for (name, p), (_, q) in zip(plain.state_dict().items(), wrapped.state_dict().items()):
        torch.testing.assert_close(p, q, msg=name)
    ckpt["model_state_dict"]["decoder.pe.pe"] = ckpt["model_state_dict"]["module.decoder.pe.pe"]
    torch.save(ckpt, tmp_path / "both.pt")
    with pytest.raises(ReferenceCheckpointError, match="both"):
        read_reference(tmp_path / "both.pt")
