import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import streamlit.config
import torch
from streamlit.components.v2 import manifest_scanner

pytest_plugins = ["tests.support.browser"]  # the browser fixtures (server, page) for every module that asks

# AppTest runs the app in this process: give it the settings `streamlit run app` reads from
# app/.streamlit/config.toml (the script's own config, wherever the server is started).
streamlit.config._main_script_path = str(Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py")
streamlit.config.get_config_options(force_reparse=True)
# Each new AppTest scans every installed distribution's metadata for Streamlit components (about a
# second each, and the suite makes several hundred apps); the installed packages do not change during
# a test session, so the scan is made once. A Streamlit that moved the scanner keeps scanning per app.
if hasattr(manifest_scanner, "scan_component_manifests"):
    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
# Evaluations the app keeps on disk go to a folder of this test session, not the user's cache: made by
# the first process (pytest-xdist's workers inherit it) and removed when that process ends.
for variable, prefix in (("DAMCHA_CACHE", "damcha-test-cache-"), ("DAMCHA_INPUT_STORE", "damcha-test-inputs-")):
    if variable not in os.environ:
        os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, os.environ[variable], ignore_errors=True)

# Under pytest-xdist each worker is its own torch process: with torch's default of one thread per core,
# the workers (and the servers and commands the tests start) oversubscribe the cores, and spinning
# OpenMP threads turn the millisecond steps of tiny models into seconds. One thread each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

@pytest.fixture(scope="module")
def guide_examples():
    """The toy mechanism and docs/mechanisms.md's example on the registry for a module that walks it
    (`pytestmark = pytest.mark.usefixtures("guide_examples")`, parametrised over walked_variants())."""
    from tests.support.guide_examples import examples_registered

    with examples_registered():
        yield


@pytest.fixture(autouse=True)
def _single_thread_determinism():
    torch.manual_seed(0)
    yield


# The longest modules first: pytest-xdist (--dist loadfile) hands modules to the workers in
# collection order, so the run ends on short ones rather than one worker finishing a long module
# alone. Scheduling only: every test still runs. Seconds summed over a module's tests, full suite on
# two cores (5 December 2026; "after": the same module measured once its cuts were made).
LONGEST_FIRST = ("test_every_mechanism.py",  # 305 s: a tiny run per variant and task, every page
                 "test_app.py",  # 195 s
                 "test_browser.py",  # 185 s
                 "test_evidence.py",  # 243 s, after ~140 s: evidence --quick end to end (run, take over)
                 "test_browser_workflows.py",  # 113 s
                 "test_benchmarks.py",  # 100 s
                 "test_battery.py",  # 97 s: every hostile command in its own memory-limited process
                 "test_distributed.py",  # 175 s, after ~80 s: DDP and FSDP2 under torchrun
                 "test_typesetting.py",  # 80 s: every named figure laid out in Chromium at two widths
                 "test_evidence_at_scale.py",  # 72 s: --scale tiny end to end, and under torchrun
                 "test_compile_fullgraph.py",  # 63 s, and inductor's compiled step (25-50 s uncached)
                 "test_package_install.py",  # 63 s in CI (a fresh environment); skipped elsewhere
                 "test_interrupted_training.py",  # 49 s
                 "test_evidence_slurm.py",  # 45 s: a real one-node Slurm cluster, a job cancelled and resubmitted
                 "test_url_fuzz.py",  # 39 s
                 "test_export.py",  # 36 s
                 "test_hf_runs.py",  # 34 s: exported and Trainer folders on every page
                 "test_broken_runs.py",  # 27 s
                 "test_resource_bombs.py",  # 25 s
                 "test_fence_browser.py",  # 18 s
                 "test_hf.py",  # 17 s: every variant as Hugging Face classes, every token run exported
                 "test_corrupted_files.py",  # 17 s
                 "test_image_pages.py",  # 12 s: every page on a colour-image patch run
                 "test_hf_remote_code.py",  # 13 s: folders with their code, loaded in a venv without the package
                 "test_hf_swap.py",  # 12 s: every variant swapped into GPT-2, Llama and ViT, trained
                 "test_worker_death.py",  # 11 s
                 "test_reference_configs.py",  # 10 s
                 "test_owned_folders.py",  # writers on a real small tmpfs, killed writers
                 "test_messages.py",  # readers given one value wrong
                 "test_interop_docs.py",  # docs/interop.md's examples
                 "test_lens.py",  # TransformerLens's hooks on every variant
                 "test_nnsight.py")


def pytest_addoption(parser):
    parser.addini("slow_folders", type="args", default=[],
                  help="folders under tests/ whose modules form the slow tier (marked slow)")


def pytest_ignore_collect(collection_path, config):
    """The inner loop (`-m "not slow"`, exactly) does not import the slow folders' modules at all: their
    every test is deselected anyway, and importing them took collection from 12 s to 21 s in one process
    (the app's module-level run lists, the optional extras; measured 7 December 2026)."""
    if config.option.markexpr.strip() != "not slow":
        return None
    tests = Path(__file__).resolve().parent
    try:
        folder = collection_path.resolve().relative_to(tests).parts[0]
    except (ValueError, IndexError):
        return None
    return True if folder in set(config.getini("slow_folders")) else None


def pytest_collection_modifyitems(config, items):
    """The slow tier by folder (pyproject.toml's slow_folders: integration, app, browser, robustness);
    tests/unit is the inner loop, with the few single tests marked slow there by name."""
    slow_folders = set(config.getini("slow_folders"))
    tests = Path(__file__).resolve().parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the order within a module stays
    for item in items:
        if item.path.resolve().relative_to(tests).parts[0] in slow_folders:
            item.add_marker(pytest.mark.slow)
