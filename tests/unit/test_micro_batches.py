"""Gradient accumulation: an optimiser step's batch in micro-batches gives the step of the whole batch (to float
rounding), whatever the task, ignored targets and uneven last micro-batch; `damcha train --micro-batch-size` trains
the run it trains without it, and a run's config does not record it (a run resumes either way)."""

import copy
import json

import pytest
import torch

from damcha import ModelConfig, variant_config, variant_names
from damcha.model.transformer import IGNORE_INDEX, build_model
from damcha.runs.train import TrainConfig, optimiser_step

TASKS = {
    "next token, some targets ignored": dict(vocab_size=11),
    "classification": dict(vocab_size=11, n_classes=3, causal=False),
    "next vector": dict(vocab_size=1, input_dim=5),
}


def _batch(task: str, rows: int = 8, length: int = 12):
    g = torch.Generator().manual_seed(3)
    if task == "next vector":
        x = torch.randn(rows, length, 5, generator=g)
        return x, torch.randn(rows, length, 5, generator=g)
    x = torch.randint(0, 10, (rows, length), generator=g)
    if task == "classification":
        return x, torch.randint(0, 3, (rows,), generator=g)
    y = torch.randint(0, 10, (rows, length), generator=g)
    y[1, :7] = IGNORE_INDEX  # rows count different numbers of targets: a plain mean of micro-batch means is wrong
    y[6, 2:] = IGNORE_INDEX
    return x, y


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("variant", ["damcha", "mha"])
def test_micro_batches_take_the_step_of_the_whole_batch(task, variant):
    config = variant_config(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=12, dropout=0.0,
                                        attention_options={"generator_widths": (8,)}, **TASKS[task]), variant)
    model = build_model(config, seed=0)
    x, y = _batch(task)
    steps = {}
    for micro in (0, 3):  # 3, 3 and 2 rows
        trained = copy.deepcopy(model)
        opt = torch.optim.SGD(trained.parameters(), lr=0.5)
        losses = optimiser_step(trained, opt, x, y, TrainConfig(micro_batch_size=micro), torch.device("cpu"))
        steps[micro] = ({k: v - model.state_dict()[k] for k, v in trained.state_dict().items()}, losses.task_loss)
    moved = [k for k, d in steps[0][0].items() if d.abs().max() > 0]
    assert moved
    for name in moved:
        torch.testing.assert_close(steps[3][0][name], steps[0][0][name], rtol=1e-4, atol=1e-7, msg=name)
    torch.testing.assert_close(steps[3][1], steps[0][1], rtol=1e-5, atol=1e-6)


def test_every_variant_accumulates(tmp_path):
    x, y = _batch("next token, some targets ignored")
    for variant in variant_names():
        config = variant_config(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=12, vocab_size=11, dropout=0.0,
                                            attention_options={"generator_widths": (8,)}), variant)
        model = build_model(config, seed=0)
        out = {}
        for micro in (0, 5):
            trained = copy.deepcopy(model)
            optimiser_step(trained, torch.optim.SGD(trained.parameters(), lr=0.5), x, y,
                           TrainConfig(micro_batch_size=micro, grad_clip=0.0), torch.device("cpu"))
            out[micro] = trained.state_dict()
        if variant.startswith("moa"):  # its load-balance loss is a statistic of its batch: each micro-batch's,
            assert all(torch.isfinite(v).all() for v in out[5].values())  # weighted, is not the union's (declared)
            continue
        for name, value in out[0].items():
            torch.testing.assert_close(out[5][name], value, rtol=1e-4, atol=1e-6, msg=f"{variant} {name}")


def test_damcha_train_with_micro_batches_trains_the_same_run_and_records_no_difference(tmp_path):
    from damcha.__main__ import main
    from damcha.runs.checkpoints import load_model, load_run

    common = ["train", "--dataset", "digits", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--generator-widths", "16", "--batch-size", "32", "--epochs", "1", "--train-limit", "96", "--dropout", "0",
              "--completion-images", "4", "--completion-samples", "1"]
    assert main([*common, "--out", str(tmp_path / "whole")]) == 0
    assert main([*common, "--micro-batch-size", "7", "--out", str(tmp_path / "micro")]) == 0
    configs = [json.loads((tmp_path / name / "config.json").read_text()) for name in ("whole", "micro")]
    assert configs[0]["train"] == configs[1]["train"] and "micro_batch_size" not in configs[0]["train"]
    whole, micro = (load_model(load_run(tmp_path / name), 1).state_dict() for name in ("whole", "micro"))
    for name, value in whole.items():
        torch.testing.assert_close(micro[name], value, rtol=1e-3, atol=1e-5, msg=name)
    with pytest.raises(ValueError, match="micro_batch_size must be 0"):
        TrainConfig(micro_batch_size=-2)


def test_micro_batch_size_auto_takes_the_micro_batches_the_memory_plan_fits_the_device(tmp_path, monkeypatch, capsys):
    """`--micro-batch-size auto` on a device that holds 8 of the batch's 32 rows a step trains in micro-batches of 8:
    the run of `--micro-batch-size 8`, weight for weight (dropout drawn per micro-batch, so any other size differs)."""
    from damcha.__main__ import main
    from damcha.cli import parser_for
    from damcha.inputs.datasets import load_dataset
    from damcha.runs import memory
    from damcha.runs import train as training
    from damcha.runs.checkpoints import load_model, load_run
    from damcha.runs.memory import HEADROOM, training_memory
    from damcha.runs.train_flags import settings_from

    common = ["train", "--dataset", "digits", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--generator-widths", "16", "--batch-size", "32", "--epochs", "1", "--train-limit", "96",
              "--dropout", "0.1",
              "--completion-images", "4", "--completion-samples", "1"]
    parsed = settings_from(parser_for("train").parse_args([*common, "--micro-batch-size", "auto", "--out", "unused"]))
    assert parsed[1].micro_batch_size == -1  # AUTO_MICRO_BATCH
    model_config = training.model_config_for(load_dataset("digits", None, 64), variant_config(parsed[0], "damcha"))
    room = int(training_memory(model_config, 8).total / HEADROOM) + 1  # 8 rows fit, 16 do not
    for module in (training, memory):  # (the plan's and the check's reading of the device)
        monkeypatch.setattr(module, "device_memory", lambda device: room)
    assert main([*common, "--micro-batch-size", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert main([*common, "--micro-batch-size", "8", "--out", str(tmp_path / "eight")]) == 0
    assert main([*common, "--micro-batch-size", "16", "--out", str(tmp_path / "sixteen")]) == 2  # refused: no room
    assert "--micro-batch-size auto" in capsys.readouterr().err
    auto, eight = (load_model(load_run(tmp_path / name), 1).state_dict() for name in ("auto", "eight"))
    assert all(torch.equal(auto[name], value) for name, value in eight.items())
