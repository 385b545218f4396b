"""Recipe `digits-deq48-hw`: the digits DEQ trained through the noisy device model.

Physics-aware training (Wright et al., "Deep physical neural networks trained
with backpropagation", Nature 601, 549-555, 2022): the forward pass runs on the
virtual machine, the backward pass differentiates the exact model at the state
the machine settled in.

1. The plain recipe (`aocsim/train/digits.py`, same seed) trains the exact model.
2. Fine-tuning: every `recompile_every` steps the current model is compiled
   (`aocsim.execute.compile_deq`, the same compilation `aocsim compare` uses)
   for a training chip (`variation.chip_seed` = `chip_offset` + k, k cycling
   over `train_chips`, so the evaluation chips 0, 1, ... are never seen) and
   loaded with fresh SLM programming draws. Every step runs its batch on that
   load with fresh per-iteration noise: SLM quantisation, programming error,
   the calibrated nonlinearity, DAC and ADC, all on. The device's fixed point
   z_dev (model units) enters the loss; its gradient is the implicit gradient
   of the exact map z = f(z) at z_dev (`Implicit`), so quantisation and noise
   are passed straight through.

Between two compilations the SLM keeps the program of the last one while W
moves; the digital injection U x + b and readout V z + c are always the live
ones (they are computed digitally on the machine too).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from aocsim.errors import InputError
from aocsim.execute.deq import PlacedDEQ, compile_deq, resolve_profile
from aocsim.hardware import keys
from aocsim.io.model_files import save_model
from aocsim.nn.deq import DEQ
from aocsim.progress import bar
from aocsim.solve.backward import Implicit
from aocsim.tasks import digits
from aocsim.train.digits import DigitsDEQRecipe, project_contraction, train_digits_deq

TRAINING_CHIP_OFFSET = 1000  # training chips: 1000, 1001, ...; evaluation uses 0, 1, ...


@dataclass(frozen=True)
class DigitsHWRecipe:
    """Settings of the hardware-aware fine-tuning (all recorded in the model card).

    base: the plain recipe that trains the starting point (its seed is `seed`).
    device: the profile trained through (noise on). epochs, lr, batch_size: the fine-tuning.
    recompile_every: optimiser steps per compilation and weight load. train_chips: how many
    training chips the loads cycle through (chip seeds chip_offset, chip_offset + 1, ...).
    """

    base: DigitsDEQRecipe = field(default_factory=DigitsDEQRecipe)
    device: str = "aoc48"
    epochs: int = 10
    lr: float = 2e-3
    batch_size: int = 64
    recompile_every: int = 11
    train_chips: int = 8
    chip_offset: int = TRAINING_CHIP_OFFSET
    exact_weight: float = 0.0
    seed: int = 0


def device_logits(model: DEQ, placed: PlacedDEQ, x: torch.Tensor, *, generator: keys.Seed,
                  samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [B, C] of the batch run on `placed`, with the exact map's implicit gradient at the
    device's fixed point; and the device iterations [B]."""
    run = placed.run(x, generator=generator, samples=samples)
    u = model.injection(x)
    attached = Implicit().attach(lambda z: model.step(z, u), run.z, run.z)
    z = run.z + (attached - attached.detach())  # the device's value, the exact map's gradient
    return model.readout(z), run.solve.iterations


def fine_tune_on_device(model: DEQ, recipe: DigitsHWRecipe, *, progress: bool = True) -> list[dict[str, Any]]:
    """Stage 2 of the module docstring, in place; returns the per-epoch history."""
    data = digits.load_split(model.weight.dtype)
    gen = torch.Generator().manual_seed(recipe.seed + 1)  # the batch order; keys below name every draw
    root = keys.as_key(recipe.seed).fold(0x4857)  # "HW"
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.base.weight_decay)
    n = len(data.y_train)
    history: list[dict[str, Any]] = []
    step, placed = 0, None
    epochs = bar(range(recipe.epochs), desc="digits-deq48-hw epochs (on the device)", enabled=progress)
    for epoch in epochs:
        model.train()
        total, correct, iterations = 0.0, 0, 0.0
        for idx in torch.randperm(n, generator=gen).split(recipe.batch_size):
            if step % recipe.recompile_every == 0:
                load = step // recipe.recompile_every
                chip = recipe.chip_offset + load % recipe.train_chips
                profile = resolve_profile(recipe.device, chip)
                placed = PlacedDEQ(model, profile, compile_deq(model, profile, fit_inputs=data.x_train),
                                   generator=root.fold(1, load))
            logits, its = device_logits(model, placed, data.x_train[idx], generator=root.fold(2, step), samples=idx)
            loss = F.cross_entropy(logits, data.y_train[idx])
            if recipe.exact_weight:
                exact = model(data.x_train[idx], solver="anderson", atol=1e-9, rtol=0.0, max_iter=100).logits
                loss = loss + recipe.exact_weight * F.cross_entropy(exact, data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            project_contraction(model, recipe.base.lipschitz_cap)
            step += 1
            total += loss.item() * len(idx)
            correct += int((logits.argmax(1) == data.y_train[idx]).sum())
            iterations += float(its.double().sum())
        history.append({"epoch": epoch + 1, "device_train_loss": round(total / n, 5),
                        "device_train_accuracy": round(correct / n, 5),
                        "device_iterations_mean": round(iterations / n, 2)})
        epochs.set_postfix(loss=f"{total / n:.4f}", acc=f"{correct / n:.4f}")
    model.eval()
    return history


def train_digits_deq_hw(recipe: DigitsHWRecipe, *, progress: bool = True) -> tuple[DEQ, dict[str, Any]]:
    """Train the plain model, fine-tune it through the device; returns the model and its card."""
    start = time.perf_counter()
    base = replace(recipe.base, seed=recipe.seed)
    model, card = train_digits_deq(base, progress=progress)
    plain_test = card["metrics"]["test"]
    history = fine_tune_on_device(model, replace(recipe, base=base), progress=progress)
    from aocsim.experiments.evaluate import evaluate_deq

    data = digits.load_split(model.weight.dtype)
    solve_opts = {"solver": base.solver, "atol": base.atol, "rtol": 0.0, "max_iter": base.max_iter}
    card["name"] = "digits-deq48-hw"
    card["description"] = ("digits-deq48 fine-tuned through the noisy aoc48 device model (physics-aware "
                           "training: forward on the device, implicit gradient of the exact map at the "
                           "device's fixed point); exact path (float64).")
    card["training"] = {**card["training"], "hardware_aware": {
        **{k: v for k, v in asdict(recipe).items() if k not in ("base", "seed")},
        "method": "forward on the device (compiled per load, noise on), backward: implicit gradient of the "
                  "exact map at the device's fixed point (quantisation and noise straight-through)",
        "history": history}}
    card["metrics"] = {
        "train": evaluate_deq(model, data.x_train, data.y_train, **solve_opts),
        "test": evaluate_deq(model, data.x_test, data.y_test, **solve_opts),
        "plain_test": plain_test,
        "lipschitz_bound": model.contraction_bound(),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    return model, card


def run_recipe(out_dir: Path, *, overwrite: bool = False, progress: bool = True, **overrides: Any) -> Path:
    """Train with the default recipe (plus overrides: any DigitsHWRecipe field) and write the model."""
    try:
        recipe = DigitsHWRecipe(**overrides)
    except TypeError as exc:
        raise InputError(f"recipe 'digits-deq48-hw' does not take option(s) {sorted(overrides)}: {exc}") from None
    model, card = train_digits_deq_hw(recipe, progress=progress)
    return save_model(model, out_dir, card, overwrite=overwrite)
