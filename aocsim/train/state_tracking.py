"""Recipes for state tracking: implicit and explicit Mamba2-style models on word problems.

Trained by the shared loop (aocsim/train/loop.py: weight-tied warm-up, then fixed-point iterations
and phantom-gradient steps) on per-position cross-entropy against the unshifted targets (the prefix
product up to and including token t is predicted at position t). Fresh random sequences every step
from a seeded numpy generator; weights from a seeded torch generator.

Optional data curriculum (`curriculum`): between the fractions `curriculum_start` and
`curriculum_end` of the steps, the probability of an identity token moves linearly from
`identity_prob` to `identity_prob_final` and the sequence length from `train_length_start` to
`train_length`. Optional subgroup curriculum (`subgroup`, e.g. A5 in S5): before the fraction
`subgroup_start` of the steps every non-identity token is an element of the subgroup (its word
problems first); between `subgroup_start` and `subgroup_end` the share of tokens drawn from outside
it rises linearly to its share of all non-identity elements (uniform from then on).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from aocsim.io.model_files import save_model, software_versions
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.tasks.groups import group, subgroup_elements, word_problems
from aocsim.train.evaluation import evaluate_lengths
from aocsim.train.loop import Batch, TrainingRecipe, fit, new_model, write_checkpoint
from aocsim.train.loop import jacobian_penalty as _jacobian_penalty

__all__ = ["StateTrackingRecipe", "_jacobian_penalty", "model_card", "run_recipe", "train", "write_checkpoint"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class StateTrackingRecipe(TrainingRecipe):
    """Every setting of a state-tracking training run (recorded in the model card); the shared
    ones (architecture, optimiser, curriculum phases, evaluation solver) are `TrainingRecipe`'s."""

    task: str
    train_length: int = 16
    identity_prob: float = 0.5
    # Data curriculum (module docstring); None keeps identity_prob / train_length for every step.
    identity_prob_final: float | None = None
    train_length_start: int | None = None
    curriculum_start: float = 0.0
    curriculum_end: float = 1.0
    # Recipe revision, so that the cards of models trained before a recipe changed stay apart in
    # the seed table (1: the first committed recipes; 2: the A5 recipes of issue 11).
    revision: int = 1
    # Evaluation lengths (multiples of train_length) and the identity-token probability of the
    # evaluation sequences (None: identity_prob, as the first committed models were evaluated;
    # 1 / order: every element equally likely).
    eval_factors: tuple[int, ...] = (1, 4, 8)
    eval_identity_prob: float | None = None
    # Subgroup curriculum (module docstring): its name (None: none) and the fractions of the steps
    # where the tokens from outside it start and finish coming in.
    subgroup: str | None = None
    subgroup_start: float = 0.0
    subgroup_end: float = 0.0

    def __post_init__(self) -> None:
        # A card read back from YAML gives a list; keep the recipe hashable and comparable.
        object.__setattr__(self, "eval_factors", tuple(self.eval_factors))
        super().__post_init__()

    def checks(self) -> dict[str, tuple[bool, str]]:
        def prob(p: float | None) -> bool:
            return p is None or 0 <= p <= 1

        return {**super().checks(),
                "train_length": (self.train_length >= 1, "an integer >= 1"),
                "identity_prob": (0 <= self.identity_prob <= 1, "a probability in [0, 1]"),
                "identity_prob_final": (prob(self.identity_prob_final), "a probability in [0, 1], or None (no schedule)"),
                "train_length_start": (self.train_length_start is None or 1 <= self.train_length_start <= self.train_length,
                                       f"an integer in [1, train_length = {self.train_length}], or None"),
                "curriculum_start": (0 <= self.curriculum_start <= 1, "a fraction of the steps in [0, 1]"),
                "curriculum_end": (self.curriculum_start <= self.curriculum_end <= 1,
                                   f"a fraction of the steps in [curriculum_start = {self.curriculum_start}, 1]"),
                "eval_factors": (len(self.eval_factors) >= 1 and all(isinstance(k, int) and k >= 1
                                                                     for k in self.eval_factors),
                                 "a non-empty list of integers >= 1 (multiples of train_length)"),
                "eval_identity_prob": (prob(self.eval_identity_prob), "a probability in [0, 1], or None (identity_prob)"),
                "subgroup": (self.subgroup is None or self.subgroup == f"A{self.task[1:]}" and self.task[:1] == "S",
                             f"None, or A<n> with task S<n> (the even permutations; task = {self.task!r})"),
                "subgroup_start": (0 <= self.subgroup_start <= 1, "a fraction of the steps in [0, 1]"),
                "subgroup_end": (self.subgroup_start <= self.subgroup_end <= 1,
                                 f"a fraction of the steps in [subgroup_start = {self.subgroup_start}, 1]")}

    def curriculum(self, step: int) -> tuple[int, float]:
        """(sequence length, identity-token probability) of the training batch at `step`."""
        begin, end = self.curriculum_start * self.steps, self.curriculum_end * self.steps
        frac = 1.0 if step >= end else 0.0 if step < begin else (step - begin) / (end - begin)
        # (1 - frac) a + frac b is exactly a at frac = 0 and b at frac = 1; without a schedule the
        # plain settings are returned untouched (a rounding error in p would change the data).
        length = self.train_length if self.train_length_start is None else round(
            (1 - frac) * self.train_length_start + frac * self.train_length)
        p = self.identity_prob if self.identity_prob_final is None else (
            (1 - frac) * self.identity_prob + frac * self.identity_prob_final)
        return length, p

    def outside_prob(self, step: int, outside: int, order: int) -> float:
        """The probability that a non-identity token at `step` comes from outside the subgroup, which
        leaves `outside` of the group's `order` elements out (module docstring)."""
        begin, end = self.subgroup_start * self.steps, self.subgroup_end * self.steps
        frac = 0.0 if step < begin else 1.0 if step >= end else (step - begin) / (end - begin)
        return frac * outside / (order - 1)

    @property
    def eval_prob(self) -> float:
        """Identity-token probability of the evaluation sequences."""
        return self.identity_prob if self.eval_identity_prob is None else self.eval_identity_prob


def train(r: StateTrackingRecipe, *, progress: bool = True, run_dir: Path | None = None) -> tuple[ImplicitSSM, dict]:
    """Train by recipe `r` (aocsim.train.loop.fit); returns the model and its training log summary."""
    g = group(r.task)
    model = new_model(r, g.order)
    rng = np.random.default_rng(r.seed)
    scheduled = r.identity_prob_final is not None or r.train_length_start is not None
    within = None if r.subgroup is None else subgroup_elements(g, r.subgroup)

    def next_batch(step: int) -> Batch:
        length, identity_prob = r.curriculum(step)
        extra = {"length": length, "identity_prob": round(identity_prob, 4)} if scheduled else {}
        if within is None:
            tokens, targets = word_problems(g, r.batch_size, length, identity_prob=identity_prob, generator=rng)
            return tokens, targets, extra
        outside = r.outside_prob(step, g.order - len(within), g.order)
        tokens, targets = word_problems(g, r.batch_size, length, identity_prob=identity_prob, generator=rng,
                                        within=within, outside_prob=outside)
        return tokens, targets, {**extra, "outside_prob": round(outside, 4)}

    return model, fit(model, r, next_batch, progress=progress, run_dir=run_dir)


def model_card(r: StateTrackingRecipe, model: ImplicitSSM, summary: dict, metrics: dict) -> dict[str, Any]:
    what = ("plain Mamba2 model (tied head)" if r.kind == "mamba2" else
            f"{'implicit' if r.implicit else 'explicit'} Mamba2-style model")
    compact = {k: {m: ({kk: vv for kk, vv in v.items() if kk != "accuracy_by_position"} if isinstance(v, dict)
                       else v) for m, v in e.items()} for k, e in metrics.items()}
    return {
        "name": r.name,
        "kind": r.kind,
        "task": "state_tracking",
        "description": f"{what}, {r.n_layers} layer(s), word problems on {group(r.task).name}; per-token prefix "
                       "products.",
        "config": model.config.to_dict(),
        "training": {**asdict(r), **summary},
        "data": {"group": group(r.task).name, "order": group(r.task).order, "train_length": r.train_length,
                 "identity_prob": r.identity_prob, "eval_identity_prob": r.eval_prob, "generator": "aocsim.tasks.groups.word_problems, fresh "
                 "sequences every step (numpy default_rng(seed))"},
        "metrics": compact,
        "seed": r.seed,
        "software": software_versions(),
    }


def run_recipe(recipe: StateTrackingRecipe, out_dir: Path, *, overwrite: bool = False, progress: bool = True,
               run_dir: Path | None = None, **overrides: Any) -> Path:
    """Train, evaluate at the recipe's eval_factors x L in both modes, and write the model directory."""
    r = replace(recipe, **overrides)
    if out_dir.exists() and not overwrite:  # fail before spending minutes on training
        from aocsim.errors import ModelFileError
        raise ModelFileError(f"{out_dir} exists; refusing to overwrite it (pass overwrite=True / --force)")
    model, summary = train(r, progress=progress, run_dir=run_dir)
    metrics = evaluate_lengths(model, r)
    return save_model(model, out_dir, model_card(r, model, summary, metrics), overwrite=overwrite)
