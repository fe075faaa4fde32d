"""Training with FSDP2 — torch's own `fully_shard` — and activation checkpointing.

    torchrun --nproc_per_node 8 -m damcha train --strategy fsdp [--activation-checkpointing] ...

Each rank holds a shard of every parameter and of its optimiser state; a block's weights are
gathered for its forward and again for its backward and freed after each; the shared generator's
stay gathered from its forward to its backward (one gather a step instead of two). The shared metric generator is sharded
first (at the paper's size its last layer is 134M of the model's 166M parameters), then each block,
then the root (embeddings, final norm, head). The generator's entry points other than `forward`
that a mechanism declares (`Mechanism.shared_entry_points`) are registered with
`register_fsdp_forward_method`, so they gather their weights too.

Batches, loss weighting and gradient averaging are DDP's (damcha.runs.distributed): a step equals
the one-process step on the whole batch to float rounding. Evaluation and snapshots need the full
weights: every rank takes part in gathering them (`get_model_state_dict(full_state_dict=True)`),
rank 0 alone receives them into an unsharded copy of the model, evaluates it and writes the usual
single-file snapshot. The training state is sharded: each rank writes its shards through
`torch.distributed.checkpoint` into `training_state_fsdp/` (two folders in turn), and rank 0 then
records the epoch and step and which folder holds them, so a run killed at any point — saving
included — resumes from its last complete epoch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from damcha.runs.checkpoints import CheckpointError, write_text_atomic
from damcha.runs.distributed import Process

if TYPE_CHECKING:
    from damcha.model.transformer import Transformer

STRATEGIES = ("ddp", "fsdp")  # ddp: every rank holds the whole model; fsdp: each rank a shard
STATE_DIR = "training_state_fsdp"
STATE_META = "progress.json"


def checkpoint_activations(model: Transformer) -> None:
    """Recompute each block's activations, and the shared metric's, in the backward pass instead
    of keeping them (use_reentrant=False; dropout draws the same masks again): less memory for
    more compute. Applied before sharding."""
    from torch.distributed._composable import checkpoint

    if model.metric_source is not None:
        checkpoint(model.metric_source)
    for block in model.blocks:
        checkpoint(block)


def shard(model: Transformer, device: torch.device) -> None:
    """fully_shard the shared structure module, each block, then the root, over every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    if device.type == "cuda":
        torch.cuda.set_device(device)  # the mesh places each rank on the current device: its own GPU
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    source = getattr(model, "metric_source", None)
    if source is not None:
        # Kept gathered from its forward to its backward: gathering it again for the backward made a
        # DAMCHA step 1.46x DDP's instead of 1.25x (benchmarks/scale.py, width 256, 2 Gloo processes);
        # its weights still live sharded between steps, its gradients and Adam state always.
        fully_shard(source, mesh=mesh, reshard_after_forward=False)
        for name in model.mechanism.shared_entry_points:
            register_fsdp_forward_method(source, name)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def gather_full_weights(model: nn.Module, into: nn.Module | None) -> None:
    """Every rank takes part; rank 0 receives the full weights into `into` (an unsharded copy)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full: dict[str, Any] = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if into is not None:
        device = next(into.parameters()).device
        into.load_state_dict({k: v.to(device) for k, v in full.items()})


def has_state(run_dir: Path) -> bool:
    return (Path(run_dir) / STATE_DIR / STATE_META).is_file()


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The sharded weights, and the optimiser's state once it has one: asked for an empty optimiser's
    state, torch's state_dict helpers create it by a step at learning rate 0, which would count one
    Adam step too many (before epoch 1 the optimiser has none, and none is saved)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if not opt.state:
        return {"model": get_model_state_dict(model)}
    weights, optimiser = get_state_dict(model, opt)
    return {"model": weights, "optim": optimiser}


def save_state(run_dir: Path, model: nn.Module, opt: torch.optim.Optimizer, epoch: int, step: int, proc: Process) -> None:
    """Each rank writes its shards, into the one of two folders the last state does not use; rank 0
    then points the progress record at them (written last and atomically: a run killed while saving
    resumes from the state before)."""
    import torch.distributed.checkpoint as dcp

    folder = Path(run_dir) / STATE_DIR
    shards = f"shards-{epoch % 2}"
    state = _state(model, opt)
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    writer = dcp.FileSystemWriter(folder / shards, overwrite=True,  # safetensors: nothing is unpickled on resume
                                  serialization_format=SerializationFormat.SAFETENSORS)
    dcp.save(state, storage_writer=writer)
    dist.barrier()
    if proc.main:
        write_text_atomic(folder / STATE_META, json.dumps({"epoch": epoch, "step": step, "shards": shards,
                                                           "world": dist.get_world_size(), "optimiser": "optim" in state}))
    dist.barrier()


def load_state(run_dir: Path, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, int]:
    """Restore every rank's shards of the weights and optimiser state (any world size: the
    checkpoint reshards); returns (epoch, step)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    folder = Path(run_dir) / STATE_DIR
    try:
        meta = json.loads((folder / STATE_META).read_text())
        epoch, step, with_optimiser = int(meta["epoch"]), int(meta["step"]), bool(meta["optimiser"])
        shards = str(folder / meta["shards"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{folder}: not a sharded training state ({e})") from None
    if with_optimiser:
        weights, optimiser = get_state_dict(model, opt)  # creates the optimiser's state, overwritten by the load
        state: dict[str, Any] = {"model": weights, "optim": optimiser}
        dcp.load(state, checkpoint_id=shards)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    else:
        state = {"model": get_model_state_dict(model)}  # (dict[str, Any], as above)
        dcp.load(state, checkpoint_id=shards)
        set_model_state_dict(model, state["model"])
    return epoch, step
