"""Whether a training run fits the device it runs on, decided before anything is allocated: the weights,
their gradients and Adam's two moments (divided over the ranks a sharded run spreads them on), and the
activations one batch saves for the backward pass, measured by running the model on the meta device
(shapes only, nothing allocated) and summing what autograd saves. A run that does not fit is refused in
words, with the numbers; one that fits sharded and not whole says so.

The activations are measured eagerly in float32, along the kernels the meta device dispatches to: with dropout
this is what a real CPU forward saves, byte for byte; without it a real forward may take fused attention kernels
that save less (measured: 0.92x to 2.14x of the real saves over the registered variants), and a bf16
(autocast) or compiled run holds less again, so the estimate mostly errs on the side of refusing. HEADROOM leaves room for what the sum does not see (the gradients
of activations during the backward pass, the allocator's fragmentation, the CUDA context)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Literal

import torch

from damcha.model.config import ModelConfig
from damcha.model.transformer import build_model

HEADROOM = 0.85  # the share of a device's memory a run may plan to fill
ADAM_STATES = 2  # exp_avg and exp_avg_sq, each the size of the weights


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one device holds while training: weights, gradients and optimiser state (each divided over
    `shards` ranks under FSDP2), and the activations of its batch (None: not measurable for this model
    on the meta device; then only the rest is checked, and the sentence says so)."""

    parameters: int
    weights: int
    gradients: int
    optimiser: int
    activations: int | None
    batch: int
    shards: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimiser + (self.activations or 0)

    def sentence(self) -> str:
        gib = _gib
        spread = f" (weights, gradients and Adam's state over {self.shards} ranks)" if self.shards > 1 else ""
        held = (f"activations of a batch of {self.batch} {gib(self.activations)}" if self.activations is not None
                else "activations not measured (the model does not run on the meta device)")
        return (f"{self.parameters:,} parameters: weights {gib(self.weights)}, gradients {gib(self.gradients)}, "
                f"Adam's state {gib(self.optimiser)}{spread}, {held}; {gib(self.total)} a device")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


@functools.lru_cache(maxsize=256)  # a plan asks again for the same runs (whole, then sharded; per device)
def saved_activation_bytes(config: ModelConfig, batch: int) -> int | None:
    """Bytes autograd saves for the backward pass of one training forward of `batch` sequences of
    config.block_size, each storage counted once and the weights not at all, measured on the meta device
    (None where a mechanism's forward does not run there)."""
    with torch.device("meta"):
        model = build_model(config)
    weights = {id(p) for p in model.parameters()}
    held: dict[int, int] = {}
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if id(base) not in weights and id(base) not in held:
            held[id(base)] = base.untyped_storage().nbytes()
            keep.append(base)  # alive until the sum, so no id is reused by another tensor
        return t

    T = config.block_size
    if config.input_dim:
        x = torch.zeros(batch, T, config.input_dim, device="meta")  # (B, T, input_dim)
        y = x
    else:
        x = torch.zeros(batch, T, dtype=torch.long, device="meta")  # (B, T)
        y = torch.zeros(batch, dtype=torch.long, device="meta") if config.n_classes else x  # (B,) or (B, T)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x, targets=y, stochastic=True)
    except (NotImplementedError, RuntimeError):
        return None
    return sum(held.values())


def training_memory(config: ModelConfig, batch: int, shards: int = 1, checkpointing: bool = False) -> MemoryEstimate:
    """What one device holds training `config` on batches of `batch` (its own share of the batch under
    data parallelism), its weights spread over `shards` ranks (FSDP2; 1: every rank holds them whole).
    With activation checkpointing the blocks keep only their inputs and one block's activations exist at
    a time (an estimate: the measured activations divided over the layers, plus each layer's input)."""
    n = config.parameter_estimate()
    whole = n * 4  # float32 master weights (autocast computes in bf16 from them)
    activations = saved_activation_bytes(config, batch)
    if activations is not None and checkpointing:
        inputs = config.n_layer * batch * config.block_size * config.n_embd * 4
        activations = activations // config.n_layer + inputs
    share = -(-whole // shards)
    return MemoryEstimate(n, share, share, ADAM_STATES * share, activations, batch, shards)


class DoesNotFit(ValueError):
    """A run whose estimated memory exceeds what its device offers (refused before anything is allocated)."""


def device_memory(device: torch.device) -> int:
    """Bytes a run may count on: a GPU's free memory now, or the host's available memory (MemAvailable:
    free pages and the caches the kernel can drop) for the CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_training_fits(config: ModelConfig, rows: int, device: torch.device, world: int = 1,
                        sharded: bool = False, checkpointing: bool = False) -> MemoryEstimate:
    """The estimate of one rank's memory holding the activations of `rows` rows at once (its share of the global
    batch, or its micro-batch; the weights spread over the `world` ranks when sharded), refused with the numbers
    where the device does not offer it."""
    estimate = training_memory(config, rows, world if sharded else 1, checkpointing)
    check_fits(estimate, device_memory(device), f"one {device.type} device" + (f" of {world}" if world > 1 else ""))
    return estimate


AUTO_MICRO_BATCH = -1  # TrainConfig.micro_batch_size: the largest micro-batch the memory plan fits


@dataclass(frozen=True)
class TrainingPlan:
    """How each rank trains: whole ("ddp") or sharded ("fsdp", FSDP2), its share of the batch in micro-batches of
    `micro_batch` rows (gradients accumulated), and the memory one device then holds."""

    strategy: Literal["ddp", "fsdp"]
    micro_batch: int
    estimate: MemoryEstimate


def plan_training(config: ModelConfig, batch_size: int, available: int, world: int = 1, micro_batch: int = 0,
                  strategies: tuple[str, ...] = ("ddp", "fsdp"), checkpointing: bool = False) -> TrainingPlan:
    """How `world` ranks of `available` bytes each train `config` on a global batch of `batch_size`: each rank its
    share, in micro-batches of `micro_batch` rows (0: the share at once; AUTO_MICRO_BATCH: the largest of the share,
    its half, its quarter, ... down to one row that fits), "ddp" where a rank holds the whole model, its gradients and
    Adam's state, else "fsdp" (each rank 1/world of them, world > 1 only) at a larger micro-batch than ddp fits.
    Refused with the estimates at the smallest micro-batch tried where nothing fits. checkpointing: activation
    checkpointing's estimate (training_memory)."""
    per_rank = -(-batch_size // world)
    sizes = _halvings(per_rank) if micro_batch == AUTO_MICRO_BATCH else (min(micro_batch or per_rank, per_rank),)
    # (one rank: whole, whatever was asked)
    tried = [s for s in ("ddp", "fsdp") if s in strategies and (s == "ddp" or world > 1)] or ["ddp"]
    for size in sizes:
        for strategy in tried:
            estimate = training_memory(config, size, world if strategy == "fsdp" else 1, checkpointing)
            if estimate.total <= HEADROOM * available:
                return TrainingPlan(strategy, size, estimate)
    whole = training_memory(config, sizes[-1], 1, checkpointing)
    sharded = training_memory(config, sizes[-1], world, checkpointing) if "fsdp" in tried else None
    rows = f"in micro-batches of {sizes[-1]} row{'s' if sizes[-1] != 1 else ''}, " if sizes[-1] < per_rank else ""
    spread = f"; sharded over {world} ranks, {sharded.sentence()}" if sharded else ""
    raise DoesNotFit(f"{rows}{whole.sentence()}{spread}; against {HEADROOM:.0%} of {_gib(available)} a device")


def _halvings(n: int) -> tuple[int, ...]:
    """n, then halved (rounded up) down to 1: the micro-batch sizes a plan tries, largest first."""
    sizes = [n]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // 2))
    return tuple(sizes)


def check_fits(estimate: MemoryEstimate, available: int, where: str) -> None:
    """Refuse, with the numbers, a run whose estimate exceeds HEADROOM of `available` bytes on `where`."""
    if estimate.total > HEADROOM * available:
        whole = "" if estimate.shards > 1 else (
            " Under torchrun with --strategy fsdp each rank holds 1/N of the weights, gradients and Adam's state;"
            " --activation-checkpointing keeps only each block's input.")
        raise DoesNotFit(f"this run does not fit {where}: {estimate.sentence()}, against {HEADROOM:.0%} of its "
                          f"{_gib(available)}.{whole} Take each step's batch in micro-batches (--micro-batch-size "
                          "auto: the largest that fits), or run it on larger devices.")
