"""The learning rate of every real-data and synthetic arm with a grid, tuned before its reported seeds train.

Each run configuration (variant, data set, model config) trains at every rate of its grid on the
first tuning seed and at the KEPT best so far on each later one (successive halving; tuning seeds are
apart from the reported ones). Each fit holds out a fixed part of the training data (HOLDOUT) and is
scored on it by the loss it trains for; of the rates the last seed fitted, the lowest mean loss is the
rate the reported seeds train at. The choice never sees the reported validation split, and every
configuration gets the same fits (fits_per_configuration).

A synthetic arm with a grid is tuned per configuration (model, task, level) too: one unit on the first tuning
seed fits its rates along the LADDER and chooses on that teacher's validation sequences; its reported seeds
train once at that rate (RULE says why one seed).

Why so: on the 31 configurations once tuned on both seeds at every rate, the halving chose the same
rate every time, at 5 fits instead of 6. Tuned on seed 1000 alone, 9 of them chose another rate, and
some chose badly (Table 3's f of depth 3 at 1e-2 reached 1.467 nats against 1.396 at 3e-3).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from damcha.evidence.records import Arm, Claim
from damcha.evidence.synthetic_fits import validation_scores

GRID = (1e-3, 3e-3, 1e-2)
# Where the choice is the lowest or highest rate tried, the next rate beyond is fitted on every tuning seed,
# until the choice lies inside the rates tried or is an end of the ladder: its ends are the stated bounds
# (no rate beyond them is tried; a choice there says so). The quick smoke run keeps its two-rate grid.
LADDER = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
TUNING_SEEDS = (1000, 1001)  # apart from the reported seeds 0, 1, ... (and from every synthetic seed)
KEPT = 2  # the rates each tuning seed after the first fits: the best so far (successive halving)
QUICK_GRID, QUICK_TUNING_SEEDS = (1e-3, 3e-3), (1000,)
HOLDOUT = 0.15  # the share of the training data a tuning fit holds out and is scored on
RULE = ("Every arm that trains on a data set has its learning rate tuned first: its run configuration trains at "
        "each rate of the grid on tuning seed 1000 and at the two best of them on seed 1001 (seeds apart from the "
        f"reported ones), each fit holding out {HOLDOUT:.0%} of the training data (a fixed random subset; a corpus's "
        "last stretch) and scored on it by the loss it trains for; of those two, the rate with the lower mean "
        "hold-out loss is the one the reported seeds train at, on the whole training split. Where that is the "
        "lowest or highest rate tried, the next rate beyond it (3e-4 and 1e-4 below, 3e-2 and 1e-1 above) is "
        "fitted on both tuning seeds and joins the choice, until the choice lies inside the rates tried or at "
        f"{LADDER[0]:g} or {LADDER[-1]:g}, the stated bounds. The reported validation split never enters the choice. "
        "A synthetic model with a grid has its rate tuned per level before its reported seeds train, on tuning seed 1000 "
        "alone (a teacher, initialisation and batches of its own): it fits each rate of its grid, scored on 1024 "
        "validation sequences of its teacher, and goes along the same ladder until the choice lies inside the rates "
        "tried or at a bound; the reported seeds then train once at the chosen rate and are scored on their test "
        "sequences. (One tuning seed, not two: a second would add about a third to the synthetic claims' cost; the "
        "reported seeds' spread includes what a rate tuned on another seed costs them.)")


def grid(quick: bool) -> tuple[float, ...]:
    return QUICK_GRID if quick else GRID


def tuning_seeds(quick: bool) -> tuple[int, ...]:
    return QUICK_TUNING_SEEDS if quick else TUNING_SEEDS


def with_grid(claims: list[Claim], quick: bool) -> list[Claim]:
    """The claims with every arm that trains on a data set given the tuning grid (where it has none)."""
    def gridded(arm: Arm) -> Arm:
        return dataclasses.replace(arm, lrs=grid(quick)) if arm.trains and not arm.lrs else arm
    return [dataclasses.replace(c, arms=tuple(gridded(a) for a in c.arms)) for c in claims]


def configuration(arm: Arm) -> Arm:
    """What a rate is tuned for: the run an arm evaluates, rate and training length aside (arms sharing it share
    the rate; a compute-matched arm trains longer at the rate its configuration chose at the data set's length);
    a synthetic arm's model, task, level and grid."""
    if arm.kind == "synthetic":
        return dataclasses.replace(arm, name="", lr=0.0, tuning=False)
    return dataclasses.replace(arm.run_arm, lr=0.0, tuning=False, train_overrides=())


def describe(config: Arm) -> str:
    if config.kind == "synthetic":
        return f"{config.variant} on the {config.task} task at {config.level:g}"
    tag = "".join(f", {k}={v}" for k, v in config.overrides)
    return f"{config.variant} on {config.dataset}{tag}"


def tuning_arms(claims: list[Claim]) -> dict[Arm, dict[float, Arm]]:
    """configuration -> rate -> the tuning arm fitting it at that rate, for every gridded arm of `claims`."""
    grids: dict[Arm, tuple[float, ...]] = {}
    for claim in claims:
        for arm in claim.arms:
            if arm.trains and arm.lrs:
                grids.setdefault(configuration(arm), arm.lrs)
    return {config: {lr: at_rate(config, lr) for lr in rates} for config, rates in grids.items()}


def synthetic_tuning_arms(claims: list[Claim]) -> dict[Arm, Arm]:
    """configuration -> the synthetic tuning unit's arm (its rates along the ladder on the tuning seed), for every
    synthetic arm of `claims` with a grid."""
    configs = {configuration(a) for claim in claims for a in claim.arms if a.kind == "synthetic" and a.rate_tuned}
    return {c: dataclasses.replace(c, name=f"tuning: {describe(c)}", tuning=True) for c in sorted(configs, key=describe)}


def synthetic_tuning_seed(quick: bool) -> int:
    return tuning_seeds(quick)[0]


def _halving(rates: dict[float, Arm], quick: bool, done: dict[str, dict]):
    """A configuration's fits so far, seed by seed: the first tuning seed fits every rate, each later one
    the KEPT rates best so far; then, while the best is the lowest or highest rate tried, the next rate of
    the LADDER beyond it on every seed (not in a quick run). Returns (the fits it needs now, each fitted
    rate's losses, the chosen rate or None while a needed fit is not done)."""
    alive, needed = sorted(rates), []
    losses: dict[float, list[float]] = {lr: [] for lr in rates}
    for i, seed in enumerate(tuning_seeds(quick)):
        if i:
            alive = sorted(alive, key=lambda lr: (_mean(losses[lr]), lr))[:KEPT]
        units = {lr: rates[lr].unit(seed, quick) for lr in alive}
        needed += [(rates[lr], seed) for lr in alive]
        if not all(u in done for u in units.values()):
            return needed, losses, None
        for lr, u in units.items():
            losses[lr].append(float(done[u]["tuning_loss"]))
    chosen = min(alive, key=lambda lr: (_mean(losses[lr]), lr))
    while not quick and (next_rate := beyond(chosen, list(losses))) is not None:
        arm = at_rate(next(iter(rates.values())), next_rate)
        fits = [(arm, seed) for seed in tuning_seeds(quick)]
        needed += fits
        if not all(arm.unit(seed, quick) in done for _, seed in fits):
            return needed, losses, None
        losses[next_rate] = [float(done[arm.unit(seed, quick)]["tuning_loss"]) for _, seed in fits]
        alive.append(next_rate)
        chosen = min(alive, key=lambda lr: (_mean(losses[lr]), lr))
    return needed, losses, chosen


def beyond(chosen: float, tried: list[float]) -> float | None:
    """The LADDER's next rate past `chosen` where it is the lowest or highest rate tried; None where it is
    inside them, or an end of the ladder (the stated bound), or off the ladder."""
    tried = sorted(tried)
    if chosen not in LADDER or tried[0] < chosen < tried[-1]:
        return None
    step = 1 if chosen == tried[-1] else -1
    at = LADDER.index(chosen) + step
    return LADDER[at] if 0 <= at < len(LADDER) else None


def at_rate(fit: Arm, lr: float) -> Arm:
    """The tuning arm of `fit`'s configuration at another rate."""
    config = configuration(fit)
    return dataclasses.replace(config, name=f"tuning: {describe(config)} at lr={lr:g}", lr=lr, tuning=True)


def _mean(losses: list[float]) -> float:
    return float(np.mean(losses)) if np.isfinite(losses).all() else float("inf")


def fits_per_configuration(quick: bool) -> int:
    """The fits of a configuration whose choice lies inside its grid (one at an edge takes more: LADDER)."""
    rates = len(grid(quick))
    return rates + (len(tuning_seeds(quick)) - 1) * min(KEPT, rates)


def tuning_units(claims: list[Claim], quick: bool, done: dict[str, dict] | None = None) -> dict[str, tuple[Arm, int]]:
    """unit -> (tuning arm, seed): the fits the choice of rates needs, as far as `done` decides them (a
    later seed's fits are known once the earlier seeds' are done)."""
    seed = synthetic_tuning_seed(quick)
    return {**{arm.unit(seed, quick): (arm, seed) for arm in synthetic_tuning_arms(claims).values()},
            **{arm.unit(seed, quick): (arm, seed) for rates in tuning_arms(claims).values()
               for arm, seed in _halving(rates, quick, done or {})[0]}}


def tuning_table(claims: list[Claim], quick: bool, done: dict[str, dict]) -> list[dict]:
    """One row per configuration whose fits are all done: each rate's hold-out loss per tuning seed that
    fitted it, and the chosen rate (the lowest mean of the rates the last seed fitted; the lower on a tie)."""
    rows = []
    for config, rates in tuning_arms(claims).items():
        _, losses, chosen = _halving(rates, quick, done)
        if chosen is not None:
            rows.append({"run": describe(config), "configuration": config.spec(), "seeds": list(tuning_seeds(quick)),
                         "losses": {f"{lr:g}": v for lr, v in losses.items()}, "chosen": chosen})
    seed = synthetic_tuning_seed(quick)
    for config, arm in synthetic_tuning_arms(claims).items():
        if (value := done.get(arm.unit(seed, quick))) is not None:
            metric, scores = validation_scores(value)
            rows.append({"run": describe(config), "configuration": config.spec(), "seeds": [seed], "metric": metric,
                         "validation": {f"{lr:g}": [v] for lr, v in sorted(scores.items())}, "chosen": value["lr"]})
    return rows


def row_scores(row: dict) -> dict[str, list[float]]:
    """rate -> the scores a tuning row chose by, one per tuning seed: hold-out losses (real data) or validation
    scores (synthetic, by the row's metric)."""
    return row.get("losses") or row["validation"]


def tuned(claims: list[Claim], table: list[dict]) -> list[Claim]:
    """The claims with every gridded arm at its configuration's chosen rate; an arm whose configuration
    has no chosen rate in `table` trains untuned (its grid dropped, the default rate)."""
    chosen = {json.dumps(Arm.padded_spec(row["configuration"])): row["chosen"] for row in table}  # (older rows: fewer fields)

    def at_rate(arm: Arm) -> Arm:
        if not arm.rate_tuned:
            return arm
        rate = chosen.get(json.dumps(configuration(arm).spec()))
        return dataclasses.replace(arm, lr=rate) if rate is not None else dataclasses.replace(arm, lrs=())
    return [dataclasses.replace(c, arms=tuple(at_rate(a) for a in c.arms)) for c in claims]
