"""Training with torchrun and DistributedDataParallel (two CPU processes, Gloo): the same weights as one
process with the same global batch, and a kill and resume under DDP that loses nothing."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ["train", "--dataset", "digits", "--variant", "damcha", "--n-layer", "1", "--n-embd", "16",
         "--generator-widths", "16", "--dropout", "0", "--batch-size", "33",  # 33: shards of 17 and 16 rows
         "--device", "cpu"]  # Gloo on the CPU also where a GPU is present (one GPU cannot host two ranks)


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "damcha", *args]


def largest_difference(a: Path, b: Path) -> float:
    wa, wb = load_file(str(a)), load_file(str(b))
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def test_two_gloo_processes_end_with_the_weights_of_one(tmp_path):
    args = [*TRAIN, "--epochs", "1", "--snapshot-epochs", "1"]
    one = subprocess.run([sys.executable, "-m", "damcha", *args, "--out", str(tmp_path / "one")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run(torchrun(*args, "--out", str(tmp_path / "two"), "--log-dir", str(tmp_path / "tb")), cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 1  # rank 0 alone logs
    diff = largest_difference(tmp_path / "one" / "epoch_0001.safetensors", tmp_path / "two" / "epoch_0001.safetensors")
    assert diff < 1e-5  # float summation order only
    rows = (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2  # rank 0 alone wrote the metrics


def test_a_run_killed_under_ddp_resumes_to_the_same_weights(tmp_path):
    args = [*TRAIN, "--epochs", "3", "--snapshot-epochs", "3"]
    straight = subprocess.run(torchrun(*args, "--out", str(tmp_path / "straight")), cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
    assert straight.returncode == 0, straight.stderr
    out = tmp_path / "killed"
    proc = subprocess.Popen(torchrun(*args, "--out", str(out)), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    metrics = out / "metrics.jsonl"
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:  # epoch 1 written
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not (out / "epoch_0003.safetensors").exists()  # killed before the end
    resumed = subprocess.run(torchrun(*args, "--out", str(out)), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert largest_difference(tmp_path / "straight" / "epoch_0003.safetensors", out / "epoch_0003.safetensors") < 1e-6
