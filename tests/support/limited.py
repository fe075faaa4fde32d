"""Run the `damcha` command the way a user does, in a fresh process under an address-space limit
(1 GB above what the imports took) and a time-out only a hang reaches; the process reports how much
its peak memory grew and how long the command took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 120  # far above any refusal (each takes seconds): reaching it means a hang
GROWTH_LIMIT_MB = 300

# The first lines of a limited process's script, after its imports: an address space of 1 GB more
# than the imports took, and peak_mb() to measure the growth from `before`.
LIMIT_PRELUDE = r"""
import resource, time

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, vm + 2**30))
before, t0 = peak_mb(), time.perf_counter()
"""

_WRAPPER = r"""
import json, os, sys
import damcha.__main__, damcha.runs.checkpoints  # the imports are not what is measured
""" + LIMIT_PRELUDE + r"""
try:
    code = damcha.__main__.main(sys.argv[1:])
finally:
    with open(os.environ["DAMCHA_LIMITED_REPORT"], "w") as f:
        json.dump({"seconds": time.perf_counter() - t0, "growth_mb": peak_mb() - before}, f)
sys.exit(code)
"""


@dataclass
class Limited:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    growth_mb: float

    @property
    def message(self) -> str:
        """The last line the command wrote to stderr (its `error:` line when it refused)."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


def run_limited(argv: list[str], env: dict | None = None) -> Limited:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "DAMCHA_LIMITED_REPORT": str(report), **(env or {})}
        done = subprocess.run([sys.executable, "-c", _WRAPPER, *map(str, argv)], capture_output=True, text=True,
                              timeout=HANG_SECONDS, env=env, cwd=ROOT)
        measured = json.loads(report.read_text()) if report.exists() else {"seconds": float("nan"),
                                                                          "growth_mb": float("nan")}
    return Limited(done.returncode, done.stdout, done.stderr, measured["seconds"], measured["growth_mb"])
