"""Kill a training run at random points (SIGKILL, several seeds) and resume: the final weights and
metrics equal an uninterrupted run's, and no snapshot is ever corrupt."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from damcha.runs.checkpoints import load_model, load_run

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--dataset", "digits", "--variant", "damcha", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
        "--generator-widths", "16", "--epochs", "3", "--batch-size", "128", "--dropout", "0.1", "--device", "cpu"]


def _train(out: Path, kill: tuple[int, float] | None = None) -> int:
    """Train to the end, or (kill = (rows, delay)) kill the run `delay` seconds after it has written `rows`
    new rows of metrics: after an event of training, never while the interpreter is still importing."""
    metrics = out / "metrics.jsonl"

    def written() -> int:
        return len(metrics.read_text().splitlines()) if metrics.exists() else 0

    before = written()
    cmd = [sys.executable, "-m", "damcha", "train", *ARGS, "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if kill is None:
        return proc.wait(timeout=600)
    rows, delay = kill
    while proc.poll() is None and written() < before + rows:
        time.sleep(0.02)
    time.sleep(delay)  # somewhere in the epoch that follows, or in its writes
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=60)


def _rows(out: Path):
    return [{k: v for k, v in json.loads(line).items() if k not in ("epoch_seconds", "train_seconds")}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_kill_at_random_points_then_resume(tmp_path):
    straight = tmp_path / "straight"
    assert _train(straight) == 0
    reference = load_model(straight, 3).state_dict()
    for seed in range(2):
        out = tmp_path / f"killed{seed}"
        rng = random.Random(seed)
        for _ in range(2):  # killed after its k-th new row of metrics (an epoch's evaluation), then a random delay
            _train(out, kill=(rng.randint(1, 2), rng.uniform(0.0, 1.5)))
            if list(out.glob("epoch_*.safetensors")):
                run = load_run(out)  # every snapshot on disk after a kill is complete and loads
                for e in run.epochs:
                    load_model(run, e)
        assert _train(out) == 0
        assert _rows(out) == _rows(straight)
        got = load_model(out, 3).state_dict()
        assert all(torch.equal(reference[k], got[k]) for k in reference)
        assert not list(out.glob(".*.tmp"))
