"""Evaluate a trained model on its task on the exact path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aocsim.errors import InputError, ModelFileError
from aocsim.nn.deq import DEQ
from aocsim.nn.twin_deq import EXACT_SOLVE, TwinDEQ
from aocsim.train.evaluation import evaluate_deq, evaluate_lengths, evaluate_regression, twin_ablations

# Forward-solve tolerance per dtype. float32 carries about 7 digits: 1e-9 sits at its
# rounding floor, where Anderson's differences vanish (its least-squares system turns
# singular) and some samples never reach the tolerance; 1e-5 is well above that floor.
DEFAULT_ATOL = {torch.float64: 1e-9, torch.float32: 1e-5}


def feedforward_state(model: DEQ, x: torch.Tensor) -> torch.Tensor:
    """The fixed point with the loop's feedback removed (W = 0): z* = (U x + b) / (1 - alpha)."""
    with torch.no_grad():
        return model.injection(x) / (1.0 - model.config.alpha)


def accuracy_without_feedback(model: DEQ, x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy of the feedforward network left when W = 0 (`feedforward_state`). Beside the accuracy
    it says how much the fixed point (the machine's loop) matters."""
    with torch.no_grad():
        return float((model.readout(feedforward_state(model, x)).argmax(1).cpu() == y.cpu()).double().mean())


def evaluate_model(model: nn.Module, *, dtype: torch.dtype = torch.float64,
                   **solve_options: Any) -> dict[str, Any]:
    """Evaluate a loaded model (see `aocsim.load_model`) on the test set of its task.

    Args:
        model: a model with a `card` whose `task` aocsim knows.
        dtype: float64 (exact reference) or float32.
        **solve_options: `aocsim.solve` settings for the forward solve.
    """
    task = getattr(model, "card", {}).get("task")
    if isinstance(model, TwinDEQ) and task in ("digits", "regression"):
        return evaluate_twin(model, dtype=dtype, **solve_options)
    if task == "digits":
        from aocsim.tasks import digits

        if dtype not in DEFAULT_ATOL:
            raise InputError(f"dtype = {dtype!r}; expected torch.float64 or torch.float32")
        data = digits.load_split(dtype)
        model = model.to(dtype)
        opts = {"atol": DEFAULT_ATOL[dtype], "rtol": 0.0, "max_iter": 100, **solve_options}
        metrics = evaluate_deq(model, data.x_test, data.y_test, **opts)
        return {"task": task, "split": "test", "n": len(data.y_test), "dtype": str(dtype), "atol": opts["atol"],
                **metrics, "accuracy_without_feedback": accuracy_without_feedback(model, data.x_test, data.y_test),
                "feedback_max": float(model.operator().detach().abs().max())}
    if task == "state_tracking":
        if solve_options:
            raise ModelFileError(f"solve options {sorted(solve_options)} apply to DEQ models; state-tracking "
                                 "models evaluate with the settings in their card")
        return evaluate_state_tracking(model)
    if task == "language":
        if solve_options:
            raise ModelFileError(f"solve options {sorted(solve_options)} apply to DEQ models; language "
                                 "models evaluate with the settings in their card")
        from aocsim.experiments.language import evaluate_language

        return evaluate_language(model)
    raise ModelFileError(f"model card task = {task!r}; evaluate knows: ['digits', 'language', 'regression' (twin "
                         "DEQs), 'state_tracking']")


def evaluate_twin(model: TwinDEQ, *, dtype: torch.dtype = torch.float64, **solve_options: Any) -> dict[str, Any]:
    """A twin DEQ on its task's test set: the exact path (its nominal pipeline iterated to a relative
    residual of 1e-10 in float64, 1e-5 in float32), and the same with the loop cut (`twin_ablations`):
    beta = 0 ("without_feedback": the readout channels see no input) and W = 0 ("zero_weight")."""
    if dtype not in DEFAULT_ATOL:
        raise InputError(f"dtype = {dtype!r}; expected torch.float64 or torch.float32")
    card = model.card
    if card["task"] == "digits":
        from aocsim.tasks import digits

        data = digits.load_split(dtype)
    else:
        from aocsim.tasks import functions

        meta = card.get("data", {})
        data = functions.load_split(meta.get("function", "gaussian"), n_train=meta.get("n_train", 1000),
                                    n_test=meta.get("n_test", 1000), dtype=dtype)
    model = model.to(dtype)
    opts = {**EXACT_SOLVE, **({"rtol": 1e-5, "atol": 1e-7} if dtype == torch.float32 else {}), **solve_options}
    x, y = data.x_test, data.y_test
    cut = twin_ablations(model, x, **opts)
    out: dict[str, Any] = {"task": card["task"], "split": "test", "n": len(y), "dtype": str(dtype),
                           "atol": opts["atol"], "rtol": opts["rtol"], "profile": model.config.profile,
                           "slm_bits": model.config.slm_bits, "beta": float(model.beta.detach())}
    if card["task"] == "digits":
        out.update(evaluate_deq(model, x, y, **opts))
        for key, logits in cut.items():
            out[f"accuracy_{key}"] = float((logits.argmax(1).cpu() == y.cpu()).double().mean())
    else:
        out.update(evaluate_regression(model, x, y, **opts))
        for key, pred in cut.items():
            out[f"mse_{key}"] = float(((pred.cpu() - y.cpu()) ** 2).mean())
    return out


def state_tracking_recipe(model: nn.Module, group_name: str | None = None):
    """The training recipe recorded in a state-tracking model's card (optionally on another group)."""
    from dataclasses import fields

    from aocsim.tasks.groups import group
    from aocsim.train.state_tracking import StateTrackingRecipe

    card = model.card
    settings = {f.name: card["training"][f.name] for f in fields(StateTrackingRecipe) if f.name in card["training"]}
    if group_name is not None:
        g = group(group_name)
        if g.order != model.config.vocab_size:
            raise ModelFileError(f"model card is for task {card['data']['group']!r} (vocabulary "
                                 f"{model.config.vocab_size}); task {g.name!r} has {g.order} elements")
        settings["task"] = group_name
    return StateTrackingRecipe(**settings)


def evaluate_state_tracking(model: nn.Module, *, task: str | None = None, factors: tuple[int, ...] | None = None,
                            batch: int = 256, uniform: bool = False, identity_prob: float | None = None,
                            progress: bool = False, workers: int = 1) -> dict[str, Any]:
    """Per-token accuracy by position at the training length and multiples of it.

    Implicit models are evaluated in simultaneous and sequential mode (the two
    ways of reaching the fixed point). An explicit model has no fixed point to
    reach: both modes compute the same function, so it is evaluated once
    (simultaneous mode). `factors` default to the card's eval_factors (1, 4, 8
    for the first models). The tokens follow the card's evaluation distribution,
    or `identity_prob`, or with `uniform` every element is equally likely.
    Models of one task and training length see the same sequences. With
    `progress`, a bar (`aocsim.progress`) advances per piece of work. `workers` > 1 splits the
    sequences among that many processes (same figures; `evaluate_lengths`).
    """
    from aocsim.tasks.groups import group

    recipe = state_tracking_recipe(model, task)
    if uniform and identity_prob is not None:
        raise InputError(f"uniform = True and identity_prob = {identity_prob!r}; expected at most one of them")
    p_id = 1 / group(recipe.task).order if uniform else recipe.eval_prob if identity_prob is None else identity_prob
    modes = ("simultaneous", "sequential") if recipe.implicit else ("simultaneous",)
    lengths = evaluate_lengths(model, recipe, factors=factors, batch=batch, identity_prob=p_id, modes=modes,
                               workers=workers, progress=progress, desc=f"{model.card['name']} solves")
    return {"task": "state_tracking", "group": recipe.task, "implicit": recipe.implicit,
            "train_length": recipe.train_length, "identity_prob": p_id, "lengths": lengths}


def compare_state_tracking(models: list[nn.Module], *, task: str | None = None,
                           factors: tuple[int, ...] | None = None, batch: int = 256,
                           uniform: bool = False, progress: bool = False, workers: int = 1) -> list[dict[str, Any]]:
    """`evaluate_state_tracking` of several models on the same sequences (those of the first model).

    The first model fixes the lengths (its card's eval_factors unless `factors`) and the token
    distribution; every other model must be for the same task and training length, so that the
    seeded generator gives it the same sequences. With `progress`, a bar per model; `workers` as in
    `evaluate_state_tracking`.
    """
    from aocsim.tasks.groups import group

    if not models:
        raise InputError("compare_state_tracking: no models given; expected at least one")
    # Check that the models fit together before the (long) evaluation of the first one.
    base = state_tracking_recipe(models[0], task)
    for model in models[1:]:
        recipe = state_tracking_recipe(model, task)
        if (group(recipe.task).name, recipe.train_length) != (group(base.task).name, base.train_length):
            raise InputError(f"model {model.card['name']!r} is for {recipe.task} at L = {recipe.train_length}; "
                             f"expected {base.task} at L = {base.train_length} to compare on the "
                             f"same sequences as {models[0].card['name']!r}")
    first = evaluate_state_tracking(models[0], task=task, factors=factors, batch=batch, uniform=uniform,
                                    progress=progress, workers=workers)
    fs = tuple(e["length"] // first["train_length"] for e in first["lengths"].values())
    results = [first]
    for model in models[1:]:
        results.append(evaluate_state_tracking(model, task=task, factors=fs, batch=batch,
                                               identity_prob=first["identity_prob"], progress=progress,
                                               workers=workers))
    return results


# `evaluate`'s options and the tasks each applies to, declared once: the plan refuses the rest (one line naming
# them), and `aocsim evaluate`'s flags are these names (--float32, --torch-device, ...).
DEQS, STATE_TRACKING, LANGUAGE = "deq", "state_tracking", "language"
OPTION_TASKS: dict[str, tuple[str, ...]] = {
    "float32": (DEQS,), "torch_device": (DEQS,), "task": (STATE_TRACKING,), "batch": (STATE_TRACKING,),
    "uniform": (STATE_TRACKING,), "factors": (STATE_TRACKING,), "compare": (STATE_TRACKING,),
    "plot": (STATE_TRACKING, LANGUAGE)}
TASK_WORDS = {DEQS: "DEQ models", STATE_TRACKING: "state-tracking models", LANGUAGE: "language models"}


def evaluation_task(model: nn.Module) -> str:
    """Which evaluation a model gets: `LANGUAGE`, `STATE_TRACKING`, or `DEQS` (classifiers, regressions, twins)."""
    task = (getattr(model, "card", None) or {}).get("task")
    return task if task in (LANGUAGE, STATE_TRACKING) else DEQS


def _is_given(name: str, value: Any) -> bool:
    if name == "torch_device":
        return value is not None and torch.device(value).type != "cpu"
    return value not in (None, False, ())


@dataclass
class EvaluationPlan:
    """What `aocsim evaluate` (or a script) asks of a model, checked before any work: the model's task,
    the models (a state-tracking comparison's too) and the options that apply to it. `run` does the work."""

    task: str
    models: list[nn.Module]
    options: dict[str, Any]

    @property
    def name(self) -> str:
        return self.models[0].card["name"]

    def run(self, *, progress: bool = False, workers: int = 1) -> Any:
        """The evaluation: `evaluate_language`'s result, a list of `evaluate_state_tracking` results (one per
        model), or `evaluate_model`'s metrics for a DEQ."""
        o = self.options
        if self.task == LANGUAGE:
            from aocsim.experiments.language import evaluate_language

            return evaluate_language(self.models[0], progress=progress, workers=workers)
        if self.task == STATE_TRACKING:
            return compare_state_tracking(self.models, task=o.get("task"), factors=o.get("factors"),
                                          batch=o.get("batch") or 256, uniform=bool(o.get("uniform")),
                                          progress=progress, workers=workers)
        return evaluate_model(self.models[0], dtype=torch.float32 if o.get("float32") else torch.float64)


def plan_evaluation(model: str | nn.Module, *, flag: Any = None, **options: Any) -> EvaluationPlan:
    """The plan for evaluating `model` (a bundled name, a model folder or a loaded model) with `options`
    (`OPTION_TASKS`); an option that does not apply to its task is a one-line InputError (`flag` turns an
    option's name into the words that name it, e.g. its command-line flag). Models to compare with are
    loaded and checked here."""
    from aocsim.io.model_files import load_model

    unknown = [n for n in options if n not in OPTION_TASKS]
    if unknown:
        raise InputError(f"{unknown[0]} is not an evaluation option; expected one of {', '.join(OPTION_TASKS)}")
    say = flag or (lambda name: name)
    device = options.get("torch_device") or "cpu"
    loaded = load_model(model, device=device) if isinstance(model, (str, Path)) else model
    task, name = evaluation_task(loaded), loaded.card["name"]
    wrong = [n for n, v in options.items() if _is_given(n, v) and task not in OPTION_TASKS[n]]
    if wrong:
        what = {LANGUAGE: "a language model, evaluated on the CPU on its card's held-out split",
                STATE_TRACKING: "a state-tracking model (evaluated on the CPU in the dtype of its weights)",
                DEQS: f"a {loaded.card.get('kind', '?')} model on task {loaded.card.get('task')!r}"}[task]
        tasks = " and ".join(TASK_WORDS[t] for t in OPTION_TASKS[wrong[0]])
        raise InputError(f"{', '.join(say(n) for n in wrong)} {'applies' if len(wrong) == 1 else 'apply'} to "
                         f"{tasks}; {name} is {what}")
    models = [loaded]
    for other in options.get("compare") or ():
        m = load_model(other)
        if evaluation_task(m) != STATE_TRACKING:
            raise InputError(f"{say('compare')} {other!r}: {m.card['name']} is a {m.card.get('kind', '?')} model on "
                             f"task {m.card.get('task')!r}; expected a state-tracking model")
        models.append(m)
    return EvaluationPlan(task, models, {k: v for k, v in options.items() if _is_given(k, v)})
