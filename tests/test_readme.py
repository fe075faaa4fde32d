"""The README's example of adding a mechanism runs as written and gives what it promises."""

import dataclasses
from pathlib import Path

import pytest

from damcha import ModelConfig, build_model, inspect_input, mechanisms, variant_config

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _block(after: str) -> str:
    start = README.index("```python", README.index(after)) + len("```python")
    return README[start:README.index("```", start)]


def test_the_readme_mechanism_example_registers_trains_and_is_inspected():
    exec(compile(_block("### Adding an attention mechanism"), "README.md", "exec"), {})
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
