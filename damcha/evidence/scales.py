"""The sizes the evidence runs at besides the demo's: the paper's (`--scale paper`, on the user's standard
files and GPUs) and a tiny rehearsal of the same code path (`--scale tiny`, on generated files in the
standard formats, on a CPU: CI runs it).

A scale is one `Scale` in SCALES: the catalogue's claims it runs (they keep their arms, seeds,
intervals, Holm and verdict rule) and the model size every model arm takes there. The data sets it runs
on declare their own place in it (`DataSetSpec.scales`: the demo data sets they stand in for, the files
looked for, their training settings). Nothing outside this module and those declarations asks a
scale's name.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path

import torch

from damcha.evidence.baselines import BASELINE_NAMES, baseline_on
from damcha.evidence.capacity import base_config, data_of, matched_width
from damcha.evidence.catalogue import claims
from damcha.evidence.records import Arm, Claim
from damcha.evidence.setting import Scale, Setting
from damcha.inputs.datasets import DataError, data_set_spec
from damcha.inputs.modalities import completion_kind
from damcha.model.config import ModelConfig
from damcha.runs.memory import AUTO_MICRO_BATCH, DoesNotFit, device_memory, plan_training
from damcha.runs.train import model_config_for

PAPER_CLAIMS = ("table1_images", "table2_efficiency", "table3_depth", "table4_ablations", "table5_text")

# f's 8 hidden widths: 9 linear layers, as Section 5.1 counts them (the paper states the depth, not the widths: ours
# are the first width of the demo's pattern, 256, then 512 repeated, the model's width)
PAPER_GENERATOR_WIDTHS = (256,) + (512,) * 7
PAPER_WIDTHS_DEVIATION = (f"f's hidden widths {PAPER_GENERATOR_WIDTHS} are ours: Section 5.1 gives f 9 layers "
                          "(8 hidden layers and the output projection) and does not state their widths.")

PAPER = Scale(
    "paper", "Section 5.1's model: 10 layers, width 512, 8 heads, f of 9 linear layers (hidden widths 256, then seven "
    "of 512: the widths are ours); batches of 128 (each step's batch in the micro-batches the memory plan fits the "
    "device, gradients accumulated); CIFAR-10 for 50 epochs, enwik8 and text8 for 100K steps of 128 x 1024 bytes (the "
    "paper's Table 8 length), on the standard files and splits, in bf16.",
    PAPER_CLAIMS, model=dict(n_layer=10, n_head=8, n_embd=512, generator_widths=PAPER_GENERATOR_WIDTHS),
    efficiency_model=dict(vocab_size=256, block_size=1024, n_layer=1, n_head=8, n_embd=512,
                          generator_widths=PAPER_GENERATOR_WIDTHS),
    efficiency_case=dict(T=1024, batch=4), smoke=False, nonstandard_ok=False,
    compile=True, default_device="cuda",
    notes=("Table 2 is timed on the host's CPU (the efficiency code times CPU layers); benchmarks/scale.py times "
           "the GPU.",), deviations=(PAPER_WIDTHS_DEVIATION,))

TINY = Scale(
    "tiny", "The paper-scale code path at a tiny size (2 layers, width 32; 1 epoch) on generated files in the "
    "standard formats (nonstandard copies, split 90/5/5): a rehearsal, its numbers are not evidence.",
    PAPER_CLAIMS, model=dict(n_layer=2, n_head=4, n_embd=32, generator_widths=(64, 128)),
    efficiency_model=dict(vocab_size=256, block_size=64, n_layer=1, n_head=4, n_embd=32, generator_widths=(64, 128)),
    efficiency_case=dict(T=32, batch=2), smoke=True, nonstandard_ok=True)

SCALES: dict[str, Scale] = {s.name: s for s in (TINY, PAPER)}


def register(scale: Scale) -> None:
    SCALES[scale.name] = scale


def scale_named(name: str) -> Scale:
    if name not in SCALES:
        raise ValueError(f"unknown scale {name!r}; expected demo or one of {', '.join(SCALES)}")
    return SCALES[name]


def chosen_by(key: str, only: list[str] | None) -> bool:
    """Whether --only names a claim: by its key, or by its catalogue key (every data set it runs on)."""
    return not only or key in only or key.split("@")[0] in only


# ----------------------------------------------------------------------------- the claims at a scale

def scale_claims(scale: Scale, setting: Setting) -> list[Claim]:
    """The catalogue's claims this scale runs, each once per data set its demo data set stands for."""
    out = []
    for claim in claims(scale.smoke):
        if claim.key in scale.claims:
            out.extend(_at_scale(claim, scale, setting))
    return out


def _at_scale(claim: Claim, scale: Scale, setting: Setting) -> list[Claim]:
    modelled = {a.dataset for a in claim.arms if a.kind in ("train", "adaptivity", "baseline")}
    if not modelled:  # no data: a cost measured at the scale's size
        m, case = scale.efficiency_model, scale.efficiency_case
        return [dataclasses.replace(claim, key=f"{claim.key}@{scale.name}", scale=f"{scale.description} "
                                    f"{' '.join(scale.notes)}", deviations=(*claim.deviations, *scale.deviations),
                                    note=f"Measured here at width {m['n_embd']}, {m['n_head']} heads, f of widths "
                                         f"{m['generator_widths']}, T = {case['T']}, batch {case['batch']} (the demo's "
                                         f"sizes follow). {claim.note}")]
    (demo,) = modelled
    return [_on(claim, scale, setting, demo, target) for target in scale.stands_for(demo)
            if setting.path(target)]  # (a data set not located: the claim is not asked for, see needed_data)


def _on(claim: Claim, scale: Scale, setting: Setting, demo: str, target: str) -> Claim:
    if claim.arms_at_scale is not None:
        claim = claim.arms_at_scale(claim, scale)
    renamed = _metric_names(demo, target)
    reference = next(a for a in claim.arms if a.name == claim.reference)
    spec = data_set_spec(target)

    def moved(arm: Arm) -> Arm:
        if arm.kind not in ("train", "adaptivity", "baseline"):
            return arm
        if arm.kind == "baseline":  # the demo's, where it scores what the target's models do; else the target's own
            task = baseline_on(arm.task, _completion(target))
            return dataclasses.replace(arm, dataset=target, task=task,
                                       name=arm.name if task == arm.task else BASELINE_NAMES[task])
        own = dict(arm.overrides)
        if "n_embd" in own:  # a width chosen to match the reference's parameters at the demo size: chosen again
            own["n_embd"] = matched_width(arm.variant, reference.variant, target, scale.model_overrides(target), setting)
        return dataclasses.replace(arm, dataset=target, overrides=tuple({**dict(scale.model_overrides(target)),
                                                                          **own}.items()))

    metric = renamed(claim.metric)
    assert metric is not None  # (a claim's own metric always has a name on the target)
    shown = [m for m in (renamed(c) for c in claim.columns) if m is not None]
    tested = [m.replace("val_", "test_", 1) for m in (metric, *shown) if m.startswith("val_")]  # the test split, beside
    arms = tuple(moved(a) for a in claim.arms if not a.train_overrides)
    names = {a.name: b.name for a, b in zip((a for a in claim.arms if not a.train_overrides), arms)}
    return dataclasses.replace(
        claim, key=f"{claim.key}@{target}", title=f"{claim.title_at_scale or claim.title} — on {spec.title}",
        metric=metric, arms=arms, paper=claim.paper_on.get(spec.paper_row, {}),
        controls=tuple(names.get(c, c) for c in claim.controls),
        columns=tuple(dict.fromkeys(c for c in (*shown, *tested) if c != metric)),
        verdict_metrics=tuple(dict.fromkeys(m for m in map(renamed, claim.verdict_metrics) if m is not None)),
        scale=scale.description,
        note=f"The demo's {demo} data are {spec.title} here. The verdict reads the validation split, as in the demo; "
             f"the test split, evaluated once after the last epoch, is reported beside it (the test_ columns), and is "
             f"the number to set beside the paper's.{AT_DEMO_LENGTH if any(a.train_overrides for a in claim.arms) else ''} "
             f"{claim.note_at_scale}".rstrip(),
        cannot_speak_to=claim.cannot_speak_to_at_scale,
        deviations=(*claim.deviations_at_scale, *scale.place(target).deviations, *scale.deviations,
                    _training_sentence(scale, target)))


def _training_sentence(scale: Scale, dataset: str) -> str:
    """How every arm trains at the scale, declared beside the paper's numbers (the paper gives its length only)."""
    place = scale.place(dataset)
    t = place.train
    length = (f"{t['epochs'] * t['steps_per_epoch']:,} steps of {t['batch_size']} x {place.block_size} tokens"
              if "steps_per_epoch" in t else f"{t['epochs']} epoch{'s' if t['epochs'] != 1 else ''} of {place.train_samples:,} images in batches of "
              f"{t['batch_size']}") + " (each in the micro-batches the memory plan fits the device)"
    warmup = f", {t['warmup_steps']:,} warm-up steps" if t.get("warmup_steps") else ""
    return (f"Training: every arm {length} at one rate ({t['lr']:g}{warmup}, then cosine decay; "
            f"{t.get('precision', 'fp32')}); the paper's Table 8 gives its length, not its rate or schedule.")


# why an arm with its own training length (Arm.train_overrides) is left out at a scale
AT_DEMO_LENGTH = (" The MHA at DAMCHA's training FLOPs is left out here: its epochs match DAMCHA's FLOPs at the demo "
                  "size, and at this scale they would need the FLOP ratio of the scale's own models.")


def _completion(dataset: str) -> str | None:
    """The completion a model of the data set is scored on, or None."""
    spec = data_set_spec(dataset)
    return completion_kind(spec.modality, spec.task)


def _metric_names(demo: str, target: str) -> Callable[[str], str | None]:
    """How a metric of the demo data set is named on the target (a likelihood becomes a squared error when
    tokens become vectors). A completion's error on a target whose models complete nothing (a pixel model)
    becomes the target's loss, and its quantiles are not measured there (None)."""
    losses = {"next_vector": "mse"}
    old, new = (losses.get(data_set_spec(d).task, "nll") for d in (demo, target))
    completes = _completion(target) is not None

    def renamed(metric: str) -> str | None:
        if "_completion_" in metric and not completes:
            split, _, rest = metric.partition("_completion_")
            return None if rest.endswith(("_q25", "_q75")) else f"{split}_{new}"
        return metric.replace(f"_{old}", f"_{new}") if old != new else metric

    return renamed


# ----------------------------------------------------------------------------- before anything trains

def needed_data(scale: Scale, only: list[str] | None = None) -> list[str]:
    """The data sets the scale's claims (those `only` names, by key or key@data set) read."""
    needed = set()
    for claim in claims(scale.smoke):
        demo = {a.dataset for a in claim.arms if a.kind in ("train", "adaptivity", "baseline")}
        for target in (t for d in demo for t in scale.stands_for(d)):
            if claim.key in scale.claims and chosen_by(f"{claim.key}@{target}", only):
                needed.add(target)
    return sorted(needed)


def check_only(scale: Scale, only: list[str] | None) -> None:
    """Refuse, in words, --only naming a claim of the catalogue that has no configuration at this scale (or none
    at all), before any file is read."""
    keys = {c.key for c in claims(scale.smoke)}
    asked = {name.split("@")[0] for name in only or ()}
    elsewhere = sorted(asked & keys - set(scale.claims))
    unknown = sorted(asked - keys)
    if elsewhere or unknown:
        said = [f"{', '.join(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} no configuration at --scale "
                f"{scale.name} (docs/reproduce.md, 'Not done at this scale')"] if elsewhere else []
        said += [f"{', '.join(unknown)}: no such claim"] if unknown else []
        raise ValueError(f"{'; '.join(said)}; --scale {scale.name} runs {', '.join(scale.claims)}")


def locate_data(scale: Scale, data_dir: str | Path | None, only: list[str] | None = None) -> tuple[tuple[str, str], ...]:
    """data set -> the file under data_dir each needed data set is read from; every file missing is named
    at once, with what is looked for."""
    needed = needed_data(scale, only)
    if data_dir is None:
        raise DataError(f"--scale {scale.name} needs --data-dir: a folder holding "
                        + "; ".join(f"{d}: {' or '.join(scale.place(d).files)}" for d in needed))
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        raise DataError(f"--data-dir {folder} is not a folder")
    found, missing = {}, []
    for d in needed:
        hit = next((folder / n for n in scale.place(d).files if (folder / n).exists()), None)
        if hit is None:
            missing.append(f"{d} ({' or '.join(scale.place(d).files)})")
        else:
            found[d] = str(hit)
    if missing:
        raise DataError(f"{folder} lacks what --scale {scale.name} reads: {', '.join(missing)}. "
                        "docs/reproduce.md lists the files and where they are published.")
    return tuple(found.items())


# A data reader's advice to `damcha train` (--nonstandard-data), which the evidence has no flag for: at a scale that
# reads the published files only, its own way out instead.
_TRAIN_ADVICE = re.compile(r"(?:, or |; )pass --nonstandard-data to train on (?:this one anyway \(the run then records "
                           r"standard_files: false\)|the batches present)")


def _in_evidence_words(problem: str) -> str:
    return _TRAIN_ADVICE.sub("; this scale reads the published files only (--scale tiny rehearses the code path on "
                             "any files)", problem)


def check_data(setting: Setting) -> dict[str, dict]:
    """Every data file of the setting read and checked (checksums, split sizes, enough data for a batch)
    before anything trains: data set -> its split record. Every problem is named at once."""
    scale = setting.at_scale
    records, problems = {}, []
    for dataset, _ in setting.files:
        try:
            data = setting.load(dataset, scale.place(dataset).block_size or 64)
        except DataError as e:
            problems.append(_in_evidence_words(str(e)))
            continue
        batch = scale.place(dataset).train["batch_size"]
        n_train = len(data.train_stream) // data.block_size if data.stream else len(data.train_inputs)
        if n_train < batch:
            problems.append(f"{dataset}: {n_train} training {'windows' if data.stream else 'samples'} are fewer than "
                            f"one batch of {batch} at --scale {scale.name}")
        records[dataset] = dict(data.split)
    if problems:
        raise DataError("the data cannot run this scale (nothing was trained): " + " | ".join(problems))
    return records


def run_config(arm: Arm, setting: Setting) -> ModelConfig:
    """The model config a training arm trains at the setting's scale, its data's fields filled in."""
    return model_config_for(data_of(arm.dataset, setting.at_scale.place(arm.dataset).block_size or 64, setting),
                            base_config(arm.variant, arm.overrides))


def memory_plan(setting: Setting, claims: list[Claim], world: int | None = None) -> list[dict]:
    """Every distinct training run of the claims with how it trains on the devices at hand (damcha.runs.memory:
    each of `world` ranks its share of the batch (default: torchrun's); "fsdp" where only sharded weights and
    optimiser state fit) and the memory one device then holds, before anything trains: every run that fits
    neither way is named at once, with its numbers."""
    device = torch.device(setting.device)
    world = world or int(os.environ.get("WORLD_SIZE", "1"))
    available = device_memory(device)
    rows, refused, seen = [], [], set()
    for claim in claims:
        for arm in claim.arms:
            if not arm.trains or (arm.dataset, arm.variant, arm.overrides) in seen:
                continue
            seen.add((arm.dataset, arm.variant, arm.overrides))
            try:
                plan = plan_training(run_config(arm, setting), setting.at_scale.place(arm.dataset).train["batch_size"],
                                     available, world, AUTO_MICRO_BATCH)
            except DoesNotFit as e:
                refused.append(f"{claim.key}, {arm.name}: {e}")
                continue
            rows.append({"claim": claim.key, "arm": arm.name, "parameters": plan.estimate.parameters,
                         "strategy": plan.strategy, "micro_batch": plan.micro_batch,
                         "gib_per_device": round(plan.estimate.total / 2**30, 2)})
    if refused:
        raise DoesNotFit(f"{len(refused)} run(s) do not fit {world} {device.type} device(s), so nothing was trained: "
                         + " | ".join(refused) + ". Narrow the claims with --only, or run on more or larger devices "
                         "(under torchrun each rank trains on its share of the batch, and a run whose weights and "
                         "optimiser state do not fit one device is sharded over the ranks).")
    return rows
