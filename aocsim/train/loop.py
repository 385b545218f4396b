"""The training loop of the sequence recipes (state tracking, character-level language modelling).

One definition, whatever the task: the task only supplies the batches (tokens and per-position
targets, `fit`'s `next_batch`). Training follows the implicit-SSM paper's curriculum, sized for a CPU:
- explicit models (an explicit ImplicitSSM, or the plain Mamba2 LM of kind "mamba2"): one pass, ordinary backprop;
- implicit models: a weight-tied warm-up (`tied_iters` applications of f from z = 0, full
  backprop) for the first `tied_fraction` of the steps, then DEQ training: `deq_iters` damped
  iterations without gradient, then `phantom_steps` damped steps with autograd (the phantom
  gradient, damping tau), plus an optional Jacobian penalty at the fixed point (`jac_reg`).
Per-position cross-entropy against the targets the task gives. AdamW; the learning rate warms up
linearly over `warmup_steps` and then follows a cosine from `lr` down to `lr_final` x `lr` at the
last step. Weights from a seeded torch generator, the task's data from its own seeded generator.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import h5py
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from aocsim.errors import InputError
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.nn.mamba2_lm import Mamba2Config, Mamba2LM
from aocsim.solve.backward import Phantom

# What a task hands the loop at each step: tokens [B, L], targets [B, L] (class ids per position),
# and extra fields for the metrics log (e.g. the curriculum's current length).
Batch = tuple[torch.Tensor, torch.Tensor, dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class TrainingRecipe:
    """The settings every sequence recipe shares (architecture, optimiser, curriculum, evaluation
    solver); a task's recipe adds its own fields. All are recorded in the model card."""

    name: str
    implicit: bool
    # The model kind (aocsim/nn/registry.py): "implicit_ssm" (ImplicitSSM, implicit or explicit) or
    # "mamba2" (Mamba2LM, the plain Mamba2 language model: explicit, no injection, tied head).
    kind: str = "implicit_ssm"
    n_layers: int = 1
    d_model: int = 32
    d_state: int = 8
    expand: int = 2
    head_dim: int = 16
    batch_size: int = 32
    steps: int = 3000
    lr: float = 2e-3
    # Linear warm-up, then a cosine from lr to lr_final * lr (the defaults are the schedule the
    # first committed models were trained with).
    warmup_steps: int = 100
    lr_final: float = 0.1
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
    # Scan chunk length in training (ImplicitSSM.f); the same function for any chunk, up to rounding.
    # 64 for the state-tracking models; 32 is about 1.5x faster at L = 128 on one core.
    train_chunk: int = 64
    # Hardware-aware training (aocsim/train/hardware_aware.py): weight bits of the maps inside f
    # (None: full precision) and the noise of each of their calls, relative to its largest output.
    hw_weight_bits: int | None = None
    hw_noise: float = 0.0
    # Start from a trained model's weights (a bundled name or a model folder; its config must be
    # the recipe's) instead of a fresh initialisation: fine-tuning, e.g. hardware-aware.
    init: str | None = None
    seed: int = 0
    eval_batch: int = 256
    # Evaluation solves tightly: with a loose tolerance (1e-3) the two modes stop at points up
    # to 0.2 apart on slowly contracting models, enough to flip near-tied predictions.
    eval_tol: float = 1e-5
    eval_max_iter: int = 300

    def __post_init__(self) -> None:
        for name, (ok, expected) in self.checks().items():
            if not ok:
                raise InputError(f"recipe {self.name!r}: {name} = {getattr(self, name)!r}; expected {expected}")

    def checks(self) -> dict[str, tuple[bool, str]]:
        """field -> (its value is valid, what is expected); a task's recipe adds its own."""
        return {"steps": (self.steps >= 1, "an integer >= 1"), "batch_size": (self.batch_size >= 1, "an integer >= 1"),
                "lr": (self.lr > 0, "> 0"), "tau": (0 < self.tau <= 1, "in (0, 1]"),
                "jac_reg": (self.jac_reg >= 0, ">= 0 (0 switches the penalty off)"),
                "hw_weight_bits": (self.hw_weight_bits is None or 2 <= self.hw_weight_bits <= 24,
                                   "an integer in [2, 24], or None (full precision)"),
                "hw_noise": (0 <= self.hw_noise < 1, "in [0, 1) (0: no noise)"),
                "tied_fraction": (0 <= self.tied_fraction <= 1, "in [0, 1]"),
                "eval_tol": (self.eval_tol >= 0, ">= 0"), "train_chunk": (self.train_chunk >= 1, "an integer >= 1"),
                "warmup_steps": (self.warmup_steps >= 1, "an integer >= 1"),
                "lr_final": (0 <= self.lr_final <= 1, "a fraction of lr in [0, 1]"),
                "kind": (self.kind == "implicit_ssm" or (self.kind == "mamba2" and not self.implicit and self.jac_reg == 0
                                                          and self.hw_weight_bits is None and self.hw_noise == 0),
                         "'implicit_ssm', or 'mamba2' with implicit=False, no Jacobian penalty and no "
                         "hardware-aware training")}

    def lr_factor(self, step: int) -> float:
        """Multiplier of lr at `step`: linear warm-up, then cosine decay to lr_final."""
        lo = self.lr_final
        return min(1.0, (step + 1) / self.warmup_steps) * (
            (1 + lo) / 2 + (1 - lo) / 2 * math.cos(math.pi * min(step / self.steps, 1.0)))

    def config(self, vocab_size: int) -> SSMConfig | Mamba2Config:
        if self.kind == "mamba2":
            return Mamba2Config(vocab_size=vocab_size, d_model=self.d_model, n_layers=self.n_layers,
                                d_state=self.d_state, expand=self.expand, head_dim=self.head_dim)
        return SSMConfig(vocab_size=vocab_size, d_model=self.d_model, d_state=self.d_state, expand=self.expand,
                         head_dim=self.head_dim, n_layers=self.n_layers, implicit=self.implicit)


def jacobian_penalty(model: ImplicitSSM, z_star: torch.Tensor, u: torch.Tensor, gen: torch.Generator, *,
                     chunk: int = 64) -> torch.Tensor:
    """Hutchinson estimate of ||J_f(z*)||_F^2 per state variable, differentiable in the weights."""
    z = z_star.detach().requires_grad_()
    fz = model.f(z, u, chunk=chunk)
    v = torch.randn(fz.shape, generator=gen, dtype=fz.dtype).to(fz.device)
    (vjp,) = torch.autograd.grad(fz, z, v, create_graph=True)
    return vjp.pow(2).sum() / v.numel()


def new_model(r: TrainingRecipe, vocab_size: int) -> ImplicitSSM | Mamba2LM:
    """The recipe's model, its weights drawn from seed `r.seed` (or copied from `r.init`)."""
    build = Mamba2LM if r.kind == "mamba2" else ImplicitSSM
    model = build(r.config(vocab_size), generator=torch.Generator().manual_seed(r.seed))
    if r.init is not None:
        _load_initial(model, r.init)
    return model


def _load_initial(model: ImplicitSSM | Mamba2LM, name_or_path: str) -> None:
    """Copy a trained model's weights into `model` (same kind and config), keeping `model`'s dtype."""
    from aocsim.io.model_files import load_model

    start = load_model(name_or_path)
    if type(start) is not type(model) or start.config.to_dict() != model.config.to_dict():
        found = start.config.to_dict() if type(start) is type(model) else type(start).__name__
        raise InputError(f"init = {name_or_path!r}: its config {found} is not the recipe's "
                         f"{model.config.to_dict()}; expected a model of the same architecture")
    dtype = next(model.parameters()).dtype
    model.load_state_dict({k: v.to(dtype) for k, v in start.state_dict().items()})


def forward_train(model: ImplicitSSM | Mamba2LM, tokens: torch.Tensor, step: int, r: TrainingRecipe,
                  gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits [B, L, V] with the gradient path of the current phase, and the Jacobian penalty (or None)."""
    chunk = r.train_chunk
    if isinstance(model, Mamba2LM):  # no fixed point: one forward pass
        return model(tokens, chunk=chunk), None
    u = model.injection(tokens)
    z = u.new_zeros(*tokens.shape, model.config.d_model)
    if not r.implicit:
        return model.head(model.f(z, u, chunk=chunk)), None
    if step < int(r.tied_fraction * r.steps):  # weight-tied warm-up, full backprop
        for _ in range(r.tied_iters):
            z = model.f(z, u, chunk=chunk)
        return model.head(z), None
    with torch.no_grad():  # fixed-point phase: iterate without a graph ...
        u_const = u.detach()
        for _ in range(r.deq_iters):
            z = torch.lerp(z, model.f(z, u_const, chunk=chunk), r.tau)
    penalty = jacobian_penalty(model, z, u, gen, chunk=chunk) if r.jac_reg > 0 else None
    # ... then a few damped steps with autograd (phantom gradient)
    z = Phantom(r.phantom_steps, r.tau).attach(lambda s: model.f(s, u, chunk=chunk), z, z)
    return model.head(z), penalty


def write_checkpoint(model: ImplicitSSM | Mamba2LM, path: Path, step: int, metrics: dict[str, float]) -> None:
    """Weights and progress in HDF5 (no pickle)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as h5:
        for key, value in model.state_dict().items():
            h5.create_dataset(key, data=value.detach().cpu().numpy())
        h5.attrs["step"] = step
        h5.attrs["metrics"] = json.dumps(metrics)


def fit(model: ImplicitSSM | Mamba2LM, r: TrainingRecipe, next_batch: Callable[[int], Batch], *, progress: bool = True,
        run_dir: Path | None = None) -> dict[str, Any]:
    """Train `model` in place by recipe `r` on the batches `next_batch(step)` gives.

    Writes a metrics line every 50 steps (and the last) to run_dir/metrics.jsonl and an HDF5
    checkpoint every 1000 steps, if `run_dir`. Returns the training log summary (about 20 of
    the metrics lines, `history`; the wall time, `train_seconds`, and the CPU time of this process,
    `train_cpu_seconds`: on one torch thread about the time one free core would take, whatever else runs);
    the model ends in eval mode.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=r.lr, weight_decay=r.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, r.lr_factor)
    probe_gen = torch.Generator().manual_seed(r.seed + 1)  # Hutchinson probes of the Jacobian penalty
    if run_dir:
        run_dir.mkdir(parents=True, exist_ok=True)
    log_file = (run_dir / "metrics.jsonl").open("w") if run_dir else None
    start, cpu_start, history = time.perf_counter(), time.process_time(), []
    hooks = []
    if r.hw_weight_bits is not None or r.hw_noise > 0:  # the device's errors in every training step
        from aocsim.train.hardware_aware import attach

        hooks = attach(model, weight_bits=r.hw_weight_bits, noise=r.hw_noise,
                       generator=torch.Generator().manual_seed(r.seed + 2))
    bar = tqdm(range(r.steps), desc=r.name, disable=not progress)
    for step in bar:
        model.train()
        tokens, targets, extra = next_batch(step)
        logits, penalty = forward_train(model, tokens, step, r, probe_gen)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        opt.zero_grad()
        (loss if penalty is None else loss + r.jac_reg * penalty).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r.grad_clip)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == r.steps - 1:
            acc = float((logits.argmax(-1) == targets).double().mean())
            entry = {"step": step, "loss": round(loss.item(), 5), "train_acc": round(acc, 4),
                     "seconds": round(time.perf_counter() - start, 1), **extra}
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
    return {"history": history[:: max(1, len(history) // 20)], "train_seconds": round(time.perf_counter() - start, 1),
            "train_cpu_seconds": round(time.process_time() - cpu_start, 1)}
