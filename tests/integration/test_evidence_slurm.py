"""`evidence --launcher slurm` on a real one-node Slurm cluster (tests/support/slurm.py): the tiny scale's
units as job-array elements, one running job cancelled with scancel and resubmitted, and results.json
equal to the local launcher's, value for value; refusals before anything is submitted. In CI the
cluster must start (.ci/run installs slurm-wlm and munge); elsewhere the test skips with the reason."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from damcha.inputs.datasets.generated import write_standard_format_files
from tests.support.slurm import missing, one_node_cluster

ROOT = Path(__file__).resolve().parents[2]
CLAIM = "table5_text@enwik8"  # four arms, one seed each: four jobs (not tuned at this scale)


def _require_slurm() -> None:
    why = missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"a one-node Slurm cluster must run in CI: {why}")
        pytest.skip(f"no Slurm here: {why}")


@pytest.fixture
def cluster(tmp_path):
    _require_slurm()
    with one_node_cluster(tmp_path / "cluster") as env:
        yield env


@pytest.fixture
def gpu_cluster(tmp_path):
    _require_slurm()
    with one_node_cluster(tmp_path / "cluster", gpu=True) as env:
        yield env


def _evidence(data: Path, out: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "damcha", "evidence", "--scale", "tiny", "--only", CLAIM, "--seeds", "1",
            "--data-dir", str(data), "--out", str(out), *flags]


def _values(out: Path) -> dict:
    doc = json.loads((out / "results.json").read_text())
    return {c["key"]: c["values"] for c in doc["claims"]} | {"tuning": doc.get("tuning")}


def _running_job(env: dict, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = subprocess.run(["squeue", "-h", "-r", "-t", "R", "-o", "%i"], capture_output=True, text=True, env=env)
        if listed.stdout.split():
            return listed.stdout.split()[0]
        time.sleep(0.2)
    raise AssertionError("no job of the evidence ever ran")


def test_evidence_through_slurm_survives_a_cancelled_job_and_equals_the_local_launcher(cluster, tmp_path):
    data = tmp_path / "data"
    write_standard_format_files(data)
    env = {k: v for k, v in cluster.items() if k != "DAMCHA_CACHE"}
    local = subprocess.run(_evidence(data, tmp_path / "local", "--workers", "2"), cwd=ROOT, capture_output=True,
                           text=True, timeout=900, env=env)
    assert local.returncode == 0, local.stderr[-3000:]
    command = subprocess.Popen(_evidence(data, tmp_path / "slurm", "--launcher", "slurm"), cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cancelled = _running_job(cluster)
        subprocess.run(["scancel", cancelled], check=True, env=cluster)
        stdout, stderr = command.communicate(timeout=900)
    finally:
        command.kill()
    assert command.returncode == 0, stderr[-3000:]
    assert f"{cancelled} left the queue without a result: submitted again" in stderr, stderr[-3000:]
    assert _values(tmp_path / "slurm") == _values(tmp_path / "local")
    doc = json.loads((tmp_path / "slurm" / "results.json").read_text())
    assert doc["complete"] and doc["calls"][-1]["launcher"] == "slurm"
    assert list((tmp_path / "slurm" / "work" / "slurm").iterdir()), "the jobs' logs are kept beside the units"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_command_cancels_the_jobs_it_submitted(cluster, tmp_path, stop):
    """SIGTERM (a terminal closed, a scheduler's stop) or Ctrl-C left the jobs running, training with nobody
    recording them, and a rerun submitted them again: the command cancels what it submitted on its way out."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    command = subprocess.Popen(_evidence(data, tmp_path / "out", "--launcher", "slurm"), cwd=ROOT, env=cluster,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _running_job(cluster)
        command.send_signal(stop)
        _, stderr = command.communicate(timeout=120)
    finally:
        command.kill()
    assert command.returncode == 130, stderr[-2000:]
    assert "cancelled the evidence's jobs still queued or running" in stderr, stderr[-2000:]
    deadline = time.monotonic() + 60
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=cluster).stdout.strip():
        assert time.monotonic() < deadline, "the jobs were left in the queue"
        time.sleep(0.5)


def test_a_unit_of_two_ranks_trains_in_its_allocation_as_under_torchrun(cluster, tmp_path):
    """--ranks-per-node 2: each job is two Slurm tasks that form the unit's process group (Gloo on the CPU) and
    train it together; its results equal a local torchrun of two processes, value for value."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    env = {k: v for k, v in cluster.items() if k != "DAMCHA_CACHE"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "damcha",
                *_evidence(data, tmp_path / "torchrun")[3:]]
    local = subprocess.run(torchrun, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert local.returncode == 0, local.stderr[-3000:]
    slurm = subprocess.run(_evidence(data, tmp_path / "slurm", "--launcher", "slurm", "--ranks-per-node", "2"),
                           cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    assert _values(tmp_path / "slurm") == _values(tmp_path / "torchrun")
    doc = json.loads((tmp_path / "slurm" / "results.json").read_text())
    assert doc["calls"][-1]["ranks_per_unit"] == 2
    logs = list((tmp_path / "slurm" / "work" / "slurm").rglob("*_1_log.out"))  # (submitit: one log per task)
    assert logs, "each job ran two tasks"


def test_a_slurm_launch_that_cannot_work_is_refused_before_anything_is_submitted(cluster, tmp_path):
    data = tmp_path / "data"
    write_standard_format_files(data)
    unknown = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--slurm-partition", "gpu-huge"),
                             cwd=ROOT, capture_output=True, text=True, timeout=300, env=cluster)
    assert unknown.returncode == 2 and "not a partition of this cluster (it has: debug)" in unknown.stderr
    no_slurm = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm"), cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env={**cluster, "PATH": str(Path(sys.executable).parent)})
    assert no_slurm.returncode == 2 and "sbatch is not on PATH" in no_slurm.stderr
    ignored = subprocess.run(_evidence(data, tmp_path / "out", "--slurm-partition", "debug"), cwd=ROOT,
                             capture_output=True, text=True, timeout=300, env=cluster)
    assert ignored.returncode == 2 and "--slurm-partition only apply with --launcher slurm" in ignored.stderr
    too_wide = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--nodes-per-unit", "2"),
                              cwd=ROOT, capture_output=True, text=True, timeout=300, env=cluster)
    assert too_wide.returncode == 2 and "--nodes-per-unit 2: the cluster has 1 node(s)" in too_wide.stderr
    per_gpu = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--gpus-per-unit", "2",
                                       "--ranks-per-node", "3"), cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env=cluster)
    assert per_gpu.returncode == 2 and "one rank per GPU" in per_gpu.stderr
    for refused in (unknown, no_slurm, ignored, too_wide, per_gpu):
        assert "Traceback" not in refused.stderr and refused.stderr.strip().splitlines()[-1].startswith("error: ")
    queue = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=cluster)
    assert queue.stdout.strip() == "" and not (tmp_path / "out" / "work" / "slurm").exists()  # nothing submitted


def test_the_submitter_never_asks_for_the_accelerator_each_job_checks_its_own_node(cluster, tmp_path):
    """`--device cuda --launcher slurm` from a machine without a GPU (a login node) stopped before submitting
    anything ("no CUDA device is available": the submitter asked for CUDA itself). Now the budget is printed and
    the jobs are submitted; each checks its node, and this node's refusal reaches the user naming the job's log."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    done = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--device", "cuda",
                                    "--slurm-retries", "0"), cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env=cluster)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "device-hours" in done.stdout or "budget" in done.stdout.lower(), done.stdout[-1000:]  # the budget came first
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: a job of the evidence's units failed (") and "its log: " in last, last
    assert last.endswith("ValueError: --device cuda asked for, but no CUDA device is available"), last
    assert list((tmp_path / "out" / "work" / "slurm").iterdir())  # jobs were submitted


def test_a_unit_asking_for_a_gpu_is_allocated_the_one_slurm_declares_while_the_submitter_never_touches_cuda(
        gpu_cluster, tmp_path):
    """The documented cluster command (`--device cuda --gpus-per-unit 1 --launcher slurm`) from this machine without
    a GPU, on a cluster whose node declares one GPU to Slurm (a GRES in gres.conf): the budget is printed, every job
    asks for the GPU and is allocated it, and each refuses on its node, which has no CUDA device, naming its log."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    done = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--device", "cuda",
                                    "--gpus-per-unit", "1", "--slurm-retries", "0",
                                    "--slurm-setup", 'echo "allocated GPUs: $SLURM_JOB_GPUS of $SLURM_GPUS_ON_NODE"'),
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env=gpu_cluster)
    assert done.returncode == 2 and "budget" in done.stdout.lower(), done.stdout[-1000:] + done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: a job of the evidence's units failed (") and "its log: " in last, last
    assert last.endswith("no CUDA device is available"), last
    scripts = list((tmp_path / "out" / "work" / "slurm").rglob("*_submission.sh"))
    assert scripts and all("#SBATCH --gpus-per-node=1" in p.read_text() for p in scripts)
    logs = [p.read_text() for p in (tmp_path / "out" / "work" / "slurm").rglob("*_log.out")]
    assert logs and all("allocated GPUs: 0 of 1" in log for log in logs), logs[:1]


def test_what_a_lab_passes_to_sbatch_reaches_every_job(cluster, tmp_path):
    """Memory, node features, setup lines and further sbatch options reach each job's script (the jobs fail fast
    here, on a node without the CUDA they ask for, after the setup line ran); a feature no node has is refused by
    sbatch in its own words."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    passed = ("--slurm-mem", "300M", "--slurm-setup", "echo damcha-setup-ran", "--slurm-sbatch", "comment=damcha-probe")
    done = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--device", "cuda",
                                    "--slurm-retries", "0", *passed), cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=cluster)
    assert done.returncode == 2 and "no CUDA device" in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
    scripts = list((tmp_path / "out" / "work" / "slurm").rglob("*_submission.sh"))
    logs = list((tmp_path / "out" / "work" / "slurm").rglob("*_log.out"))
    assert scripts and logs
    script = scripts[0].read_text()
    assert "#SBATCH --mem=300M" in script and "#SBATCH --comment=damcha-probe" in script, script
    assert "echo damcha-setup-ran" in script and any("damcha-setup-ran" in log.read_text() for log in logs)
    assert "#SBATCH --time=60" in script and "--slurm-time 60: the default: no run has a measured cost" in done.stdout
    # every run costed on the named GPU (a table of the user's): each job's limit from the longest run
    from damcha.evidence.costs import CostTable, step_kinds
    from damcha.evidence.scales import TINY

    table = tmp_path / "costs.json"
    CostTable({"test GPU": {"rows": [{**kind.row_key(), "step_seconds": 90.0, "arms": arms}
                                     for kind, arms in step_kinds(TINY, "cuda", [CLAIM]).items()]}}).write(table)
    costed = subprocess.run(_evidence(data, tmp_path / "out3", "--launcher", "slurm", "--device", "cuda",
                                      "--slurm-retries", "0", "--cost-table", str(table), "--cost-device", "test GPU"),
                            cwd=ROOT, capture_output=True, text=True, timeout=900, env=cluster)
    minutes = math.ceil(4 * 90 / 3600 * 60 * 1.5 + 15)  # 4 steps of 90 s (TINY's enwik8), x1.5, + 15 minutes: 24
    said = costed.stdout[-2000:] + costed.stderr[-2000:]
    assert f"--slurm-time {minutes}: from the cost table" in costed.stdout, said
    assert all(f"#SBATCH --time={minutes}" in p.read_text()
               for p in (tmp_path / "out3" / "work" / "slurm").rglob("*_submission.sh"))
    refused = subprocess.run(_evidence(data, tmp_path / "out2", "--launcher", "slurm", "--slurm-constraint",
                                       "no-such-feature"), cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env=cluster)
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and last.startswith("error: sbatch refused the evidence's jobs: "), last
    assert "feature" in last.lower(), last


def test_table_2s_timings_are_jobs_on_the_cluster_not_the_submitting_machine(cluster, tmp_path):
    """Table 2 was timed inside the command, on the login node, before the first job: now its units are jobs."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    command = _evidence(data, tmp_path / "out", "--launcher", "slurm")
    command[command.index(CLAIM)] = "table2_efficiency"
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=cluster)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = [p for p in (tmp_path / "out" / "work" / "slurm").iterdir() if p.is_dir()]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    timed = next(c for c in doc["claims"] if c["key"].startswith("table2_efficiency"))
    assert len(jobs) >= len(timed["values"]) >= 3, (jobs, timed["values"])  # one job per timed arm


def test_a_job_sbatch_refuses_ends_in_one_line_with_slurms_reason(cluster, tmp_path):
    """What only sbatch can judge (here a GPU from a cluster that declares none): its own reason on one line, the
    command's last, no traceback, and nothing queued."""
    data = tmp_path / "data"
    write_standard_format_files(data)
    refused = subprocess.run(_evidence(data, tmp_path / "out", "--launcher", "slurm", "--gpus-per-unit", "1"), cwd=ROOT,
                             capture_output=True, text=True, timeout=600, env=cluster)
    assert refused.returncode == 2, refused.stderr[-2000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr and last.startswith("error: sbatch refused the evidence's jobs: "), last
    assert len(last) > len("error: sbatch refused the evidence's jobs: ") + 10  # Slurm's reason, not an empty one
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=cluster).stdout.strip() == ""


def test_a_work_folder_other_nodes_cannot_see_is_refused_on_a_cluster_of_several_nodes(tmp_path, monkeypatch):
    from damcha.evidence.slurm import SlurmError, SlurmSettings, check, file_system

    _require_slurm()
    work = tmp_path / "work"
    with one_node_cluster(tmp_path / "cluster", ghost_node=True) as env:
        monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
        with pytest.raises(SlurmError, match=f"on a {file_system(work)} file system, which the cluster's other "
                                             "nodes cannot see \\(it has 2 nodes\\)"):
            check(SlurmSettings(), work)


def test_launcher_flags_with_restate_are_refused_not_ignored(tmp_path, capsys):
    from damcha.__main__ import main

    for flags in (["--launcher", "slurm"], ["--slurm-partition", "gpu"]):
        assert main(["evidence", "--restate", "--out", str(tmp_path / "out"), *flags]) == 2
        said = capsys.readouterr().err.strip().splitlines()[-1]
        assert said.startswith("error: --restate trains nothing") and flags[0] in said, said
    assert not (tmp_path / "out").exists()
