"""The documented example of adding a mechanism runs as written and gives what it promises; the
documentation site builds without a broken link or reference."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from damcha import ModelConfig, build_model, inspect_input, mechanisms, variant_config

ROOT = Path(__file__).resolve().parents[2]
MECHANISMS_PAGE = (ROOT / "docs" / "mechanisms.md").read_text(encoding="utf-8")


def _block(after: str) -> str:
    start = MECHANISMS_PAGE.index("```python", MECHANISMS_PAGE.index(after)) + len("```python")
    return MECHANISMS_PAGE[start:MECHANISMS_PAGE.index("```", start)]


def test_the_documented_mechanism_example_registers_trains_and_is_inspected():
    exec(compile(_block("## Adding an attention mechanism"), "docs/mechanisms.md", "exec"), {})
    try:
        cfg = variant_config(ModelConfig(vocab_size=11, block_size=16, n_layer=2, n_head=4, n_embd=16), "mixed")
        cfg = dataclasses.replace(cfg, attention_options={"mixed_init_scale": 0.5})
        model = build_model(cfg)
        assert cfg.parameter_estimate() == sum(p.numel() for p in model.parameters())
        record = inspect_input(model.eval(), [1, 2, 3], [2, 3, 4])
        assert record.structure("mix").axis_title("head_out") == "output head g"
        with pytest.raises(ValueError, match="mixed_init_scale must be at least 0"):
            dataclasses.replace(cfg, attention_options={"mixed_init_scale": -1.0})
    finally:
        mechanisms.unregister("mixed")


def test_the_documentation_site_builds_strictly(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "A small transformer with a registered attention mechanism" in api  # docstrings rendered


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 10_000
    commands = [line for line in readme.splitlines()[:6] if line.startswith("python3 -m venv")]
    assert len(commands) == 2 and commands[0].endswith("streamlit run app") and commands[1].endswith("-m pytest")
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).exists(), target
