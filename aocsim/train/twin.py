"""Recipes of twin DEQs (`aocsim.nn.TwinDEQ`): models whose map is the AOC's calibrated pipeline.

`digits-twin48`: scikit-learn's 8x8 digits on aoc48-twin's 48 channels, the image injected into
channels [0, 24), the logits read from [24, 48): every answer crosses the optical loop.
`regression-twin16`: a 1-D function (`aocsim.tasks.functions`, the twin's regression example) on
aoc16-twin, x injected into channels [0, 8), y read from [8, 16); `regression-twin48` the same on
aoc48-twin ([0, 24) and [24, 48)), trained with the phantom gradient.

Training follows the twin's practice: the forward solve is plain fixed-point iteration of the
pipeline, at most 100 iterations, relative tolerance 1e-3 (`TRAIN_SOLVE`); the gradient is
implicit (an adjoint fixed point, solved the same way) or phantom (k damped steps from z*); W
lives on the SLM's 9 bits with a straight-through gradient. AdamW with cosine decay; beta, a gain
of order 10-100, takes steps relative to its size. `inject_noise` adds a static per-sample error
to the injection in training (what the device's offsets and gains leave at the loop's input), a
regulariser. The card's metrics are the exact path's: the same pipeline iterated to a relative
residual of 1e-10 (`EXACT_SOLVE`), and with the loop cut (`twin_ablations`).
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
from aocsim.io.model_files import save_model, software_versions
from aocsim.nn.twin_deq import EXACT_SOLVE, TRAIN_SOLVE, TwinDEQ, TwinDEQConfig
from aocsim.progress import bar
from aocsim.solve.backward import Implicit, Phantom
from aocsim.train.evaluation import evaluate_deq, evaluate_regression, twin_ablations

log = logging.getLogger(__name__)
TASKS = ("digits", "regression")


@dataclass(frozen=True)
class TwinRecipe:
    """Training settings of a twin DEQ (all recorded in the model card)."""

    name: str = "digits-twin48"
    task: str = "digits"
    function: str = "gaussian"  # regression: aocsim.tasks.functions
    n_train: int = 1000  # regression: evenly spaced training points
    n_test: int = 1000  # regression: uniform random test points
    profile: str = "aoc48-twin"
    state_size: int = 48
    split: int = 24
    slm_bits: int | None = 9
    alpha: float = 0.5
    train_alpha: bool = False
    beta_init: float = 18.6
    bias_init: float = 0.0  # b's initial bound (uniform) on the input channels (drawn also when 0: same stream)
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-2
    weight_decay: float = 1e-4  # on U and V only: the loop sees W / max|W|, beta is a gain
    inject_noise: float = 0.0  # per sample a static error on u, std inject_noise x max|u| of the batch (volts)
    backward: str = "implicit"  # or "phantom": Phantom(phantom_steps, phantom_damping)
    phantom_steps: int = 5
    phantom_damping: float = 0.8
    rtol: float = TRAIN_SOLVE["rtol"]
    max_iter: int = TRAIN_SOLVE["max_iter"]
    seed: int = 0

    def __post_init__(self) -> None:
        if self.task not in TASKS or self.backward not in ("implicit", "phantom"):
            raise InputError(f"recipe {self.name!r}: task = {self.task!r}, backward = {self.backward!r}; expected "
                             f"a task in {TASKS} and backward 'implicit' or 'phantom'")
        if not 0 <= self.inject_noise < 1:
            raise InputError(f"recipe {self.name!r}: inject_noise = {self.inject_noise!r}; expected a number in [0, 1)")


def load_data(recipe: TwinRecipe) -> tuple[Any, dict[str, Any]]:
    """The task's split and its description for the card."""
    if recipe.task == "digits":
        from aocsim.tasks import digits

        data = digits.load_split()
        return data, {"task": "digits", "n_train": len(data.y_train), "n_test": len(data.y_test),
                      "split": f"stratified, test fraction {digits.TEST_FRACTION}, seed {digits.SPLIT_SEED} "
                               "(aocsim.tasks.digits)",
                      "split_fingerprint": digits.split_fingerprint(), "features": "pixel / 16"}
    from aocsim.tasks import functions

    data = functions.load_split(recipe.function, n_train=recipe.n_train, n_test=recipe.n_test)
    return data, {"task": "regression", "function": recipe.function, "n_train": recipe.n_train,
                  "n_test": recipe.n_test, "train_points": "evenly spaced on [-1, 1]",
                  "test_points": f"uniform on [-1, 1], numpy default_rng({functions.TEST_SEED}), sorted",
                  "source": "aocsim.tasks.functions (the twin's regression functions)"}


def _optimizer(model: TwinDEQ, recipe: TwinRecipe) -> torch.optim.Optimizer:
    """AdamW: U, V, b, c with weight decay; W, alpha without (the loop sees W / max|W|); beta, a gain of
    order 10, with lr x beta_init (Adam's steps are about lr in size: relative steps, as W's)."""
    params = dict(model.named_parameters())
    loop = [params["weight"]] + ([params["alpha"]] if params["alpha"].requires_grad else [])
    maps = [p for n, p in params.items() if n not in ("weight", "alpha", "beta")]
    return torch.optim.AdamW([{"params": loop, "weight_decay": 0.0},
                              {"params": [params["beta"]], "weight_decay": 0.0, "lr": recipe.lr * recipe.beta_init},
                              {"params": maps, "weight_decay": recipe.weight_decay}], lr=recipe.lr)


def loss_of(recipe: TwinRecipe, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, target) if recipe.task == "digits" else F.mse_loss(out, target)


def metrics_of(model: TwinDEQ, recipe: TwinRecipe, data: Any) -> dict[str, Any]:
    """The exact path's metrics on the training and test sets, and with the loop cut (test set)."""
    evaluate = evaluate_deq if recipe.task == "digits" else evaluate_regression
    out: dict[str, Any] = {"train": evaluate(model, data.x_train, data.y_train, **EXACT_SOLVE),
                           "test": evaluate(model, data.x_test, data.y_test, **EXACT_SOLVE)}
    cut = twin_ablations(model, data.x_test)
    for key, logits in cut.items():
        if recipe.task == "digits":
            out["test"][f"accuracy_{key}"] = float((logits.argmax(1) == data.y_test).double().mean())
        else:
            out["test"][f"mse_{key}"] = float(((logits - data.y_test) ** 2).mean())
    out["beta"], out["alpha"] = float(model.beta.detach()), float(model.alpha.detach())
    out["lipschitz_bound"] = model.contraction_bound()
    return out


def train_twin(recipe: TwinRecipe, *, progress: bool = True) -> tuple[TwinDEQ, dict[str, Any]]:
    """Train a twin DEQ by `recipe`; returns the model and its model card."""
    gen = torch.Generator().manual_seed(recipe.seed)
    data, data_card = load_data(recipe)
    n_out = 10 if recipe.task == "digits" else 1
    config = TwinDEQConfig(recipe.state_size, data.x_train.shape[1], n_out, split=recipe.split,
                           profile=recipe.profile, slm_bits=recipe.slm_bits, alpha=recipe.alpha,
                           train_alpha=recipe.train_alpha)
    model = TwinDEQ(config, beta=recipe.beta_init, generator=gen)
    with torch.no_grad():
        draw = torch.rand(model.inject_bias.shape, generator=gen, dtype=model.inject_bias.dtype)
        model.inject_bias.copy_((2 * draw - 1) * recipe.bias_init * model.inject_mask[:, 0])
    opt = _optimizer(model, recipe)
    n = len(data.y_train)
    steps = recipe.epochs * math.ceil(n / recipe.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    solve = {**TRAIN_SOLVE, "rtol": recipe.rtol, "max_iter": recipe.max_iter}
    backward = (Implicit(solver="picard", atol=0.0, rtol=recipe.rtol, max_iter=recipe.max_iter)
                if recipe.backward == "implicit" else Phantom(recipe.phantom_steps, recipe.phantom_damping))
    history = []
    start = time.perf_counter()
    epochs = bar(range(recipe.epochs), desc=f"{recipe.name} epochs", enabled=progress)
    for epoch in epochs:
        model.train()
        total, open_batches = 0.0, 0
        for idx in torch.randperm(n, generator=gen).split(recipe.batch_size):
            u = model.injection(data.x_train[idx])
            if recipe.inject_noise > 0:  # the device's static errors at the loop's input, as a regulariser
                scale = recipe.inject_noise * u.detach().abs().max()
                u = u + scale * torch.randn(u.shape, generator=gen, dtype=u.dtype)
            z, result = model.fixed_point(u, backward=backward, **solve)
            loss = loss_of(recipe, model.readout(z), data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            with torch.no_grad():  # the leak stays a leak
                model.alpha.clamp_(0.0, 0.99)
            total += loss.item() * len(idx)
            open_batches += int(not bool(result.all_converged))
        history.append({"epoch": epoch + 1, "train_loss": round(total / n, 6), "batches_not_converged": open_batches})
        log.info("epoch %d loss %.5f (%d batches not converged)", epoch + 1, total / n, open_batches)
        epochs.set_postfix(loss=f"{total / n:.4f}")
    model.eval()
    seconds = round(time.perf_counter() - start, 1)
    metrics = {**metrics_of(model, recipe, data), "train_seconds": seconds}
    what = "classifier for scikit-learn's 8x8 digits" if recipe.task == "digits" else \
        f"regression of the {recipe.function} function on [-1, 1]"
    card = {
        "name": recipe.name,
        "kind": "twin_deq",
        "task": recipe.task,
        "description": f"Twin DEQ {what}: z* = alpha z* + y_opt(z*) + clip(U x + b), y = V z* + c, y_opt the "
                       f"calibrated optical path of {recipe.profile} (noise-free) with W on a "
                       f"{recipe.slm_bits}-bit SLM; input into channels [0, {recipe.split}), readout from "
                       f"[{recipe.split}, {recipe.state_size}); exact path: the pipeline in float64, plain "
                       "iteration to a relative residual of 1e-10.",
        "config": config.to_dict(),
        "training": {**asdict(recipe), "forward": solve, "optimizer": "AdamW + cosine decay",
                     "loss": "cross-entropy" if recipe.task == "digits" else "mean squared error",
                     "history": history},
        "data": data_card,
        "metrics": metrics,
        "seed": recipe.seed,
        "software": software_versions(),
    }
    return model, card


def run_recipe(out_dir: Path, *, overwrite: bool = False, progress: bool = True, **overrides: Any) -> Path:
    """Train with the default recipe (plus overrides) and write the model directory."""
    model, card = train_twin(TwinRecipe(**overrides), progress=progress)
    return save_model(model, out_dir, card, overwrite=overwrite)


# The bundled recipes (aocsim/train/recipes.py): settings that differ from TwinRecipe's defaults.
DIGITS48: dict[str, Any] = {"name": "digits-twin48", "task": "digits", "backward": "phantom", "epochs": 60,
                            "inject_noise": 0.02, "seed": 1}
REGRESSION16: dict[str, Any] = {"name": "regression-twin16", "task": "regression", "function": "gaussian",
                                "profile": "aoc16-twin", "state_size": 16, "split": 8, "batch_size": 32,
                                "epochs": 50}
# The 48-channel machine with the phantom gradient: the implicit one leaves some test points unconverged there.
REGRESSION48: dict[str, Any] = {**REGRESSION16, "name": "regression-twin48", "profile": "aoc48-twin", "state_size": 48,
                                "split": 24, "backward": "phantom"}
