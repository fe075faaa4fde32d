"""Training on several processes with PyTorch's DistributedDataParallel, started by torchrun.

    torchrun --nproc_per_node 2 -m damcha train ...        (Gloo on CPU, NCCL on CUDA)

torchrun sets WORLD_SIZE, RANK and LOCAL_RANK (and the rendezvous; for several nodes use its
standard --nnodes/--node_rank/--rdzv_* flags). Every process walks the same seeded global batches
and takes its share of each (rows rank, rank + world, ...); DDP averages the gradients, and each
process's loss is weighted by its share of the batch, so a step equals the single-process step on
the whole batch (to float rounding) whatever the shard sizes. Rank 0 alone evaluates and writes
metrics, snapshots and the training state; every rank reads the state to resume.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Process:
    """This process's place in the job: rank 0 of 1 when not distributed."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def start(device: torch.device) -> Process:
    """Join the process group torchrun describes in the environment (no group for a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Process()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        # a group left for the interpreter's teardown can abort the process after its work is done (Gloo's
        # threads: "terminate called without an active exception"); the group this call made ends first
        atexit.register(_end_group)
    return Process(dist.get_rank(), dist.get_world_size())


def _end_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def device_for(device: torch.device) -> torch.device:
    """Each process of a CUDA job uses the GPU of its local rank."""
    if device.type == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def shard(tensor: torch.Tensor, proc: Process) -> torch.Tensor:
    """This process's rows of a global batch."""
    return tensor[proc.rank::proc.world] if proc.distributed else tensor


def barrier(proc: Process) -> None:
    if proc.distributed:
        dist.barrier()


def total(value: torch.Tensor, proc: Process) -> torch.Tensor:
    """The sum of a tensor over the processes (itself when alone)."""
    if proc.distributed:
        value = value.clone()
        dist.all_reduce(value)
    return value


