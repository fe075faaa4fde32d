"""Each Slurm job's time limit without --slurm-time (damcha.evidence.slurm.job_minutes): from the cost table's
longest run where every run is costed, else the default, with the sentence that says which."""

import math

from damcha.evidence.slurm import JOB_TIME_EXTRA, JOB_TIME_FACTOR, job_minutes


def _row(claim: str, runs: int, measured: int, longest: tuple[str, float] | None) -> dict:
    return {"claim": claim, "runs": runs, "measured_runs": measured, "longest_run": longest}


def test_every_run_costed_gives_the_longest_runs_training_with_room():
    rows = [_row("table5_text@enwik8", 3, 3, ("damcha", 7.25)), _row("table1_images@cifar10", 2, 2, ("mha", 1.5))]
    minutes, said = job_minutes(rows, "NVIDIA H100", 60)
    assert minutes == math.ceil(7.25 * 60 * JOB_TIME_FACTOR + JOB_TIME_EXTRA) == 668
    assert said.startswith("from the cost table: the longest run, table5_text@enwik8 damcha, trains for 7.25 h on "
                           "NVIDIA H100")


def test_a_run_not_costed_leaves_the_default_and_says_why():
    rows = [_row("table5_text@enwik8", 3, 2, ("damcha", 7.25))]
    assert job_minutes(rows, "NVIDIA H100", 60) == (60, "the default: 1 run(s) have no measured cost on NVIDIA H100, "
                                                        "so no job's length is known; give --slurm-time where a run "
                                                        "may take longer")
    assert job_minutes([_row("x", 2, 0, None)], "a GPU", 45)[0] == 45
