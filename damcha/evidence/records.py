"""What the evidence is made of: arms measured over seeds, the claims that compare them, sanity bounds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TRAINING_KINDS = ("train", "adaptivity")  # arms that evaluate a model trained on a data set
KEYED_FIELDS = 11  # an Arm's fields up to `tuning`: always in a unit's key (Arm.unit)
AS_TRAINED = "full"  # an arm's mode when it evaluates the model as trained (DAMCHA's full metric)


@dataclass(frozen=True)
class Arm:
    """One thing measured over seeds. kind: 'train' (variant on dataset, evaluated in `mode`),
    'adaptivity' (the gap M-bar vs M(x) of the trained `variant`), 'synthetic' (task, level),
    'efficiency' (one layer of `variant` against one of MHA; a synthetic arm's `variant` may also name one
    of damcha.inputs.synthetic.SYNTHETIC_MODELS), 'constant' (`level` for every metric:
    a threshold the reference is compared with), 'baseline' (a trivial completion, `task` of
    damcha/evidence/baselines.py, on the dataset's validation images: no model, no seed dependence)."""

    name: str
    kind: str = "train"
    variant: str = "damcha"
    dataset: str = "digits"
    overrides: tuple = ()  # ModelConfig fields (name, value)
    mode: str = AS_TRAINED
    task: str = ""
    level: float = 0.0
    # train, adaptivity, synthetic: the grid the runner tunes `lr` over before the reported seeds train
    # (damcha/evidence/tuning.py; () = the default rate)
    lrs: tuple[float, ...] = ()
    lr: float = 0.0  # the rate the arm trains at (0: the default: TrainConfig's, 3e-3 for a synthetic fit)
    # a tuning fit: train, trained without its hold-out and scored on it; synthetic, the ladder of its configuration's
    # rates on the tuning seed's validation sequences (tuning.py)
    tuning: bool = False
    # train: TrainConfig fields (name, value) over the data set's demo training (the compute-matched arms' epochs);
    # the rate is tuned without them (tuning.configuration), at the data set's own length
    train_overrides: tuple = ()

    def spec(self) -> list:
        """The arm as JSON keeps it (a document's `arms`): its fields in order."""
        return json.loads(json.dumps(dataclasses.astuple(self)))

    @staticmethod
    def padded_spec(spec: list) -> list:
        """A stored arm's `spec` with the fields appended since it was stored, at their defaults (older
        documents stored fewer fields)."""
        return [*spec, *Arm("").spec()[len(spec):]]

    def unit(self, seed: int, quick: bool) -> str:
        """The unit's key in a work folder. Fields appended since the first work folders (train_overrides) are
        left out at their defaults, so an earlier work folder's units stay its units."""
        fields, defaults = dataclasses.astuple(self), dataclasses.astuple(Arm(""))
        kept = len(fields)
        while kept > KEYED_FIELDS and fields[kept - 1] == defaults[kept - 1]:
            kept -= 1
        return json.dumps([fields[:kept], seed, quick])

    @property
    def counted_as(self) -> str:
        """What a claim's `verdict_against` names this arm by: its variant, or the kind of an arm
        without a model (a constant threshold, a trivial baseline)."""
        return self.kind if self.kind in ("constant", "baseline") else self.variant

    @property
    def trains(self) -> bool:
        """Whether the arm evaluates a model trained on a data set (a run, shared by the arms it decides alike)."""
        return self.kind in TRAINING_KINDS

    @property
    def rate_tuned(self) -> bool:
        """Whether the arm trains at a rate tuned before its reported seeds (tuning.py): a training arm or a
        synthetic one, with a grid."""
        return bool(self.lrs) and (self.trains or self.kind == "synthetic")

    @property
    def run_arm(self) -> Arm:
        """What decides the run a training arm evaluates: its variant, data set, config, rate and whether it
        is a tuning fit (an adaptivity arm measures DAMCHA's run)."""
        return Arm("", variant="damcha" if self.kind == "adaptivity" else self.variant, dataset=self.dataset,
                   overrides=self.overrides, lr=self.lr, tuning=self.tuning, train_overrides=self.train_overrides)

    def run_name(self, seed: int, quick: bool) -> str:
        """The trained run this arm evaluates (arms of one run share it), or the unit itself."""
        if not self.trains:
            return self.unit(seed, quick)
        tag = "".join(f"-{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}"
                      for k, v in (*self.overrides, *self.train_overrides))
        tag += (f"-lr={self.lr:g}" if self.lr else "") + ("-tuning" if self.tuning else "")
        return f"{self.dataset}-{self.run_arm.variant}{tag}-{'quick' if quick else 'full'}-seed{seed}"


@dataclass(frozen=True)
class Sanity:
    """Where a task is easiest, the instruments `arms` (arms that provably represent that level, never
    the arm under judgement) must reach `bound` (mean below or above it) before the claim's numbers are
    believed; `also`: arms whose miss is a reported finding, with how many seeds reached the bound,
    and voids nothing (a judged arm, or a comparison system, that does not learn the easiest case)."""

    arms: tuple[str, ...]
    bound: float
    side: str  # "below" | "above"
    also: tuple[str, ...] = ()

    def reached(self, value: float) -> bool:
        return value < self.bound if self.side == "below" else value > self.bound

    def misses(self, means: dict[str, float], arms: tuple[str, ...],
               per_seed: dict[str, list[float]] | None = None) -> list[str]:
        def seeds(arm: str) -> str:
            if not per_seed:
                return ""
            values = per_seed[arm]
            return f"; {sum(self.reached(v) for v in values)} of {len(values)} seeds reach it"
        return [f"{a}: {means[a]:.3g} (needs {self.side} {self.bound:.3g}{seeds(a)})" for a in arms
                if not self.reached(means[a])]

    def some_seeds_short(self, means: dict[str, float], per_seed: dict[str, list[float]]) -> list[str]:
        """The `also` arms whose mean reaches the bound while some of their seeds do not (a geometric mean of
        0.14, 0.15 and 0.002 is 0.036): each with how many seeds reach it and every seed's value."""
        return [f"{a}: {sum(self.reached(v) for v in per_seed[a])} of {len(per_seed[a])} seeds reach {self.side} "
                f"{self.bound:.3g} ({', '.join(f'{v:.3g}' for v in per_seed[a])})" for a in self.also
                if a in means and self.reached(means[a]) and not all(self.reached(v) for v in per_seed[a])]


@dataclass(frozen=True)
class ConstructionCheck:
    """A comparison whose outcome the construction of the task and the mechanism's arithmetic fix in
    advance: reported as a check of that prediction ("confirmed" / "not confirmed"), never counted as
    a learned result. predicted: where `better` (the claim's reference, usually) lands against `than`
    in the paper's direction — "ahead", "behind" or "tie" (equivalence within ±margin on the
    comparison's scale, by two one-sided t-tests at 5%)."""

    better: str
    than: str
    predicted: str
    why: str
    margin: float = 0.0


@dataclass(frozen=True)
class Claim:
    key: str
    title: str
    statement: str  # quoted from the paper (shared/paper.md)
    metric: str  # the one plotted, and the verdict's unless verdict_metrics says otherwise
    lower_is_better: bool
    arms: tuple[Arm, ...]
    reference: str  # the arm the paper says is better (DAMCHA); with `groups`, each group's first arm is its reference
    paper: dict = field(default_factory=dict)  # arm name -> the paper's number for `metric`, where it has one
    # the paper's row (a data set's `paper_row`: 'Text8') -> its numbers, for the claim at a scale on that data
    # set (none given: none shown; a data set never borrows another's numbers)
    paper_on: dict = field(default_factory=dict)
    note: str = ""
    groups: tuple[tuple[str, ...], ...] = ()  # comparisons within groups (synthetic levels), each with its first arm; () = all vs reference
    verdict_against: tuple[str, ...] = ()  # only comparisons with arms of these variants (Arm.counted_as) count; () = all
    sanity: Sanity | None = None
    requires: tuple[str, ...] = ()  # checks of `sanity_checks` (SANITY_BOUNDS) that must pass, else no verdict
    pairs: tuple[tuple[str, str, str], ...] = ()  # (better, than, what it measures): reported, never counted
    columns: tuple[str, ...] = ()  # further metrics reported beside `metric`
    verdict_metrics: tuple[str, ...] = ()  # metrics compared for the verdict (default: `metric`)
    scale: str = ""  # how our scale differs from the paper's (default SCALE)
    controls: tuple[str, ...] = ()  # arms reported beside the others, never counted in the verdict
    by_construction: str = ""  # why "holds" is expected from the mechanism's arithmetic, not from learning
    min_seeds: int = 0  # at least this many seeds in a full run, whatever --seeds says (the main comparisons)
    construction_checks: tuple[ConstructionCheck, ...] = ()  # comparisons fixed in advance: checked, never counted
    cannot_speak_to: tuple[str, ...] = ()  # what the paper reports for this claim that it does not measure
    # where the paper is silent or this project deviates from it, in what stands beside the paper's numbers
    # (unit, split, evaluation, tokenisation, training): shown with them (Evidence page, "Beside the paper"); set
    # when the claim runs at a scale, from the *_at_scale fields below
    deviations: tuple[str, ...] = ()
    # what replace `note` and `cannot_speak_to`, and make `deviations` with the scale's training, when the claim
    # runs at a scale (damcha.evidence.scales): the demo's describe the demo's data, whose paper numbers are
    # shown for scale only
    note_at_scale: str = ""
    title_at_scale: str = ""  # where the demo's title names what the scale's data do not measure
    cannot_speak_to_at_scale: tuple[str, ...] = ()
    deviations_at_scale: tuple[str, ...] = ()
    # (claim, scale) -> the claim with the arms it has at that scale, where they follow from the scale's model
    # sizes rather than from the demo's (Table 3's f depths); None: the demo's arms, moved to the scale's size.
    # A module-level function (claims travel to worker processes by pickle)
    arms_at_scale: Callable[[Claim, Any], Claim] | None = None  # (Any: a Scale, which records cannot import)
    # (label, variants): the reference against these variants' arms read as a family of their own (Holm over
    # it, each comparison worded), beside the verdict and never part of it
    families: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # arm name -> whether the arm can represent its task at its level, declared where the task's function class
    # is known (synthetic tasks). The same rule decides both sides: a comparison of two declared arms of which
    # only one can represent the task is a construction check, whichever side it favours; one where neither can
    # measures approximation, not what the claim is about: reported, never counted. Only comparisons of two arms
    # that both can (or an arm not declared) are learned results.
    represents: dict = field(default_factory=dict)
    # the reported pairs (by what they measure) whose outcome the claim's summary states beside its verdict, not
    # only in its details (Fig. 13: w/o f(x) against DAMCHA, where DAMCHA scores below its own special case)
    summary_pairs: tuple[str, ...] = ()
    # arms matched to their group's reference in parameters (within 1.5x; MHA widened, a shallow f widened): a claim
    # with a counted comparison of arms more than 1.5x apart in parameters carries one (a registry test holds
    # every claim to it), so a gain of capacity shows against the reference
    matched_arms: tuple[str, ...] = ()
    # variants this project compares the reference with beyond the paper's systems (mechanisms newer than the
    # paper): their comparisons are named as the project's in the deciding comparisons (added_as)
    added_variants: tuple[str, ...] = ()
    # an arm that can stand in the reference's place (DAMCHA with f from the identity): the verdict with its values
    # in the reference's is reported beside the verdict (results.robustness)
    stand_in: str = ""

    def added_as(self, arm_name: str) -> str:
        """What this project added an arm as, where the paper made no comparison with it; "" where the paper
        compares the reference with it (its systems, its ablations, its depths)."""
        arm = next(a for a in self.arms if a.name == arm_name)
        if arm_name in self.matched_arms:
            return "a control this project added: matched in parameters"
        if arm.train_overrides:
            return "a control this project added: matched in training compute"
        if arm.kind == "constant":
            return "a threshold this project reads the claim by"
        if arm.kind == "baseline":
            return "a trivial baseline this project added"
        if arm.variant in self.added_variants:
            return "a mechanism newer than the paper, added by this project"
        return ""

    def counts(self, arm_name: str) -> bool:
        """Whether a comparison of the reference with this arm counts for the verdict (controls never do)."""
        arm = next(a for a in self.arms if a.name == arm_name)
        return arm_name not in self.controls and (not self.verdict_against or arm.counted_as in self.verdict_against)

    def representability(self, better: str, than: str) -> str | None:
        """What the declared representability fixes in a comparison: "ahead" or "behind" (only one of the
        arms can represent the task there), "neither" (no arm can), or None (both can, or one is not
        declared: the comparison measures learning)."""
        a, b = self.represents.get(better), self.represents.get(than)
        if a is None or b is None or (a and b):
            return None
        if a == b:
            return "neither"
        return "ahead" if a else "behind"

    @property
    def compared(self) -> tuple[str, ...]:
        return self.verdict_metrics or (self.metric,)

    def seeds(self, default: int, quick: bool) -> int:
        """Seeds of this claim's arms: the command's, raised to min_seeds outside --quick."""
        return default if quick else max(default, self.min_seeds)
