"""House rules a machine can check: ruff is clean, and the core never imports the UI."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "damcha", "app", "pages", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_does_not_import_streamlit():
    offenders = [p.name for p in (ROOT / "damcha").rglob("*.py") if "import streamlit" in p.read_text()
                 or "from streamlit" in p.read_text()]
    assert not offenders
