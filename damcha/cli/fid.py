"""`damcha fid`: FID of a pixel run's drawn images against its data set's test images (damcha.runs.fid)."""

from __future__ import annotations

import argparse

from tqdm import tqdm

from damcha.inputs.datasets import load_dataset
from damcha.inputs.modalities import modality_named
from damcha.runs.checkpoints import load_model, load_run
from damcha.runs.fid import (
    FID_TOP_50_UNDEFINED,
    INCEPTION_WEIGHTS,
    fid_score,
    generated_images,
    inception_weights,
    pictures,
)
from damcha.runs.train import pick_device


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Draw images from a pixel run (each pixel from the model's distribution, seeded) and score them "
                     "with FID against the run's test images as the model sees them (in its colour coding, so the "
                     "score is the model's, not its palette's rounding). Needs damcha[fid] and the standard Inception "
                     "weights on disk: nothing is downloaded.")
    p.add_argument("run", help="run directory of a model that generates images (e.g. trained on cifar10-pixels)")
    p.add_argument("--fid-weights", required=True, help=f"torch-fidelity's {INCEPTION_WEIGHTS}")
    p.add_argument("--data-path", required=True, help="the run's data set folder (its test images are the real ones)")
    p.add_argument("--images", type=int, default=1000, help="images drawn, and test images compared (default 1000)")
    p.add_argument("--epoch", type=int, help="the snapshot to draw from (default: the last)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    p.add_argument("--nonstandard-data", action="store_true",
                   help="accept a data folder whose files differ from the published ones")


def run(args) -> int:
    if args.images < 2:
        raise ValueError(f"--images must be at least 2 (FID compares covariances), not {args.images}")
    weights = inception_weights(args.fid_weights)  # refused in words before anything is drawn
    run = load_run(args.run)
    modality = modality_named(run.model_config.modality)
    if modality.start_token is None:
        raise ValueError(f"run {run.name} reads {modality.title}: it does not generate images to score with FID")
    data = load_dataset(run.dataset, args.data_path, split_seed=int(run.train_config.get("split_seed", 0)),
                        nonstandard_ok=args.nonstandard_data) if run.dataset else None
    if data is None or not data.has_test:
        raise ValueError(f"data set {run.dataset!r} has no test split to compare with")
    targets = data.tensor("test_targets")[:args.images].numpy()  # (N, 1024)
    real = pictures(modality, targets)  # (N, 32, 32, 3)
    device = pick_device(args.device)
    model = load_model(run, args.epoch, device=device)
    bar = tqdm(total=args.images, desc="drawing images", unit="image")
    drawn = generated_images(model, args.images, seed=args.seed, progress=bar.update)
    bar.close()
    score = fid_score(real, drawn, weights=weights, device=device)
    print(f"FID {score.fid:.3f}: {score.generated} images drawn from {run.name} (epoch "
          f"{run.epochs[-1] if args.epoch is None else args.epoch}, seed {args.seed}) against {score.real} test images "
          f"of {run.dataset} in the model's colour coding; Inception weights {score.weights}")
    print(FID_TOP_50_UNDEFINED)
    return 0
