"""Each bundled model's default workload: what `aocsim compare`, the sweeps and the tests run it on.

One function (`default_workload`) builds it from the model card's task:

- digits DEQs: the test images and labels (the first `samples`, default all 450), calibrated on
  the training images (the fit inputs of a native DEQ, the tile values of a tiled one; no labels);
- twin regressions (`regression-twin48`): the test points and the function's values there (`samples`
  of them spread evenly over the sorted points, default all 1,000), calibrated on the training grid (no labels: a twin DEQ's `probes`
  are drawn from it);
- state-tracking implicit SSMs: `sequences` fresh word problems of `length_factor` times the
  training length, every element equally likely (generator `SEQUENCE_GENERATOR`), calibrated on 16
  sequences of the training length with identity tokens at probability 0.5 (generator
  `CALIBRATION_GENERATOR`);
- character-level language models: the first `sequences` consecutive windows of `length_factor`
  times the training length of the held-out text (encoded with the card's vocabulary; the target
  of a position is the next character), calibrated on 16 random windows of the training text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aocsim.errors import InputError

if TYPE_CHECKING:  # imported where a workload is built: the CLI reads the defaults below at start
    import torch

SEQUENCE_GENERATOR = 2024  # the sequences a sequence model is compared on
# A sequence model's workload where none is asked for: `compare`, the sweeps and the CLI read these.
SEQUENCES, LENGTH_FACTOR = 32, 4
CALIBRATION_GENERATOR = 99  # the sequences its tiles are calibrated on
CALIBRATION_SEQUENCES = 16


@dataclass(frozen=True)
class Workload:
    """inputs and targets to run (targets None when there are none), and the calibration inputs of
    the placement (`aocsim.execute.place(calibration=...)`)."""

    inputs: torch.Tensor
    targets: torch.Tensor | None
    calibration: torch.Tensor


def _task(model: Any) -> str | None:
    return (getattr(model, "card", None) or {}).get("task")


def default_calibration(model: Any) -> torch.Tensor | None:
    """The calibration inputs of a bundled model's task (module docstring); None for a model without
    a known task (an in-memory model: pass calibration inputs yourself)."""
    task = _task(model)
    if task == "digits":
        from aocsim.tasks.digits import load_split

        return load_split(model.weight.dtype).x_train
    if task == "regression":
        return _regression_split(model).x_train
    if task == "state_tracking":
        from aocsim.tasks.groups import group, word_problems

        data = model.card["data"]
        tokens, _ = word_problems(group(data["group"]), CALIBRATION_SEQUENCES, data["train_length"],
                                  identity_prob=0.5, generator=CALIBRATION_GENERATOR)
        return tokens
    if task == "language":
        import numpy as np

        from aocsim.tasks.corpus import pydoc_corpus
        from aocsim.train.language import card_recipe

        rng = np.random.default_rng(CALIBRATION_GENERATOR)
        return pydoc_corpus().sample(rng, CALIBRATION_SEQUENCES, card_recipe(model).train_length)[0]
    return None


def _regression_split(model: Any) -> Any:
    """A twin regression's split, as its card records it (`aocsim.tasks.functions`)."""
    from aocsim.tasks.functions import load_split

    data = model.card["data"]
    return load_split(data["function"], n_train=data["n_train"], n_test=data["n_test"], dtype=model.weight.dtype)


def default_workload(model: Any, *, samples: int | None = None, sequences: int | None = None,
                     length_factor: int | None = None) -> Workload:
    """A bundled model's workload (module docstring): `samples` test images for a digits DEQ, or
    `sequences` fresh sequences of `length_factor` x the training length for a sequence model."""
    task = _task(model)
    name = (getattr(model, "card", None) or {}).get("name", type(model).__name__)
    sequences = SEQUENCES if sequences is None else sequences
    length_factor = LENGTH_FACTOR if length_factor is None else length_factor
    if task == "digits":
        from aocsim.tasks.digits import load_split

        split = load_split(model.weight.dtype)
        n = split.x_test.shape[0] if samples is None else samples
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= split.x_test.shape[0]:
            raise InputError(f"samples = {samples!r}: model {name!r} has {split.x_test.shape[0]} test images; "
                             f"expected an integer in [1, {split.x_test.shape[0]}]")
        return Workload(split.x_test[:n], split.y_test[:n], default_calibration(model))
    if task == "regression":
        split = _regression_split(model)
        n = split.x_test.shape[0] if samples is None else samples
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= split.x_test.shape[0]:
            raise InputError(f"samples = {samples!r}: model {name!r} has {split.x_test.shape[0]} test points; "
                             f"expected an integer in [1, {split.x_test.shape[0]}]")
        import torch

        spread = torch.linspace(0, split.x_test.shape[0] - 1, n, dtype=torch.float64).round().long()  # x is sorted
        return Workload(split.x_test[spread], split.y_test[spread, 0], split.x_train)
    if task == "state_tracking":
        from aocsim.tasks.groups import group, word_problems

        g = group(model.card["data"]["group"])
        tokens, targets = word_problems(g, sequences, length_factor * model.card["data"]["train_length"],
                                        identity_prob=1 / g.order, generator=SEQUENCE_GENERATOR)
        return Workload(tokens, targets, default_calibration(model))
    if task == "language":
        from aocsim.tasks.corpus import pydoc_corpus
        from aocsim.train.language import card_recipe, card_vocabulary

        inputs, targets = pydoc_corpus().heldout_windows(length_factor * card_recipe(model).train_length,
                                                         card_vocabulary(model))
        return Workload(inputs[:sequences], targets[:sequences], default_calibration(model))
    raise InputError(f"model {name!r} has task {task!r}; bundled workloads exist for digits DEQs, twin "
                     "regressions, state-tracking implicit SSMs and character-level language models")
