"""`damcha train`: one model, with per-epoch metrics and snapshots (an interrupted run resumed)."""

from __future__ import annotations

import argparse

from damcha.cli.flags import option
from damcha.model.config import variant_config
from damcha.model.mechanisms import get_mechanism, mechanism_names, variants
from damcha.runs.allocator import keep_freed_memory
from damcha.runs.train import train
from damcha.runs.train_flags import add_settings_flags, settings_from
from damcha.views.training_log import TensorBoardLog


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Train a model. Every setting's flag, type and default come from the config dataclasses "
                     "(damcha.runs.train_flags); --config replays a saved run.")
    p.add_argument("--variant", choices=[v.name for v in variants()],
                   help="attention variant (default: damcha, or the replayed run's): "
                        + "; ".join(f"{v.name}: {v.description}" for v in variants()))
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", type=option,
                   help="a setting of the variant's mechanism (repeatable): "
                        + "; ".join(f"{m.name}: " + ", ".join(s.describe() for s in m.declared_settings)
                                    for m in map(get_mechanism, mechanism_names()) if m.config_options))
    add_settings_flags(p)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training step (20-40 s to compile; pays for long runs of large models)")
    p.add_argument("--strategy", choices=("ddp", "fsdp", "auto"), default="ddp",
                   help="under torchrun: ddp (every process holds the model) or fsdp (FSDP2: each holds a shard "
                        "of the weights and optimiser state); the same steps either way. auto: ddp where one device "
                        "holds the whole model and its optimiser state, else fsdp. Either way a run that does not "
                        "fit its device is refused, with its estimated memory, before anything is allocated")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each block's and the shared metric's activations in the backward pass: "
                        "less memory, more compute")
    p.add_argument("--out", required=True, help="run directory (an interrupted run there is resumed)")
    p.add_argument("--log-dir", help="also write TensorBoard event files here while training (losses, learning rate, "
                                     "tokens/s; at snapshots the structures as images and an embedding); "
                                     "needs pip install 'damcha[tensorboard]'")



def run(args) -> int:
    keep_freed_memory()  # this process only trains: keep freed blocks rather than re-fault them
    base, tcfg, replaying = settings_from(args)
    model_config = base if replaying and not args.variant else variant_config(base, args.variant or "damcha")
    if args.option:
        model_config = model_config.with_settings(**dict(args.option))
    observer = None
    if args.log_dir:
        observer = TensorBoardLog(args.log_dir)
    result = train(model_config, tcfg, args.out, compile_model=args.compile, observer=observer, strategy=args.strategy,
                   activation_checkpointing=args.activation_checkpointing)
    print(f"done: {result.run_dir} ({result.seconds:.1f} s)")
    return 0

