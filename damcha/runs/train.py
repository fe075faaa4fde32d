"""Training with per-epoch evaluation, snapshots and exact resume.

Epoch 0 is the initialisation: it is evaluated and snapshotted before any step, because the
residue the app shows lives there. Every write is atomic (temporary file, then rename), and
every source of randomness is a function of (seed, epoch), so a run killed at any point and
resumed from its last complete epoch ends with the same weights and metrics as one that
never stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, get_args

import numpy as np
import torch
from tqdm import tqdm

from damcha import __version__
from damcha.inputs.datasets import DataSet, load_dataset, windows
from damcha.model.config import ModelConfig
from damcha.model.transformer import IGNORE_INDEX, Transformer, build_model
from damcha.runs import distributed, sharded
from damcha.runs.checkpoints import (
    CONFIG_FILE,
    FORMAT_VERSION,
    METRICS_FILE,
    STATE_FILE,
    TEST_FILE,
    CheckpointError,
    load_training_state,
    read_metrics,
    remove_stale_temp_files,
    save_snapshot,
    save_training_state,
    write_text_atomic,
)
from damcha.runs.evaluation import evaluate_epoch, test_metrics
from damcha.runs.memory import AUTO_MICRO_BATCH, check_training_fits, device_memory, plan_training
from damcha.runs.writer_lock import writer_lock

Optimizer = Literal["adam", "adamw"]  # adam: the paper's
Schedule = Literal["cosine", "constant"]
Precision = Literal["fp32", "bf16"]  # fp32: the exact reference; bf16: autocast for the training steps
Strategy = Literal["ddp", "fsdp", "auto"]  # auto: ddp where a rank holds the model, else fsdp (runs.memory)
OPTIMIZERS, SCHEDULES, PRECISIONS = get_args(Optimizer), get_args(Schedule), get_args(Precision)
CHOICE_TYPES = {"Optimizer": Optimizer, "Schedule": Schedule, "Precision": Precision}  # (as a field's type reads)


# TrainConfig fields that change no maths: left out of a run's config, so a run resumes whatever they are.
UNRECORDED = ("micro_batch_size",)


@dataclass(frozen=True)
class TrainConfig:
    dataset: str = "digits"
    data_path: str | None = None
    epochs: int = 30
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_fraction: float = 0.1
    optimizer: Optimizer = "adam"  # "adam" (the paper) | "adamw"
    weight_decay: float = 0.0
    schedule: Schedule = "cosine"  # "cosine" | "constant"
    warmup_steps: int = 0
    grad_clip: float = 1.0  # 0: off
    seed: int = 0
    split_seed: int = 0
    device: str = "auto"
    precision: Precision = "fp32"  # "fp32" (the exact reference) | "bf16" (autocast for the training steps)
    snapshot_epochs: tuple[int, ...] = ()  # empty: default_snapshot_epochs(epochs)
    steps_per_epoch: int = 100  # corpora only; digits epochs are full passes
    val_windows: int = 256  # corpora: non-overlapping validation windows evaluated
    completion_images: int = 64  # digits: validation images used for the completion error
    completion_samples: int = 4  # digits: samples per image averaged into the expected completion
    train_limit: int = 0  # > 0: train on the first N training samples only (smoke tests)
    nonstandard_data: bool = False  # accept a data file whose checksums differ from the published ones
    tuning_holdout: float = 0.0  # > 0: select on this fraction of the training data (DataSet.held_out_for_tuning)
    # > 0: each optimiser step's batch in micro-batches of at most this many rows, gradients accumulated: the step of
    # the whole batch (to float rounding) in the memory of a micro-batch; AUTO_MICRO_BATCH (-1): the largest the memory
    # plan fits the device (runs.memory.plan_training). Not in the run's config (it changes no maths).
    micro_batch_size: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "snapshot_epochs", tuple(int(e) for e in self.snapshot_epochs))
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size and lr must be positive")
        if self.micro_batch_size < AUTO_MICRO_BATCH:
            raise ValueError(f"micro_batch_size must be 0 (the whole batch at once), {AUTO_MICRO_BATCH} (the largest "
                             "the memory plan fits the device) or a number of rows")
        if not 0 <= self.tuning_holdout < 1:
            raise ValueError("tuning_holdout must be a fraction in [0, 1)")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}")
        if self.optimizer not in OPTIMIZERS or self.schedule not in SCHEDULES:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS} and schedule one of {SCHEDULES}")

    def snapshots(self) -> tuple[int, ...]:
        chosen = set(self.snapshot_epochs or default_snapshot_epochs(self.epochs))
        return tuple(sorted(e for e in chosen | {0, self.epochs} if 0 <= e <= self.epochs))


TRAIN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig) if not isinstance(f.default, tuple)}


def default_snapshot_epochs(epochs: int, n: int = 7) -> tuple[int, ...]:
    """Epoch 0, the last, and geometrically spread epochs between: early training moves fastest."""
    inner = np.rint(np.geomspace(1, epochs, max(n - 1, 2))).astype(int)
    return tuple(sorted({0, epochs, *inner.tolist()}))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but no CUDA device is available")
    return torch.device(name)


def model_config_for(data: DataSet, base: ModelConfig) -> ModelConfig:
    """The base config with the data-dependent fields filled in."""
    causal = data.task != "classification"
    input_dim = int(data.tensor("train_inputs").shape[-1]) if data.task == "next_vector" else 0
    return dataclasses.replace(
        base, vocab_size=data.vocab_size or 1, block_size=data.block_size, causal=causal,
        n_classes=data.n_classes if not causal else 0, input_dim=input_dim, modality=data.modality,
    )


# ----------------------------------------------------------------------------- optimiser

def make_optimizer(model: Transformer, tcfg: TrainConfig) -> torch.optim.Optimizer:
    cls = torch.optim.Adam if tcfg.optimizer == "adam" else torch.optim.AdamW
    # fused: one kernel over all parameters. A DAMCHA generator's naive last layer holds most of
    # the parameters (D*D*w), and the per-tensor loop spent 5x longer on it (39 vs 8 ms a step at
    # D=128, w=512). The update rule is the same; the rounding may differ in the last bit.
    return cls(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay, fused=True)


def lr_at(step: int, total: int, tcfg: TrainConfig) -> float:
    if tcfg.warmup_steps and step < tcfg.warmup_steps:
        return tcfg.lr * (step + 1) / tcfg.warmup_steps
    if tcfg.schedule == "constant":
        return tcfg.lr
    progress = min(1.0, (step - tcfg.warmup_steps) / max(1, total - tcfg.warmup_steps))
    floor = tcfg.lr * tcfg.min_lr_fraction
    return floor + 0.5 * (tcfg.lr - floor) * (1 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------- the loop

@dataclass
class TrainResult:
    run_dir: Path
    metrics: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def run_config_dict(model_config: ModelConfig, tcfg: TrainConfig, data: DataSet) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
        "model": model_config.to_dict(),
        "train": {**{k: v for k, v in dataclasses.asdict(tcfg).items() if k not in UNRECORDED},
                  "snapshot_epochs": list(tcfg.snapshots())},
        "data": {"name": data.name, "task": data.task, "unit": data.unit, **data.split},
    }


class TrainingObserver(Protocol):
    """What watches a run while it trains (a TensorBoard log: damcha.analysis.training_log); called
    on the main process only, after the step or epoch it reports is done."""

    def step(self, step: int, loss: float, lr: float, tokens_per_second: float) -> None: ...

    def epoch(self, row: dict, model: Transformer, data: DataSet, snapshot: bool) -> None: ...

    def close(self) -> None: ...


def train(model_config: ModelConfig, tcfg: TrainConfig, out_dir: str | Path, progress: bool = True,
          stop_after_epoch: int | None = None, compile_model: bool = False,
          observer: TrainingObserver | None = None, strategy: Strategy = "ddp",
          activation_checkpointing: bool = False, evaluate_every_epoch: bool = True) -> TrainResult:
    """Train (or resume) a run into out_dir. stop_after_epoch simulates an interruption (tests).
    observer: told of every step and epoch (rank 0 only under torchrun); closed at the end.

    strategy: under torchrun, "ddp" (every rank holds the model) or "fsdp" (FSDP2: each rank a
    shard; damcha.runs.sharded); the same steps to float rounding. "auto": ddp where one device holds the
    whole model, its gradients and Adam's state beside its share of the batch, else fsdp (damcha.runs.memory). activation_checkpointing:
    recompute each block's and the shared metric's activations in the backward pass. Neither
    changes the maths, so the run's config records neither; a sharded run resumes under fsdp.

    evaluate_every_epoch: False evaluates the last epoch only (the other rows hold the running training
    loss and timings), for callers that score the trained model themselves: the evaluation (sampled
    completions above all) costs a small digits run about a fifth of its time. It changes no training step
    (each epoch seeds its own generators), so the config does not record it either.

    compile_model: run the training steps through torch.compile (evaluation stays eager). It
    pays for large models and long runs only: compiling takes 20-40 s on 2 CPU cores (again for
    a short last batch). The maths is unchanged, but compiled dropout draws its masks from
    inductor's own generator, so a compiled run is another draw of the same training, not a
    bit-for-bit copy. The run's config does not record it: resuming may switch it on or off.
    """
    out = Path(out_dir)
    device = distributed.device_for(pick_device(tcfg.device))
    proc = distributed.start(device)  # one process, or this process's rank in a torchrun job
    progress = progress and proc.main
    # the data first: a file refused (wrong checksum, missing, damaged) leaves nothing behind
    data = _training_data(tcfg, model_config.block_size)
    out.mkdir(parents=True, exist_ok=True)
    # one writer a run folder (rank 0 for a torchrun job), before stale temporary files are cleared
    with writer_lock(out) if proc.main else contextlib.nullcontext():
        if proc.main:
            remove_stale_temp_files(out)
        mcfg = model_config_for(data, model_config)
        if strategy == "auto" or tcfg.micro_batch_size == AUTO_MICRO_BATCH:  # the memory plan decides (runs.memory)
            plan = plan_training(mcfg, tcfg.batch_size, device_memory(device), proc.world, tcfg.micro_batch_size,
                                 ("ddp", "fsdp") if strategy == "auto" else (strategy,), activation_checkpointing)
            strategy = plan.strategy if strategy == "auto" else strategy
            tcfg = dataclasses.replace(tcfg, micro_batch_size=plan.micro_batch)
        share = -(-tcfg.batch_size // proc.world)  # this rank's rows of a step
        held = min(tcfg.micro_batch_size or share, share)  # the rows whose activations are held at once
        check_training_fits(mcfg, held, device, proc.world, strategy == "fsdp" and proc.distributed,
                            activation_checkpointing)  # refused with its numbers before anything is allocated
        models = _Models.built(mcfg, tcfg, device, proc, strategy, activation_checkpointing, compile_model)
        opt = make_optimizer(models.trained, tcfg)
        distributed.barrier(proc)  # every rank sees the same files before deciding to resume
        start = _resume_point(out, run_config_dict(mcfg, tcfg, data), tcfg, models, opt, proc, progress)
        distributed.barrier(proc)
        observer = observer if proc.main else None
        if start.complete:
            if observer is not None:
                observer.close()
            return TrainResult(out, start.metrics, 0.0)
        t0 = time.perf_counter()
        try:
            metrics = _run_epochs(_Training(out, tcfg, mcfg, data, device, proc, progress, models, opt, observer), start,
                                  stop_after_epoch, evaluate_every_epoch)
        finally:
            if observer is not None:
                observer.close()
        return TrainResult(out, metrics, time.perf_counter() - t0)


def _training_data(tcfg: TrainConfig, block_size: int) -> DataSet:
    """The run's data: its tuning hold-out taken out and its training set cut to train_limit, as asked."""
    data = load_dataset(tcfg.dataset, tcfg.data_path, block_size, tcfg.split_seed, tcfg.nonstandard_data)
    if tcfg.tuning_holdout:
        data = data.held_out_for_tuning(tcfg.tuning_holdout)
    if tcfg.train_limit and not data.stream:
        data.train_inputs = data.tensor("train_inputs")[:tcfg.train_limit]
        data.train_targets = data.tensor("train_targets")[:tcfg.train_limit]
    return data


@dataclass
class _Models:
    """The model a run trains, the one rank 0 evaluates and snapshots (under fsdp an unsharded copy it
    gathers into; None on the other ranks) and the one the steps call (DDP- or compile-wrapped)."""

    trained: Transformer
    evaluated: Transformer | None
    stepped: torch.nn.Module
    fsdp: bool

    @classmethod
    def built(cls, mcfg: ModelConfig, tcfg: TrainConfig, device, proc: distributed.Process, strategy: Strategy,
              activation_checkpointing: bool, compile_model: bool) -> _Models:
        if strategy not in sharded.STRATEGIES:
            raise ValueError(f"strategy must be one of {sharded.STRATEGIES}")
        fsdp = strategy == "fsdp" and proc.distributed
        model = build_model(mcfg, seed=tcfg.seed).to(device)
        if activation_checkpointing:
            sharded.checkpoint_activations(model)
        evaluated: Transformer | None = model
        stepped: torch.nn.Module = model
        if fsdp:
            evaluated = build_model(mcfg).to(device) if proc.main else None
            sharded.shard(model, device)
        elif proc.distributed:
            stepped = torch.nn.parallel.DistributedDataParallel(model)
        compiled: torch.nn.Module = torch.compile(stepped) if compile_model else stepped  # type: ignore[assignment]
        return cls(model, evaluated, compiled, fsdp)


@dataclass(frozen=True)
class _Start:
    """Where a run starts: the first epoch to run, the step count and the rows kept before it; complete:
    the run is done already (metrics: all its rows)."""

    epoch: int = 0
    step: int = 0
    metrics: list[dict] = field(default_factory=list)
    complete: bool = False


def _resume_point(out: Path, config: dict, tcfg: TrainConfig, models: _Models, opt, proc: distributed.Process,
                  progress: bool) -> _Start:
    """A new run writes its config; an existing one must be the same run, and resumes after its last
    saved training state (loaded into the model and optimiser) with the rows up to it."""
    config_path = out / CONFIG_FILE
    if not config_path.exists():
        if proc.main:
            write_text_atomic(config_path, json.dumps(config, indent=2))
            write_text_atomic(out / METRICS_FILE, "")
        return _Start()
    existing = json.loads(config_path.read_text())
    fresh = json.loads(json.dumps(config))
    if isinstance(existing.get("train"), dict):  # a setting added since the run was saved: its default then
        existing["train"] = {k: v for k, v in {**TRAIN_DEFAULTS, **existing["train"]}.items() if k not in UNRECORDED}
    if any(existing.get(k) != fresh[k] for k in ("model", "train", "data")):
        raise CheckpointError(f"{out}: holds a different run (config differs); choose another output directory")
    done = read_metrics(out)
    if not (out / STATE_FILE).exists() and done and done[-1]["epoch"] >= tcfg.epochs:
        if progress:
            print(f"{out}: already complete ({tcfg.epochs} epochs)")
        return _Start(metrics=done, complete=True)
    whole_state, sharded_state = (out / STATE_FILE).exists(), sharded.has_state(out)
    own_state = sharded_state if models.fsdp else whole_state
    if not own_state and (whole_state or sharded_state):
        raise CheckpointError(f"{out}: its training state was saved by the other strategy; resume it with "
                              f"--strategy {'ddp' if models.fsdp else 'fsdp'} (under torchrun for fsdp)")
    start = _Start()  # killed before epoch 0 was complete: start afresh over the partial files
    if own_state:
        last, step = (sharded.load_state(out, models.trained, opt) if models.fsdp
                      else load_training_state(out, models.trained, opt))
        start = _Start(last + 1, step, [m for m in done if m["epoch"] <= last])  # rows past the state are redone
        if progress:
            print(f"resuming {out} after epoch {last}")
    if proc.main:
        write_text_atomic(out / METRICS_FILE, "".join(json.dumps(m) + "\n" for m in start.metrics))
    return start


@dataclass
class _Training:
    """What every epoch of a run uses."""

    out: Path
    tcfg: TrainConfig
    mcfg: ModelConfig
    data: DataSet
    device: torch.device
    proc: distributed.Process
    progress: bool
    models: _Models
    opt: torch.optim.Optimizer
    observer: TrainingObserver | None

    @property
    def steps_per_epoch(self) -> int:
        return _steps_per_epoch(self.data, self.tcfg)

    def train_epoch(self, epoch: int, step: int) -> _Epoch:
        """One epoch's optimiser steps from global step `step` (every rank its share of each batch); the
        running losses and the step after it."""
        began = time.perf_counter()
        tcfg, proc, opt, observer = self.tcfg, self.proc, self.opt, self.observer
        model, steps_per_epoch = self.models.stepped, self.steps_per_epoch
        total_steps = steps_per_epoch * tcfg.epochs
        model.train()
        total, total_aux = 0.0, None
        bar = tqdm(_epoch_batches(self.data, tcfg, epoch, steps_per_epoch), total=steps_per_epoch,
                   desc=f"epoch {epoch}", leave=False, disable=not self.progress, mininterval=1.0)
        for x, y in bar:
            t_step = time.perf_counter()
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total_steps, tcfg)
            n = len(x)
            x, y = distributed.shard(x, proc), distributed.shard(y, proc)  # this process's rows of the global batch
            # DDP averages gradients over processes: weighting each by its share of the batch makes the
            # step that of the whole batch, whatever the shard sizes.
            share = len(x) * proc.world / n
            out = optimiser_step(model, opt, x.to(self.device), y.to(self.device), tcfg, self.device, share)
            step += 1
            loss_value = distributed.total(out.task_loss.detach() * share / proc.world, proc).item()
            total += loss_value
            if out.aux_loss is not None:
                total_aux = (total_aux or 0.0) + distributed.total(out.aux_loss.detach() * share / proc.world, proc).item()
            bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
            if observer is not None:  # tokens of the whole batch (every process's share) per second of this step
                observer.step(step, loss_value, opt.param_groups[0]["lr"], n * x.shape[1] / (time.perf_counter() - t_step))
        model.eval()
        return _Epoch(epoch, step, began, time.perf_counter() - began, total / steps_per_epoch,
                      None if total_aux is None else total_aux / steps_per_epoch)

    def record_epoch(self, epoch: _Epoch, snapshot: bool, metrics: list[dict], evaluate: bool = True) -> dict:
        """Evaluate the epoch (unless not `evaluate`), write its row after `metrics`, its snapshot and the
        training state (rank 0 only; under fsdp the state is sharded and saved by every rank); returns the row.
        epoch_seconds: the whole epoch with its evaluation; train_seconds: its training steps alone."""
        model, data, tcfg, out = self.models.evaluated, self.data, self.tcfg, self.out
        assert model is not None  # (rank 0 evaluates)
        evaluated = evaluate_epoch(model, data, tcfg) if evaluate else {}
        row = {"epoch": epoch.epoch, "step": epoch.step, **evaluated, "train_loss_running": epoch.running,
               "epoch_seconds": round(time.perf_counter() - epoch.began, 3), "train_seconds": round(epoch.train_seconds, 3)}
        if epoch.running_aux is not None:  # the mechanism's auxiliary losses (MoA), apart from the task loss
            row["train_aux_loss_running"] = epoch.running_aux
        if snapshot:
            save_snapshot(out, epoch.epoch, model)
        if epoch.epoch == tcfg.epochs and data.has_test:  # written before the last row: a complete run has its test
            write_text_atomic(out / TEST_FILE, json.dumps({"epoch": epoch.epoch, **test_metrics(model, data, tcfg)},
                                                          indent=2))
        write_text_atomic(out / METRICS_FILE, "".join(json.dumps(m) + "\n" for m in [*metrics, row]))
        if not self.models.fsdp:
            save_training_state(out, model, self.opt, epoch.epoch, epoch.step)
        if self.progress and evaluate:
            tqdm.write(_epoch_line(self.mcfg, data, row))
        return row


@dataclass(frozen=True)
class _Epoch:
    """One epoch's training: the global step after it, when it began, its training steps' seconds and its
    running losses (None before any step: epoch 0)."""

    epoch: int
    step: int
    began: float
    train_seconds: float = 0.0
    running: float | None = None
    running_aux: float | None = None


def _epoch_batches(data: DataSet, tcfg: TrainConfig, epoch: int, steps_per_epoch: int):
    """The epoch's batches (x, y), drawn from generators seeded by the run's seed and the epoch (dropout's
    too), so a resumed epoch draws what it would have."""
    gen = torch.Generator().manual_seed(tcfg.seed * 100_003 + epoch)
    torch.manual_seed(tcfg.seed * 100_019 + epoch)  # dropout
    if data.stream:
        stream = data.tensor("train_stream")
        starts = torch.randint(0, len(stream) - data.block_size - 1, (steps_per_epoch, tcfg.batch_size), generator=gen)
        return (windows(stream, data.block_size, s) for s in starts)
    inputs, targets = data.tensor("train_inputs"), data.tensor("train_targets")
    perm = torch.randperm(len(inputs), generator=gen)
    return ((inputs[idx], targets[idx]) for idx in perm.split(tcfg.batch_size))


def _epoch_line(mcfg: ModelConfig, data: DataSet, row: dict) -> str:
    if data.task == "next_vector":
        return f"[{mcfg.variant} {data.name}] epoch {row['epoch']:3d}  train MSE {row['train_mse']:.5f}  val MSE {row['val_mse']:.5f}"
    extra = "".join(f" {k}={row[k]:.4f}" for k in ("val_accuracy", "val_completion_mse") if k in row)
    return (f"[{mcfg.variant} {data.name}] epoch {row['epoch']:3d}  train {row['train_nll']:.4f}  "
            f"val {row['val_nll']:.4f} nats = {row[f'val_bits_per_{data.unit}']:.4f} bits/{data.unit}{extra}")


def _run_epochs(run: _Training, start: _Start, stop_after_epoch: int | None, evaluate_every_epoch: bool) -> list[dict]:
    """Epochs start.epoch .. tcfg.epochs (epoch 0: evaluated before any step): train, then rank 0 evaluates,
    writes the row, the snapshot and the state (under fsdp every rank its shards); the rows written."""
    tcfg, models, proc = run.tcfg, run.models, run.proc
    snapshots = set(tcfg.snapshots())
    metrics, step = list(start.metrics), start.step
    for epoch in range(start.epoch, tcfg.epochs + 1):
        trained = run.train_epoch(epoch, step) if epoch > 0 else _Epoch(epoch, step, time.perf_counter())
        step = trained.step
        if models.fsdp:  # every rank takes part in gathering the full weights into rank 0's copy
            sharded.gather_full_weights(models.trained, models.evaluated)
        if proc.main:  # rank 0 evaluates and writes; the others wait for it at the barrier
            metrics.append(run.record_epoch(trained, epoch in snapshots, metrics,
                                            evaluate_every_epoch or epoch == tcfg.epochs))
            if run.observer is not None:
                assert models.evaluated is not None  # (an observer watches on rank 0, which evaluates)
                with torch.random.fork_rng(devices=[]):  # watching never changes what is trained
                    run.observer.epoch(metrics[-1], models.evaluated, run.data, epoch in snapshots)
        if models.fsdp:  # each rank writes its shards of the state (after the row, as one process does)
            sharded.save_state(run.out, models.trained, run.opt, epoch, step, proc)
        distributed.barrier(proc)
        if stop_after_epoch is not None and epoch >= stop_after_epoch:
            break
    return metrics


def _steps_per_epoch(data: DataSet, tcfg: TrainConfig) -> int:
    if data.stream:
        return tcfg.steps_per_epoch
    return math.ceil(len(data.tensor("train_inputs")) / tcfg.batch_size)


@dataclass(frozen=True)
class StepLosses:
    """One optimiser step's losses over its whole batch (micro-batches weighted by their share of its targets)."""

    task_loss: torch.Tensor
    aux_loss: torch.Tensor | None


def optimiser_step(model, opt, x: torch.Tensor, y: torch.Tensor, tcfg: TrainConfig, device: torch.device,
                   share: float = 1.0) -> StepLosses:
    """One training step on a batch already on the device (the loss weighted by `share`, this process's part
    of the global batch), in micro-batches of tcfg.micro_batch_size rows whose gradients add up to the batch's:
    each micro-batch's mean loss weighted by its share of the batch's counted targets. The cost table times
    this step (damcha.evidence.costs)."""
    size = tcfg.micro_batch_size or len(x)
    parts = list(zip(x.split(size), y.split(size)))
    counts = [_counted_targets(part_y) for _, part_y in parts]
    total = sum(counts) or 1  # (every target ignored: a step of no gradient, as the whole batch gives)
    opt.zero_grad(set_to_none=True)
    task, aux = torch.zeros((), device=device), None
    for (part_x, part_y), count in zip(parts, counts):
        weight = count / total
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=tcfg.precision == "bf16"):
            out = model(part_x, targets=part_y)
        (out.loss * share * weight).backward()  # the task loss plus the mechanism's auxiliary losses, if any
        task = task + out.task_loss.detach() * weight
        if out.aux_loss is not None:  # (a batch statistic, MoA's load balance: the micro-batches' weighted mean)
            aux = (aux if aux is not None else 0.0) + out.aux_loss.detach() * weight
    if tcfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
    opt.step()
    return StepLosses(task, aux)


def _counted_targets(y: torch.Tensor) -> int:
    """How many terms a batch's mean loss averages: target tokens that are not ignored, else rows."""
    return int((y != IGNORE_INDEX).sum()) if not y.is_floating_point() and y.dim() > 1 else len(y)
