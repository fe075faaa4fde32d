"""`pip install .` alone (no requirements.txt) gives a working library and command line: installed into
a fresh virtual environment with the pinned versions as constraints, so torch stays the local CPU
wheel. Runs in CI (about a minute); elsewhere with DAMCHA_TEST_INSTALL=1."""

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pins(path: Path) -> Path:
    """requirements.txt as constraints: its exact versions, without the editable install of this package."""
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    path.write_text("\n".join(line for line in lines if line and not line.startswith("-e")) + "\n")
    return path


def test_pip_install_of_the_package_alone_gives_a_working_library_and_cli(tmp_path):
    if not (os.environ.get("CI") or os.environ.get("DAMCHA_TEST_INSTALL")):
        pytest.skip("installs the package into a fresh virtual environment (about a minute): runs in CI, or with "
                    "DAMCHA_TEST_INSTALL=1")
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the work tree
    shutil.copytree(ROOT / "damcha", source / "damcha", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([python, "-m", "pip", "install", "-q", "-c", pins(tmp_path / "pins.txt"), str(source)],
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    check = ("import importlib.util, damcha, torch\n"
             "from damcha import ModelConfig, build_model, inspect_input, variant_config\n"
             "assert importlib.util.find_spec('streamlit') is None  # the app's extra is not needed\n"
             "model = build_model(variant_config(ModelConfig(), 'damcha'), seed=0)\n"
             "record = inspect_input(model, list(range(8)), list(range(1, 9)))\n"
             "print(damcha.__version__, torch.__version__, record.structures[0].name)")
    run = subprocess.run([python, "-c", check], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[1] == __import__("torch").__version__  # the pinned wheel, not a fresh download
    out = tmp_path / "run"
    train = subprocess.run([env_dir / "bin" / "damcha", "train", "--dataset", "digits", "--epochs", "1", "--train-limit",
                            "64", "--completion-images", "4", "--n-layer", "1", "--n-embd", "16", "--generator-widths",
                            "16", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    assert (out / "config.json").is_file() and list(out.glob("epoch_*.safetensors"))
