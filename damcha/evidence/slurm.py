"""The evidence's units on a Slurm cluster (`damcha evidence --launcher slurm`), through submitit.

Every task (the units that share one trained run) is one element of a Slurm job array; the job runs
`run_task` exactly as a local worker does (one thread per CPU it is given) and its result comes back
to the command, which records it in the same resumable work folder with the same code as the local
pool. The command stays up while the jobs run: it submits a phase's tasks at once, records each
result as it lands, and submits again a task whose job vanished without a result (cancelled,
preempted without requeue, timed out, its node lost), up to `retries` times. A task whose code
raised is an error, not a retry: its log is named.

A unit may span several processes (ranks): `ranks_per_node` on each of `nodes_per_unit` nodes, one rank per
GPU where the unit asks for GPUs. Slurm starts the job's tasks together (srun); each exports the torch.distributed
environment of its allocation (submitit: rank, world, master address and port) and trains with the others
exactly as under torchrun (DDP, or FSDP2 where only sharded weights fit); rank 0's results come back.

Everything that can be checked before a job is submitted is: submitit installed, the Slurm commands
on PATH and the controller answering, the partition known, the work folder on storage every node
sees. Each refusal is one sentence naming the fix.
"""

from __future__ import annotations

import math
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from damcha.evidence.units import run_task

# File systems a compute node can see when the login node wrote to them (a local disk cannot).
SHARED_FILE_SYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "cifs", "smb3", "fuse.glusterfs",
                       "glusterfs", "panfs", "wekafs", "fuse.sshfs", "9p", "virtiofs")
POLL_SECONDS = 2.0  # how often the queue is read while jobs run (squeue: one call for every job)


class SlurmError(ValueError):
    """A Slurm launch refused or failed, in words (the command prints it as its one error line)."""


JOB_TIME_FACTOR, JOB_TIME_EXTRA = 1.5, 15  # a job's limit: its run's measured training x 1.5, + 15 minutes


def job_minutes(rows: list[dict], device: str, default: int) -> tuple[int, str]:
    """Each job's time limit from the budget's rows (costs.budget): the longest run's measured training times
    JOB_TIME_FACTOR plus JOB_TIME_EXTRA minutes (the evaluation, the start-up, compilation), where every run is
    costed on `device`; else `default`. With the sentence that says which, and why."""
    uncosted = sum(r["runs"] - r["measured_runs"] for r in rows)
    if not any(r["longest_run"] for r in rows):
        return default, f"the default: no run has a measured cost on {device}, so no job's length is known"
    if uncosted:
        return default, (f"the default: {uncosted} run(s) have no measured cost on {device}, so no job's length is "
                         "known; give --slurm-time where a run may take longer")
    claim, (arm, hours) = max(((r["claim"], r["longest_run"]) for r in rows if r["longest_run"]), key=lambda c: c[1][1])
    minutes = math.ceil(hours * 60 * JOB_TIME_FACTOR + JOB_TIME_EXTRA)
    return minutes, (f"from the cost table: the longest run, {claim} {arm}, trains for {hours:.2f} h on {device}; "
                     f"each job may take {JOB_TIME_FACTOR:g}x that plus {JOB_TIME_EXTRA} minutes (a unit spread over "
                     "several ranks is given the same)")


@dataclass(frozen=True)
class SlurmSettings:
    """What each job asks of Slurm. partition, account, qos: passed through (None: the cluster's default).
    time_minutes: each job's limit. cpus_per_unit: CPUs (and torch threads) per rank. gpus_per_unit: GPUs
    per node of a unit's allocation (one rank each). nodes_per_unit: nodes a unit spans. ranks_per_node:
    processes a unit trains with on each node (None: one per GPU, or one without GPUs; on CPUs, Gloo ranks).
    max_parallel: jobs of one array running at once. retries: resubmissions of a task whose job vanished
    without a result. mem, constraint: sbatch's --mem and --constraint; setup: shell lines each job runs before
    its units (a module load, a virtual environment's activation); sbatch: further sbatch options as
    (name, value) pairs, written as #SBATCH --name=value."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_minutes: int = 60
    cpus_per_unit: int = 1
    gpus_per_unit: int = 0
    nodes_per_unit: int = 1
    ranks_per_node: int | None = None
    max_parallel: int = 64
    retries: int = 2
    mem: str | None = None
    constraint: str | None = None
    setup: tuple[str, ...] = ()
    sbatch: tuple[tuple[str, str], ...] = ()

    @property
    def ranks_on_a_node(self) -> int:
        return self.ranks_per_node or max(1, self.gpus_per_unit)

    @property
    def ranks(self) -> int:
        """The processes one unit trains with."""
        return self.nodes_per_unit * self.ranks_on_a_node


def check(settings: SlurmSettings, work: Path) -> None:
    """Refuse, before anything is submitted, a launch that cannot work."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise SlurmError("--launcher slurm needs submitit: pip install 'damcha[cluster]' (or pip install submitit)"
                         ) from None
    for command in ("sbatch", "squeue", "sinfo", "scancel"):
        if shutil.which(command) is None:
            raise SlurmError(f"--launcher slurm: {command} is not on PATH; run the command on a Slurm login node (or "
                             "load the cluster's Slurm module first)")
    if settings.gpus_per_unit and settings.ranks_per_node not in (None, settings.gpus_per_unit):
        raise SlurmError(f"--ranks-per-node {settings.ranks_per_node} with --gpus-per-unit {settings.gpus_per_unit}: a "
                         "unit trains with one rank per GPU; leave --ranks-per-node out")
    if min(settings.cpus_per_unit, settings.time_minutes, settings.max_parallel, settings.nodes_per_unit,
           settings.ranks_on_a_node) < 1 or settings.retries < 0 or settings.gpus_per_unit < 0:
        raise SlurmError("--cpus-per-unit, --slurm-time, --slurm-parallel, --nodes-per-unit and --ranks-per-node must "
                         "be at least 1, --slurm-retries and --gpus-per-unit at least 0")
    partitions = _sinfo("%P")
    known = {p.rstrip("*") for p in partitions}
    if settings.partition is not None and settings.partition not in known:
        raise SlurmError(f"--slurm-partition {settings.partition}: not a partition of this cluster (it has: "
                         f"{', '.join(sorted(known)) or 'none'}); give one of those")
    nodes = sum(int(n) for n in _sinfo("%D") if n.isdigit())
    if settings.nodes_per_unit > nodes:
        raise SlurmError(f"--nodes-per-unit {settings.nodes_per_unit}: the cluster has {nodes} node(s); ask for at most "
                         "that many")
    kind = file_system(work)
    if nodes > 1 and kind not in SHARED_FILE_SYSTEMS:
        raise SlurmError(f"--work {work}: on a {kind} file system, which the cluster's other nodes cannot see (it has "
                         f"{nodes} nodes); put the work folder on shared storage (NFS, Lustre, GPFS, ...)")


def _sinfo(field: str) -> list[str]:
    try:
        done = subprocess.run(["sinfo", "-h", "-o", field], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmError(f"--launcher slurm: sinfo did not answer ({e}); check that the Slurm controller runs and "
                         "SLURM_CONF names its configuration") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SlurmError(f"--launcher slurm: the cluster does not answer (sinfo: {said}); check that the Slurm "
                         "controller runs and SLURM_CONF names its configuration")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def file_system(path: Path) -> str:
    """The type of the file system that holds `path` (or its nearest existing parent), as df names it."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    done = subprocess.run(["df", "--output=fstype", str(path)], capture_output=True, text=True, timeout=60)
    lines = done.stdout.split()
    return lines[-1] if done.returncode == 0 and len(lines) > 1 else "unknown"


def run_tasks(tasks: list[list], quick: bool, work: Path, setting, settings: SlurmSettings) -> Iterator[list]:
    """Run every task (a list of (arm, seed) units sharing a run) as one job-array element; yield each
    task's results [(unit, value, seconds), ...] as its job finishes."""
    import submitit
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    executor = submitit.AutoExecutor(folder=Path(work) / "slurm" / "%j", cluster="slurm")
    executor.update_parameters(
        name="damcha-evidence", timeout_min=settings.time_minutes, cpus_per_task=settings.cpus_per_unit,
        nodes=settings.nodes_per_unit, tasks_per_node=settings.ranks_on_a_node,
        slurm_array_parallelism=settings.max_parallel,
        **({"gpus_per_node": settings.gpus_per_unit} if settings.gpus_per_unit else {}),
        **({"slurm_setup": list(settings.setup)} if settings.setup else {}),
        **({"slurm_additional_parameters": dict(settings.sbatch)} if settings.sbatch else {}),
        **{f"slurm_{k}": v for k, v in (("partition", settings.partition), ("account", settings.account),
                                        ("qos", settings.qos), ("mem", settings.mem),
                                        ("constraint", settings.constraint)) if v is not None})

    def submit(indices: list[int]) -> dict[int, object]:
        try:
            jobs = executor.map_array(slurm_task, [tasks[i] for i in indices], [quick] * len(indices),
                                      [str(work)] * len(indices), [setting] * len(indices),
                                      [settings.cpus_per_unit] * len(indices))
        except (FailedJobError, FailedSubmissionError) as e:  # sbatch's refusal (account, partition, QoS, time, resources): its own words
            raise SlurmError(f"sbatch refused the evidence's jobs: {sbatch_reason(str(e))}; the units recorded so far "
                             "are kept") from None
        return dict(zip(indices, jobs))

    running, attempts = submit(list(range(len(tasks)))), dict.fromkeys(range(len(tasks)), 0)
    # Stopped (Ctrl-C, SIGTERM from a terminal or a scheduler) or failed, the command cancels what it submitted:
    # jobs left running would train on with nobody recording them, and a rerun would submit them again.
    previous = signal.signal(signal.SIGTERM, _interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        yield from _follow(running, attempts, submit, settings)
    except BaseException:
        _cancel(running.values())
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _follow(running: dict, attempts: dict, submit, settings: SlurmSettings) -> Iterator[list]:
    """Poll the jobs in `running` (index -> job; updated in place, so a stop cancels what is left) until each has
    a result, yielding each as it lands; a job that left the queue without one is submitted again."""
    while running:
        queued = _queued({job.job_id.split("_")[0] for job in running.values()})
        lost = []
        for index, job in list(running.items()):
            if job.paths.result_pickle.exists():
                results = _result(job)
                if results is None:  # timed out (submitit wrote why): again
                    lost.append(index)
                    continue
                del running[index]
                yield results
            elif job.job_id not in queued and not job.paths.result_pickle.exists():  # (it may have just written it)
                lost.append(index)
        for index in lost:
            attempts[index] += 1
            if attempts[index] > settings.retries:
                raise SlurmError(f"a job of the evidence's units left the queue without a result {attempts[index]} "
                                 f"times ({running[index].job_id}; log: {running[index].paths.stderr}): the units "
                                 "recorded so far are kept; rerun the same command to go on")
            print(f"{running.pop(index).job_id} left the queue without a result: submitted again (attempt "
                  f"{attempts[index] + 1} of {settings.retries + 1})", file=sys.stderr, flush=True)
        if lost:
            running.update(submit(lost))  # cancelled, preempted, timed out or lost with its node: again
        if running:
            time.sleep(POLL_SECONDS)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _cancel(jobs) -> None:
    """scancel the arrays of `jobs` (their queued and running elements), and say so."""
    arrays = sorted({job.job_id.split("_")[0] for job in jobs})
    if not arrays:
        return
    subprocess.run(["scancel", *arrays], capture_output=True, text=True, timeout=120)
    print(f"cancelled the evidence's jobs still queued or running (job arrays {', '.join(arrays)}); the units recorded "
          "so far are kept: run the same command again to go on", file=sys.stderr, flush=True)


def sbatch_reason(said: str) -> str:
    """Slurm's own reason from what submitit reports of a refused sbatch (its `sbatch: error:` lines)."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    reasons = [line.split("error:", 1)[1].strip() for line in lines if "sbatch: error:" in line]
    return "; ".join(dict.fromkeys(reasons)) or (lines[-1][:300] if lines else "no message")


def _queued(arrays: set[str]) -> set[str]:
    """The ids (ARRAY_INDEX) of the given arrays' jobs that Slurm still holds (pending, running, completing)."""
    done = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(sorted(arrays))], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        raise SlurmError(f"squeue failed while the units ran ({done.stderr.strip()[-200:]}): the units recorded so "
                         "far are kept; rerun the same command to go on")
    return set(done.stdout.split())


def _result(job) -> list | None:
    """The job's results; None when it ended without them (timed out); SlurmError when its code raised."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    try:
        return job.results()[0]  # (a unit of several ranks: rank 0's, which the others trained with)
    except FailedJobError as e:
        raise SlurmError(f"a job of the evidence's units failed ({job.job_id}; its log: {job.paths.stderr}): "
                         f"{_raised(Path(job.paths.stderr), str(e))}") from None
    except UncompletedJobError:
        return None


def _raised(log: Path, said: str) -> str:
    """What the job's code raised, from the last exception line of its log (its own words: a refusal on that
    node), else the last line submitit reported."""
    try:
        text = log.read_text(errors="replace")[-50_000:]
    except OSError:
        text = ""
    raised = [line.strip() for line in text.splitlines() if re.match(r"[A-Za-z_][\w.]*(Error|Exception): ", line)]
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    return raised[-1][:400] if raised else lines[-1][:400] if lines else "no message"


def slurm_task(units: list, quick: bool, work: str, setting, threads: int) -> list:
    """What each rank of one job runs: the task's units, as a local worker runs them (torch on `threads`
    threads); a job of several ranks first takes its place in the allocation's process group (as torchrun
    would give it: each rank picks its GPU by its local rank)."""
    import submitit

    torch.set_num_threads(threads)
    if submitit.JobEnvironment().num_tasks > 1:
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return run_task(units, quick, Path(work), setting)
