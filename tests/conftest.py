import dataclasses
import os
import tempfile
from pathlib import Path

import pytest
import streamlit.config
import torch

from damcha import ModelConfig, build_model, variant_config, variant_names
from damcha.model.mechanisms.damcha.layer import metric_sources

# AppTest runs the app in this process: give it the settings `streamlit run app` reads from
# app/.streamlit/config.toml (the script's own config, wherever the server is started).
streamlit.config._main_script_path = str(Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py")
streamlit.config.get_config_options(force_reparse=True)
# Evaluations the app keeps on disk go to a folder of this test session, not the user's cache.
os.environ.setdefault("DAMCHA_CACHE", tempfile.mkdtemp(prefix="damcha-test-cache-"))
os.environ.setdefault("DAMCHA_INPUT_STORE", tempfile.mkdtemp(prefix="damcha-test-inputs-"))

# Under pytest-xdist each worker is its own torch process: with torch's default of one thread per core,
# the workers (and the servers and commands the tests start) oversubscribe the cores, and spinning
# OpenMP threads turn the millisecond steps of tiny models into seconds. One thread each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Variants from the registry, never a hand-kept list: every registered one, and those whose
# mechanism scores with a metric M (the tests of the metric paths).
ALL_VARIANTS = variant_names()
METRIC_VARIANTS = tuple(v for v in ALL_VARIANTS if (c := variant_config(ModelConfig(), v)).mechanism.metric(c) is not None)


def tiny_config(variant: str = "damcha", causal: bool = True, **overrides) -> ModelConfig:
    base = ModelConfig(
        vocab_size=11, block_size=16, n_layer=2, n_head=4, n_embd=16, generator_widths=(16, 24),
        causal=causal, n_classes=0 if causal else 5,
    )
    return dataclasses.replace(variant_config(base, variant), **overrides)


def tiny_model(variant: str = "damcha", causal: bool = True, seed: int = 0, dtype=torch.float64, **overrides):
    """A small float64 model in evaluation mode: its forward is deterministic (no dropout, no MoA gating
    noise), as the properties tested of it assume."""
    model = build_model(tiny_config(variant, causal, **overrides), seed=seed).to(dtype).eval()
    if model.mechanism.metric(model.config) == "static":  # an identity metric hides block mix-ups; perturb it
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            for src in metric_sources(model):
                src.generator.weight.add_(0.3 * torch.randn_like(src.generator.weight))
    return model


def opts(model, mode="full", explicit=False):
    """The forward options of a call: DAMCHA's metric mode and explicit path; other mechanisms take
    only the full model (asking them for another metric mode is an error)."""
    own = {f.name for f in dataclasses.fields(model.mechanism.options_type)}
    return model.mechanism.options_from({"metric_mode": mode, **({"explicit": explicit} if "explicit" in own else {})})


def logits_and_grads(model, tokens, targets, mode, explicit):
    """One forward and backward: the logits and every parameter's gradient (cloned)."""
    model.zero_grad()
    out = model(tokens, targets=targets, options=opts(model, mode, explicit))
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(autouse=True)
def _single_thread_determinism():
    torch.manual_seed(0)
    yield


# The longest modules first: pytest-xdist (--dist loadfile) hands modules to the workers in
# collection order, so the run ends on short ones rather than one worker finishing a long module
# alone. Scheduling only: every test still runs. Measured with --durations (seconds summed over a
# module's tests on two cores, December 2026).
LONGEST_FIRST = ("test_browser.py",  # 187 s
                 "test_every_mechanism.py",  # 124 s: a tiny run per variant and task, every page
                 "test_evidence.py",  # 92 s
                 "test_app.py",  # 81 s
                 "test_benchmarks.py",  # 73 s
                 "test_distributed.py",  # 67 s
                 "test_url_fuzz.py",  # 60 s
                 "test_browser_workflows.py",  # 42 s
                 "test_interrupted_training.py",  # 41 s
                 "test_broken_runs.py",  # 30 s
                 "test_export.py",  # 26 s
                 "test_resource_bombs.py",  # 17 s
                 "test_fence_browser.py",  # 14 s
                 "test_reference_configs.py",  # 12 s
                 "test_worker_death.py",  # 11 s
                 "test_corrupted_files.py",  # 10 s
                 "test_package_install.py")  # 46 s in CI (a fresh environment); skipped elsewhere
# The slow tier: every module above. `pytest -m "not slow"` (the inner loop: the mechanisms, their
# recomputations and fast paths, training, inspection, figures, data) leaves them out; CI and the
# README's test command run everything.
SLOW_MODULES = frozenset(LONGEST_FIRST)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the order within a module stays
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
