"""A real one-node Slurm cluster on localhost for the tests: munged on its own key and socket, slurmctld
and slurmd from a generated slurm.conf (this machine's cores and memory, free private ports, state in
a temporary folder), no cgroups and no accounting. Debian's `slurm-wlm` and `munge` (installed by
.ci/run). Started as root, as CI runs; stopped at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str:
    """Why a cluster cannot start here ('' when it can)."""
    absent = [d for d in (*DAEMONS, "sbatch", "squeue", "sinfo", "scancel") if shutil.which(d) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the one-node cluster is started as root (as CI runs)"
    return ""


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _config(folder: Path, host: str, ports: list[int], ghost_node: bool, gpu: bool) -> str:
    memory_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
    return "\n".join([
        *(["GresTypes=gpu"] if gpu else []),
        "ClusterName=damcha-test", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={folder / 'munge.sock'}", "CredType=cred/munge",
        f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}", f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}", f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}", f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill", "MpiDefault=none", "ReturnToService=2", "KillWait=2",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN"
        + (" Gres=gpu:1" if gpu else ""),
        # A second node that never starts: the cluster counts two nodes, as a real one would.
        *(["NodeName=ghost NodeAddr=127.0.0.2 CPUs=1 RealMemory=100 State=DOWN"] if ghost_node else []),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


@contextmanager
def one_node_cluster(folder: Path, start_seconds: float = 60, ghost_node: bool = False,
                     gpu: bool = False) -> Iterator[dict]:
    """Start the cluster in `folder`; yield the environment its commands need (SLURM_CONF). ghost_node: the
    configuration also declares a second node, down (a multi-node cluster for the checks that count nodes).
    gpu: the node declares one GPU to Slurm (a GRES whose device file is /dev/null: jobs are allocated it and
    scheduled as on a GPU node, and find no CUDA device there)."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, host, _free_ports(2), ghost_node, gpu))
    if gpu:
        (folder / "gres.conf").write_text(f"NodeName={host} Name=gpu File=/dev/null\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    try:
        subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={folder / 'munge.sock'}",
                        f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                        f"--seed-file={folder / 'munged.seed'}"], check=True, capture_output=True, timeout=60)
        started.append("munged")
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-f", str(conf)], check=True, capture_output=True, env=env, timeout=60)
            started.append(daemon)
        deadline = time.monotonic() + start_seconds
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env)
            if state.returncode == 0 and "idle" in state.stdout.split():
                break
            if time.monotonic() > deadline:
                logs = "".join((folder / f"{d}.log").read_text()[-1500:] for d in ("slurmctld", "slurmd")
                               if (folder / f"{d}.log").exists())
                raise RuntimeError(f"the one-node cluster did not come up in {start_seconds:.0f} s (sinfo: "
                                   f"{state.stdout.strip() or state.stderr.strip()}); logs:\n{logs}")
            time.sleep(0.5)
        yield env
    finally:
        if "slurmctld" in started:
            subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, env=env, timeout=60)
        pids = []
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid_file = folder / f"{daemon}.pid"
            if daemon in started and pid_file.exists():
                try:
                    pids.append(int(pid_file.read_text().split()[0]))
                    os.kill(pids[-1], signal.SIGTERM)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(1)
        for pid in pids:  # a daemon still waiting on a job step that never ended (a test failed mid-job): gone
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
