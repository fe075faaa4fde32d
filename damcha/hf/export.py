"""A trained run as a Hugging Face folder (config.json + model.safetensors, and the run's metrics.jsonl up to
the exported epoch for the app) that damcha.hf's classes load, checked by loading it back and comparing
its logits with the run's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError

import damcha
from damcha.hf import remote_code
from damcha.hf.config import DamchaConfig
from damcha.hf.models import DamchaForCausalLM, DamchaForSequenceClassification
from damcha.runs.checkpoints import (
    METRICS_FILE,
    CheckpointError,
    Run,
    load_model,
    load_run,
    write_failure_errno,
    write_text_atomic,
)
from damcha.runs.staging import refuse_existing, staged_folder

# float32. The two hold the same tensors and run the same code: 0 is measured for every shipped run but THA's
# (2.9e-6), whose head-mixing product is folded differently by torch.matmul when the weights require grad
# (a loaded Hugging Face model's do; load_model freezes the run's).
PARITY_TOLERANCE = 1e-5


@dataclass(frozen=True)
class Export:
    """folder: what was written. epoch: the run's snapshot it holds. max_difference: the largest
    |logit| difference between the run's model and the folder loaded back, on probe inputs."""

    folder: Path
    epoch: int
    max_difference: float


def task_class(config: DamchaConfig) -> type:
    """The model class a config's task calls for."""
    if config.input_dim:
        raise CheckpointError("runs over continuous inputs (image patches) have no Hugging Face class yet; "
                              "token runs (digits, text, classifiers) export")
    return DamchaForSequenceClassification if config.n_classes else DamchaForCausalLM


def export_run(run: Run | str | Path, out: str | Path, epoch: int | None = None, with_code: bool = False) -> Export:
    """Write the run's snapshot at `epoch` (default: the last) to `out` as a Hugging Face folder, load it
    back and compare logits with the run's model; a difference above PARITY_TOLERANCE raises. `out` must
    be new or an empty folder; a refused or failed export leaves nothing there. with_code: the folder also
    carries its modelling code and an auto_map, so it loads with trust_remote_code=True where this package
    is not installed (damcha/hf/remote_code.py); either way its README.md says how it loads."""
    out = Path(out)
    refuse_existing(out)  # before anything is loaded
    run = run if isinstance(run, Run) else load_run(run)
    epoch = run.epochs[-1] if epoch is None else epoch
    source = load_model(run, epoch)
    config = DamchaConfig.from_model_config(run.model_config, damcha_run={
        "run": run.name, "epoch": epoch, "train": run.train_config, "data": run.data})
    if with_code:
        config.auto_map = remote_code.auto_map()
    model_class = task_class(config)
    model = model_class(config).eval()
    model.transformer.load_state_dict(source.state_dict())
    # Written whole or not at all, and never into a folder the user has (the run's own, another run).
    with staged_folder(out, "exporting") as staging:
        _save_pretrained(model, staging)
        version = damcha.__version__
        if with_code:
            remote_code.write_code(staging, version)
        (staging / "README.md").write_text(_readme(run.name, epoch, model_class.__name__, with_code, version),
                                           encoding="utf-8")
        rows = [row for row in run.metrics if row.get("epoch", 0) <= epoch]  # the curves up to this snapshot, for the app
        write_text_atomic(staging / METRICS_FILE, "".join(json.dumps(row) + "\n" for row in rows))
        difference = _max_logit_difference(source, model_class.from_pretrained(staging).eval())
        if difference > PARITY_TOLERANCE:
            raise CheckpointError(f"{out}: the exported model's logits differ from the run's by {difference:.2e}; "
                                  "nothing was written")
    return Export(out, epoch, difference)


def _save_pretrained(model: torch.nn.Module, folder: Path) -> None:
    try:
        model.save_pretrained(folder)
    except SafetensorError as e:  # an OS failure in the writer's own words (a full disk: staged_folder says so)
        raise OSError(write_failure_errno(e), str(e)) from None


def _max_logit_difference(source: torch.nn.Module, exported: torch.nn.Module, batch: int = 4) -> float:
    cfg = source.config
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=generator)  # (B, T)
    with torch.no_grad():
        return (source(tokens).logits - exported(tokens).logits).abs().max().item()


def _readme(run: str, epoch: int, model_class: str, with_code: bool, version: str) -> str:
    """How the folder loads, said in the folder: with its code, or where the package is installed."""
    auto = "AutoModelForSequenceClassification" if "Classification" in model_class else "AutoModelForCausalLM"
    if with_code:
        how = (f"It carries its modelling code ({', '.join(remote_code.CODE_FILES)}): it loads without the damcha "
               f"package, with Transformers, PyTorch and safetensors installed:\n\n```python\nfrom transformers "
               f"import {auto}\nmodel = {auto}.from_pretrained(FOLDER, trust_remote_code=True)\n```\n\n"
               "trust_remote_code=True runs those three files: read them first (damcha_bundle.py holds the "
               "package's model layer as compressed sources). Where the damcha package is installed, it is used "
               "instead of the bundled code.\n")
    else:
        how = (f"It needs the damcha package (pip install 'damcha[hf]') where it is loaded:\n\n```python\n"
               f"import damcha.hf  # registers the classes\nfrom transformers import {auto}\n"
               f"model = {auto}.from_pretrained(FOLDER)\n```\n\nTo share it with someone without the package, "
               "export it again with --with-code.\n")
    return (f"# {run}, epoch {epoch}\n\nA {model_class} written by `damcha export-hf` (damcha {version}) from the "
            f"run {run} at epoch {epoch}; its logits were checked against the run's.\n\n{how}")
