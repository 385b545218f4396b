"""Recipe `digits-deq48`: a 48-variable DEQ classifier for the 8x8 digits.

Forward: Anderson to a tight tolerance; backward: implicit differentiation;
AdamW with cosine decay. After every optimiser step the loop operator is
rescaled so that |alpha| + ||beta W||_2 <= `lipschitz_cap` < 1: the map stays a
contraction, so the fixed point is unique and the physical loop (plain damped
iteration, no Anderson) converges to it too.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from aocsim.errors import InputError
from aocsim.train.evaluation import evaluate_deq
from aocsim.io.model_files import save_model, software_versions
from aocsim.nn.deq import DEQ, DEQConfig
from aocsim.progress import bar
from aocsim.solve.backward import Implicit
from aocsim.tasks import digits
from aocsim.train.hardware_aware import deq_logits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DigitsDEQRecipe:
    """Training settings (all recorded in the model card)."""

    state_size: int = 48
    split: int = 0
    alpha: float = 0.5
    beta_init: float = 1.0
    lipschitz_cap: float = 0.95
    epochs: int = 40
    batch_size: int = 64
    lr: float = 1e-2
    weight_decay: float = 1e-4
    seed: int = 0
    solver: str = "anderson"
    atol: float = 1e-9
    max_iter: int = 100
    # Hardware-aware training (aocsim/train/hardware_aware.py, `deq_logits`): SLM bits of beta W
    # (None: full precision) and the static error on the loop's input, relative to max |U x + b|.
    hw_weight_bits: int | None = None
    hw_noise: float = 0.0
    name: str = "digits-deq48"


def project_contraction(model: DEQ, cap: float) -> None:
    """Rescale W so that |alpha| + ||beta W||_2 <= cap (keeps the map contractive)."""
    with torch.no_grad():
        budget = cap - abs(model.config.alpha)
        norm = float(torch.linalg.matrix_norm(model.operator(), ord=2))
        if norm > budget:
            model.weight.mul_(budget / norm)


def train_digits_deq(recipe: DigitsDEQRecipe, *, progress: bool = True) -> tuple[DEQ, dict[str, Any]]:
    """Train the digits DEQ; returns the model and its model card."""
    gen = torch.Generator().manual_seed(recipe.seed)
    data = digits.load_split()
    config = DEQConfig(recipe.state_size, digits.N_FEATURES, digits.N_CLASSES, alpha=recipe.alpha,
                       split=recipe.split)
    model = DEQ(config, beta=recipe.beta_init, generator=gen)
    project_contraction(model, recipe.lipschitz_cap)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    n = len(data.y_train)
    steps = recipe.epochs * math.ceil(n / recipe.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    solve_opts = {"solver": recipe.solver, "atol": recipe.atol, "rtol": 0.0, "max_iter": recipe.max_iter}
    history = []
    hardware_aware = recipe.hw_weight_bits is not None or recipe.hw_noise > 0
    noise_gen = torch.Generator().manual_seed(recipe.seed + 2)  # drawn from only when hardware_aware
    start = time.perf_counter()
    epochs = bar(range(recipe.epochs), desc=f"{recipe.name} epochs", enabled=progress)
    for epoch in epochs:
        model.train()
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for idx in order.split(recipe.batch_size):
            if hardware_aware:
                logits = deq_logits(model, data.x_train[idx], weight_bits=recipe.hw_weight_bits,
                                    noise=recipe.hw_noise, generator=noise_gen, **solve_opts)
            else:
                logits = model(data.x_train[idx], backward=Implicit(), **solve_opts).logits
            loss = F.cross_entropy(logits, data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            project_contraction(model, recipe.lipschitz_cap)
            total += loss.item() * len(idx)
        history.append({"epoch": epoch + 1, "train_loss": round(total / n, 5)})
        log.info("epoch %d loss %.4f", epoch + 1, total / n)
        epochs.set_postfix(loss=f"{total / n:.4f}")
    model.eval()
    metrics = {
        "train": evaluate_deq(model, data.x_train, data.y_train, **solve_opts),
        "test": evaluate_deq(model, data.x_test, data.y_test, **solve_opts),
        "lipschitz_bound": model.contraction_bound(),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    card = {
        "name": recipe.name,
        "kind": "deq",
        "task": "digits",
        "description": "DEQ classifier z* = alpha z* + beta W tanh(z*) + U x + b, logits = V z* + c, "
                       "for scikit-learn's 8x8 digits; exact path (float64).",
        "config": config.to_dict(),
        "training": {**asdict(recipe), "backward": "implicit", "optimizer": "AdamW + cosine decay",
                     "loss": "cross-entropy", "history": history},
        "data": {"task": "digits", "n_train": n, "n_test": len(data.y_test),
                 "split": f"stratified, test fraction {digits.TEST_FRACTION}, seed {digits.SPLIT_SEED} "
                          "(aocsim.tasks.digits)",
                 "split_fingerprint": digits.split_fingerprint(), "features": "pixel / 16"},
        "metrics": metrics,
        "seed": recipe.seed,
        "software": software_versions(),
    }
    return model, card


def run_recipe(out_dir: Path, *, overwrite: bool = False, progress: bool = True, **overrides: Any) -> Path:
    """Train with the default recipe (plus overrides) and write the model directory."""
    recipe = DigitsDEQRecipe(**overrides)
    if recipe.hw_weight_bits is not None and not 2 <= recipe.hw_weight_bits <= 24 or not 0 <= recipe.hw_noise < 1:
        raise InputError(f"recipe {recipe.name!r}: hw_weight_bits = {recipe.hw_weight_bits!r}, hw_noise = "
                         f"{recipe.hw_noise!r}; expected bits in [2, 24] or None and noise in [0, 1)")
    model, card = train_digits_deq(recipe, progress=progress)
    return save_model(model, out_dir, card, overwrite=overwrite)
