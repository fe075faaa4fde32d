"""Every arm of every paper-scale claim builds on the meta device at its exact parameter count at Section 5.1's
sizes (10 layers, width 512, 8 heads, f of 9 linear layers, batches of 128), and the memory plan
(damcha.runs.memory) says how each trains on the devices at hand: whole on one 80 GB GPU in the largest
micro-batches that fit, sharded where only that fits, refused with the numbers where nothing does, before anything
trains."""

import dataclasses

import pytest
import torch

from damcha import build_model
from damcha.evidence.capacity import base_config, data_of
from damcha.evidence.scales import PAPER, PAPER_GENERATOR_WIDTHS, locate_data, scale_claims
from damcha.evidence.setting import Setting
from damcha.inputs.datasets.generated import write_standard_format_files
from damcha.model.mechanisms.damcha.metric import MetricGenerator
from damcha.runs.memory import ADAM_STATES, AUTO_MICRO_BATCH, HEADROOM, DoesNotFit, plan_training, training_memory
from damcha.runs.train import model_config_for

GPU_80GB = 80 * 10**9


@pytest.fixture(scope="module")
def paper_scale(tmp_path_factory):
    """The paper scale's setting and claims on generated files in the standard formats (same vocabularies,
    shapes and sequence lengths as the published files)."""
    folder = tmp_path_factory.mktemp("data")
    write_standard_format_files(folder)
    setting = Setting(dataclasses.replace(PAPER, nonstandard_ok=True), locate_data(PAPER, folder), "cpu")
    return setting, scale_claims(setting.scale, setting)


@pytest.fixture(scope="module")
def paper_arms(paper_scale):
    """(claim key, arm, config, batch) of every training arm of every paper-scale claim."""
    setting, claims = paper_scale
    out = []
    for claim in claims:
        for arm in claim.arms:
            if arm.trains:
                place = setting.scale.place(arm.dataset)
                data = data_of(arm.dataset, place.block_size or 64, setting)
                out.append((claim.key, arm, model_config_for(data, base_config(arm.variant, arm.overrides)),
                            place.train["batch_size"]))
    return out


def test_every_paper_scale_arm_builds_on_the_meta_device_at_its_exact_count(paper_arms):
    assert {key.split("@")[0] for key, *_ in paper_arms} == {"table1_images", "table3_depth", "table4_ablations",
                                                             "table5_text"}
    for key, arm, config, batch in paper_arms:
        with torch.device("meta"):
            model = build_model(config)
        assert sum(p.numel() for p in model.parameters()) == config.parameter_estimate(), (key, arm.name)
        assert config.n_layer == 10 and config.n_head == 8 and config.n_embd >= 512 and batch == 128
        generators = [m for m in model.modules() if isinstance(m, MetricGenerator)]
        if generators and not key.startswith("table3_depth"):  # Section 5.1's f: 8 hidden layers and the output
            assert config.setting("generator_widths") == PAPER_GENERATOR_WIDTHS, (key, arm.name)
            assert {len(g.hidden) + 1 for g in generators} == {9}, (key, arm.name)
    depths = {arm.name: len(config.setting("generator_widths")) + 1 for key, arm, config, _ in paper_arms
              if key.startswith("table3_depth")}
    assert {depths[f"f depth {k}"] for k in (1, 3, 5, 7, 9)} == {1, 3, 5, 7, 9}  # linear layers, as the paper counts
    unshared = [c for _, arm, c, _ in paper_arms if arm.variant == "damcha-unshared"]
    assert unshared and all(c.parameter_estimate() > 1.3e9 for c in unshared)  # ten 9-layer generators


def test_the_memory_plan_trains_every_paper_scale_arm_on_one_80_gb_gpu_in_the_largest_micro_batch_that_fits(paper_arms):
    planned = {}
    for key, arm, config, batch in paper_arms:
        plan = plan_training(config, batch, GPU_80GB, micro_batch=AUTO_MICRO_BATCH)
        assert plan.estimate == training_memory(config, plan.micro_batch)  # recomputed: what one device holds
        assert plan.estimate.activations and plan.estimate.optimiser == ADAM_STATES * 4 * config.parameter_estimate()
        assert plan.estimate.total <= HEADROOM * GPU_80GB
        if plan.micro_batch < batch:  # the largest: twice the micro-batch does not fit
            assert training_memory(config, 2 * plan.micro_batch).total > HEADROOM * GPU_80GB, (key, arm.name)
        planned[(key.split("@")[0], arm.name)] = (plan.strategy, plan.micro_batch)
    assert {s for s, _ in planned.values()} == {"ddp"}  # one GPU: every run whole
    assert planned[("table1_images", "damcha")][1] == 64  # 128 images of 1024 pixel tokens: in two micro-batches
    assert planned[("table5_text", "damcha")][1] < 128  # 128 x 1024 bytes only in micro-batches
def test_the_paper_scale_plan_refuses_every_run_that_does_not_fit_before_anything_trains(paper_scale, paper_arms,
                                                                                          monkeypatch):
    from damcha.evidence import scales

    setting, claims = paper_scale
    monkeypatch.setattr(scales, "device_memory", lambda device: GPU_80GB)
    rows = scales.memory_plan(setting, claims)
    # (Table 3's f depth 9 is Section 5.1's f: Table 1's DAMCHA run on CIFAR-10, planned once)
    assert {r["arm"] for r in rows} == {arm.name for _, arm, _, _ in paper_arms} - {"f depth 9"}
    unshared = max(rows, key=lambda r: r["parameters"])
    assert unshared["arm"] == "w/o sharing" and unshared["parameters"] > 1.3e9
    assert {r["strategy"] for r in rows} == {"ddp"}  # one 80 GB GPU holds every run whole
    assert max(r["micro_batch"] for r in rows if r["claim"].startswith("table5_text")) < 128  # text: accumulated
    monkeypatch.setattr(scales, "device_memory", lambda device: 24 * 2**30)  # the paper's RTX 3090
    with pytest.raises(DoesNotFit, match="nothing was trained") as refused:
        scales.memory_plan(setting, claims)
    # weights, gradients and Adam's state of 1.39B parameters alone exceed 85% of 24 GiB: no micro-batch helps
    said = str(refused.value)
    assert said.startswith("1 run(s) do not fit") and "w/o sharing: in micro-batches of 1 row" in said
    monkeypatch.setenv("WORLD_SIZE", "8")  # under torchrun: each rank its share of the batch, sharded if need be
    sharded = scales.memory_plan(setting, claims)
    assert {r["arm"] for r in sharded if r["strategy"] == "fsdp"} == {"w/o sharing"}
    assert all(r["gib_per_device"] <= 0.85 * 24 and r["micro_batch"] <= 16 for r in sharded)  # 16: a rank's share
    monkeypatch.delenv("WORLD_SIZE")  # a Slurm unit of 8 ranks (--gpus-per-unit 8), planned on the login node
    assert scales.memory_plan(setting, claims, world=8) == sharded


def test_an_arm_with_its_own_training_length_is_left_out_at_a_scale_and_said_to_be(paper_scale):
    """The compute-matched MHA's epochs match DAMCHA's FLOPs at the demo size; at a scale they would not."""
    from damcha.evidence.catalogue import claims as catalogue
    from damcha.evidence.scales import AT_DEMO_LENGTH

    _, claims = paper_scale
    assert not any(arm.train_overrides for claim in claims for arm in claim.arms)
    demo = {c.key for c in catalogue(quick=False) if any(a.train_overrides for a in c.arms)}
    at_scale = [c for c in claims if c.key.split("@")[0] in demo]
    assert at_scale and all(AT_DEMO_LENGTH in c.note for c in at_scale)
    assert not any(AT_DEMO_LENGTH in c.note for c in claims if c.key.split("@")[0] not in demo)
