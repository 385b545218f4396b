"""Recipes for state tracking: implicit and explicit Mamba2-style models on word problems.

Training follows the implicit-SSM paper's curriculum, sized for a CPU:
- explicit models: one pass of the stack, ordinary backprop;
- implicit models: a weight-tied warm-up (`tied_iters` applications of f from
  z = 0, full backprop) for the first `tied_fraction` of the steps, then DEQ
  training: `deq_iters` damped iterations without gradient, then `phantom_steps`
  damped steps with autograd (the phantom gradient, damping tau), plus an
  optional Jacobian penalty at the fixed point (below).
Per-position cross-entropy on the unshifted targets (the prefix product up to
and including token t is predicted at position t). Fresh random sequences every
step from a seeded numpy generator; weights from a seeded torch generator.

Optional data curriculum (`curriculum`): between the fractions
`curriculum_start` and `curriculum_end` of the steps, the probability of an
identity token moves linearly from `identity_prob` to `identity_prob_final` and
the sequence length from `train_length_start` to `train_length`. The learning
rate warms up linearly over `warmup_steps` and then follows a cosine from `lr`
down to `lr_final` x `lr` at the last step.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from aocsim.errors import InputError
from aocsim.io.model_files import save_model, software_versions
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.solve.backward import Phantom
from aocsim.tasks.groups import group, word_problems
from aocsim.train.evaluation import evaluate_lengths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateTrackingRecipe:
    """Every setting of a state-tracking training run (recorded in the model card)."""

    name: str
    task: str
    implicit: bool
    n_layers: int = 1
    d_model: int = 32
    d_state: int = 8
    expand: int = 2
    head_dim: int = 16
    train_length: int = 16
    identity_prob: float = 0.5
    batch_size: int = 32
    steps: int = 3000
    lr: float = 2e-3
    # Linear warm-up, then a cosine from lr to lr_final * lr (the defaults are the schedule the
    # first committed models were trained with).
    warmup_steps: int = 100
    lr_final: float = 0.1
    # Data curriculum (module docstring); None keeps identity_prob / train_length for every step.
    identity_prob_final: float | None = None
    train_length_start: int | None = None
    curriculum_start: float = 0.0
    curriculum_end: float = 1.0
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    tied_fraction: float = 0.25
    tied_iters: int = 4
    deq_iters: int = 16
    phantom_steps: int = 4
    tau: float = 0.8
    # Weight of the Jacobian penalty E||v^T J_f(z*)||^2 / numel (Hutchinson estimate of
    # ||J||_F^2 per state variable; Bai, Koltun & Kolter, "Stabilizing Equilibrium Models by
    # Jacobian Regularization", ICML 2021). It keeps f contractive around its equilibria, so the
    # fixed point is unique and both execution modes reach the same one; 0 switches it off.
    jac_reg: float = 0.0
    # Hardware-aware training (aocsim/train/hardware_aware.py): weight bits of the maps inside f
    # (None: full precision) and the noise of each of their calls, relative to its largest output.
    hw_weight_bits: int | None = None
    hw_noise: float = 0.0
    # Start from a trained model's weights (a bundled name or a model folder; its config must be
    # the recipe's) instead of a fresh initialisation: fine-tuning, e.g. hardware-aware.
    init: str | None = None
    seed: int = 0
    # Recipe revision, so that the cards of models trained before a recipe changed stay apart in
    # the seed table (1: the first committed recipes; 2: the A5 recipes of issue 11).
    revision: int = 1
    eval_batch: int = 256
    # Evaluation solves tightly: with a loose tolerance (1e-3) the two modes stop at points up
    # to 0.2 apart on slowly contracting models, enough to flip near-tied predictions.
    eval_tol: float = 1e-5
    eval_max_iter: int = 300
    # Evaluation lengths (multiples of train_length) and the identity-token probability of the
    # evaluation sequences (None: identity_prob, as the first committed models were evaluated;
    # 1 / order: every element equally likely).
    eval_factors: tuple[int, ...] = (1, 4, 8)
    eval_identity_prob: float | None = None

    def __post_init__(self) -> None:
        # A card read back from YAML gives a list; keep the recipe hashable and comparable.
        object.__setattr__(self, "eval_factors", tuple(self.eval_factors))

        def prob(p: float | None) -> bool:
            return p is None or 0 <= p <= 1

        checks = {"steps": self.steps >= 1, "batch_size": self.batch_size >= 1, "train_length": self.train_length >= 1,
                  "lr": self.lr > 0, "tau": 0 < self.tau <= 1, "jac_reg": self.jac_reg >= 0,
                  "hw_weight_bits": self.hw_weight_bits is None or 2 <= self.hw_weight_bits <= 24,
                  "hw_noise": 0 <= self.hw_noise < 1,
                  "tied_fraction": 0 <= self.tied_fraction <= 1, "eval_tol": self.eval_tol >= 0,
                  "identity_prob": 0 <= self.identity_prob <= 1, "identity_prob_final": prob(self.identity_prob_final),
                  "train_length_start": self.train_length_start is None
                  or 1 <= self.train_length_start <= self.train_length,
                  "curriculum_start": 0 <= self.curriculum_start <= 1,
                  "curriculum_end": self.curriculum_start <= self.curriculum_end <= 1,
                  "warmup_steps": self.warmup_steps >= 1, "lr_final": 0 <= self.lr_final <= 1,
                  "eval_factors": len(self.eval_factors) >= 1
                  and all(isinstance(k, int) and k >= 1 for k in self.eval_factors),
                  "eval_identity_prob": prob(self.eval_identity_prob)}
        expected = {"steps": "an integer >= 1", "batch_size": "an integer >= 1", "train_length": "an integer >= 1",
                    "lr": "> 0", "tau": "in (0, 1]", "jac_reg": ">= 0 (0 switches the penalty off)",
                    "hw_weight_bits": "an integer in [2, 24], or None (full precision)",
                    "hw_noise": "in [0, 1) (0: no noise)",
                    "tied_fraction": "in [0, 1]", "eval_tol": ">= 0", "identity_prob": "a probability in [0, 1]",
                    "identity_prob_final": "a probability in [0, 1], or None (no schedule)",
                    "train_length_start": f"an integer in [1, train_length = {self.train_length}], or None",
                    "curriculum_start": "a fraction of the steps in [0, 1]",
                    "curriculum_end": f"a fraction of the steps in [curriculum_start = {self.curriculum_start}, 1]",
                    "warmup_steps": "an integer >= 1", "lr_final": "a fraction of lr in [0, 1]",
                    "eval_factors": "a non-empty list of integers >= 1 (multiples of train_length)",
                    "eval_identity_prob": "a probability in [0, 1], or None (identity_prob)"}
        for name, ok in checks.items():
            if not ok:
                raise InputError(f"recipe {self.name!r}: {name} = {getattr(self, name)!r}; expected {expected[name]}")

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

    def lr_factor(self, step: int) -> float:
        """Multiplier of lr at `step`: linear warm-up, then cosine decay to lr_final."""
        lo = self.lr_final
        return min(1.0, (step + 1) / self.warmup_steps) * (
            (1 + lo) / 2 + (1 - lo) / 2 * math.cos(math.pi * min(step / self.steps, 1.0)))

    @property
    def eval_prob(self) -> float:
        """Identity-token probability of the evaluation sequences."""
        return self.identity_prob if self.eval_identity_prob is None else self.eval_identity_prob

    def config(self, vocab_size: int) -> SSMConfig:
        return SSMConfig(vocab_size=vocab_size, d_model=self.d_model, d_state=self.d_state, expand=self.expand,
                         head_dim=self.head_dim, n_layers=self.n_layers, implicit=self.implicit)


def _jacobian_penalty(model: ImplicitSSM, z_star: torch.Tensor, u: torch.Tensor, gen: torch.Generator
                      ) -> torch.Tensor:
    """Hutchinson estimate of ||J_f(z*)||_F^2 per state variable, differentiable in the weights."""
    z = z_star.detach().requires_grad_()
    fz = model.f(z, u)
    v = torch.randn(fz.shape, generator=gen, dtype=fz.dtype).to(fz.device)
    (vjp,) = torch.autograd.grad(fz, z, v, create_graph=True)
    return vjp.pow(2).sum() / v.numel()


def _load_initial(model: ImplicitSSM, name_or_path: str) -> None:
    """Copy a trained model's weights into `model` (same config), keeping `model`'s dtype."""
    from aocsim.io.model_files import load_model

    start = load_model(name_or_path)
    if not isinstance(start, ImplicitSSM) or start.config.to_dict() != model.config.to_dict():
        found = start.config.to_dict() if isinstance(start, ImplicitSSM) else type(start).__name__
        raise InputError(f"init = {name_or_path!r}: its config {found} is not the recipe's "
                         f"{model.config.to_dict()}; expected a model of the same architecture")
    dtype = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(dtype) for k, v in start.state_dict().items()})


def _forward_train(model: ImplicitSSM, tokens: torch.Tensor, step: int, r: StateTrackingRecipe,
                   gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits [B, L, V] with the gradient path of the current phase, and the Jacobian penalty (or None)."""
    u = model.injection(tokens)
    z = u.new_zeros(*tokens.shape, model.config.d_model)
    if not r.implicit:
        return model.head(model.f(z, u)), None
    if step < int(r.tied_fraction * r.steps):  # weight-tied warm-up, full backprop
        for _ in range(r.tied_iters):
            z = model.f(z, u)
        return model.head(z), None
    with torch.no_grad():  # fixed-point phase: iterate without a graph ...
        u_const = u.detach()
        for _ in range(r.deq_iters):
            z = torch.lerp(z, model.f(z, u_const), r.tau)
    penalty = _jacobian_penalty(model, z, u, gen) if r.jac_reg > 0 else None
    # ... then a few damped steps with autograd (phantom gradient)
    z = Phantom(r.phantom_steps, r.tau).attach(lambda s: model.f(s, u), z, z)
    return model.head(z), penalty


def write_checkpoint(model: ImplicitSSM, path: Path, step: int, metrics: dict[str, float]) -> None:
    """Weights and progress in HDF5 (no pickle)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as h5:
        for key, value in model.state_dict().items():
            h5.create_dataset(key, data=value.detach().cpu().numpy())
        h5.attrs["step"] = step
        h5.attrs["metrics"] = json.dumps(metrics)


def train(r: StateTrackingRecipe, *, progress: bool = True, run_dir: Path | None = None) -> tuple[ImplicitSSM, dict]:
    """Train by recipe `r`; returns the model and its training log summary."""
    g = group(r.task)
    model = ImplicitSSM(r.config(g.order), generator=torch.Generator().manual_seed(r.seed))
    if r.init is not None:
        _load_initial(model, r.init)
    opt = torch.optim.AdamW(model.parameters(), lr=r.lr, weight_decay=r.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, r.lr_factor)
    rng = np.random.default_rng(r.seed)
    probe_gen = torch.Generator().manual_seed(r.seed + 1)  # Hutchinson probes of the Jacobian penalty
    if run_dir:
        run_dir.mkdir(parents=True, exist_ok=True)
    log_file = (run_dir / "metrics.jsonl").open("w") if run_dir else None
    start, history = time.perf_counter(), []
    hooks = []
    if r.hw_weight_bits is not None or r.hw_noise > 0:  # the device's errors in every training step
        from aocsim.train.hardware_aware import attach

        hooks = attach(model, weight_bits=r.hw_weight_bits, noise=r.hw_noise,
                       generator=torch.Generator().manual_seed(r.seed + 2))
    bar = tqdm(range(r.steps), desc=r.name, disable=not progress)
    for step in bar:
        model.train()
        length, identity_prob = r.curriculum(step)
        tokens, targets = word_problems(g, r.batch_size, length, identity_prob=identity_prob, generator=rng)
        logits, penalty = _forward_train(model, tokens, step, r, probe_gen)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        opt.zero_grad()
        (loss if penalty is None else loss + r.jac_reg * penalty).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r.grad_clip)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == r.steps - 1:
            acc = float((logits.argmax(-1) == targets).double().mean())
            entry = {"step": step, "loss": round(loss.item(), 5), "train_acc": round(acc, 4),
                     "seconds": round(time.perf_counter() - start, 1)}
            if r.identity_prob_final is not None or r.train_length_start is not None:
                entry.update(length=length, identity_prob=round(identity_prob, 4))
            if penalty is not None:
                entry["jacobian_fro2"] = round(penalty.item(), 5)
            history.append(entry)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc:.3f}")
            if log_file:
                log_file.write(json.dumps(entry) + "\n")
                log_file.flush()
        if run_dir and (step + 1) % 1000 == 0:
            write_checkpoint(model, run_dir / f"checkpoint-{step + 1}.h5", step + 1, history[-1])
    if log_file:
        log_file.close()
    for handle in hooks:  # the trained model is evaluated and saved plainly
        handle.remove()
    model.eval()
    return model, {"history": history[:: max(1, len(history) // 20)], "train_seconds":
                   round(time.perf_counter() - start, 1)}


def model_card(r: StateTrackingRecipe, model: ImplicitSSM, summary: dict, metrics: dict) -> dict[str, Any]:
    compact = {k: {m: ({kk: vv for kk, vv in v.items() if kk != "accuracy_by_position"} if isinstance(v, dict)
                       else v) for m, v in e.items()} for k, e in metrics.items()}
    return {
        "name": r.name,
        "kind": "implicit_ssm",
        "task": "state_tracking",
        "description": f"{'implicit' if r.implicit else 'explicit'} Mamba2-style model, {r.n_layers} layer(s), "
                       f"word problems on {group(r.task).name}; per-token prefix products.",
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
