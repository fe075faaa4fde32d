"""Evidence workers die with their command, even when it is killed while they still import torch
(their first seconds, before any pool initializer runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PARENT = r"""
import multiprocessing, sys, time
from concurrent.futures import ProcessPoolExecutor
from damcha.evidence.runner import _start_worker
from damcha.runs.workers import workers_die_with_this_process

guarded = sys.argv[1] == "guarded"
pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker)
if guarded:
    with workers_die_with_this_process():
        futures = [pool.submit(time.sleep, 600) for _ in range(2)]
else:
    futures = [pool.submit(time.sleep, 600) for _ in range(2)]
print(" ".join(map(str, pool._processes)), flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def workers_after_killing_the_parent(mode: str, after: float, wait: float) -> list[int]:
    """Start a command with two workers, SIGKILL it `after` seconds after they were spawned, and
    return the workers still alive `wait` seconds later (killing them then)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(after)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + wait
    while time.time() < deadline and any(map(alive, pids)):
        time.sleep(0.5)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    return left


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_command_killed_while_they_import():
    assert workers_after_killing_the_parent("guarded", 0.0, wait=20) == []


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_without_the_guard_workers_would_be_orphaned():
    """The negative control: the same pool without the marking leaves its workers alive."""
    assert len(workers_after_killing_the_parent("unguarded", 3.0, wait=5)) == 2
