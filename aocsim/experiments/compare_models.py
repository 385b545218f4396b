"""Bundled models by name on a device, each on its default workload: what `aocsim compare` runs.

The CLI parses and prints; this module loads the models, checks that each has a task compare runs,
gives each the placement options that apply to its kind (an option no model takes is a one-line
error, one that some take is a note for the others), builds the workloads
(aocsim/experiments/workloads.py) and runs every compare on the same workers (`compare_all`).
"""

from __future__ import annotations

from typing import Any, Callable

from aocsim.errors import InputError

TASKS = ("digits", "regression", "state_tracking", "language")  # the tasks with a bundled workload
SEQUENCE_TASKS = ("state_tracking", "language")


def load_models(names: tuple[str, ...]) -> dict[str, Any]:
    """Every model loaded and checked before any work, by its card's name."""
    from aocsim.io.model_files import load_model

    loaded: dict[str, Any] = {}
    for name in names:
        model = load_model(name)
        if model.card.get("task") not in TASKS:
            raise InputError(f"model {name!r} has task {model.card.get('task')!r}; compare runs digits DEQs, twin "
                             "regressions, state-tracking implicit SSMs and language models")
        if model.card["name"] in loaded:
            raise InputError(f"model {name!r}: name {model.card['name']!r} given twice; expected distinct models "
                             "(one NetCDF group each)")
        loaded[model.card["name"]] = model
    return loaded


def placements(loaded: dict[str, Any], profile: Any, given: Any, *, workload_options: bool = False,
               note: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Each model's placement: the options `given` that apply to its kind. An option that applies to no
    model is a one-line InputError (its flag named); one that applies to some is a `note` for the others."""
    from aocsim.execute.placement import DECLARATIONS, Placement, kinds_words
    from aocsim.execute.registry import placement_class

    kinds = {name: placement_class(model, profile, given).kind for name, model in loaded.items()}
    for option in given.given():
        takers = [n for n, k in kinds.items() if k in DECLARATIONS[option].kinds]
        flag = "--" + option.replace("_", "-")
        if not takers:
            raise InputError(f"{flag} applies to {kinds_words(DECLARATIONS[option].kinds)}; "
                             + "; ".join(f"{n} runs as a {k} on {profile.name}" for n, k in kinds.items()))
        others = [n for n in kinds if n not in takers]
        if others:
            note(f"{flag} does not apply to {', '.join(others)} ({', '.join(kinds[n] for n in others)})")
    if workload_options and not any(m.card["task"] in SEQUENCE_TASKS for m in loaded.values()):
        raise InputError("--sequences and --length-factor apply to sequence models; "
                         f"{', '.join(loaded)} {'is a DEQ' if len(loaded) == 1 else 'are DEQs'}")
    return {name: Placement(**{k: v for k, v in given.given().items() if kinds[name] in DECLARATIONS[k].kinds})
            for name in loaded}


def compare_models(names: tuple[str, ...], profile: Any, given: Any, *, seeds: int, chips: int,
                   sequences: int | None = None, length_factor: int | None = None, workers: Any = 1,
                   note: Callable[[str], None] = lambda line: None, progress: bool = True) -> dict[str, Any]:
    """Every named model's compare on `profile` (chips 0..chips-1, seeds 0..seeds-1) on its default
    workload (`sequences` and `length_factor`: the workloads' defaults where None), the placement
    options `given` shared out by kind, their runs on the same `workers`: model name -> Dataset."""
    from aocsim.experiments.compare import compare_all
    from aocsim.experiments.workloads import default_workload

    loaded = load_models(names)
    placed = placements(loaded, profile, given, note=note,
                        workload_options=sequences is not None or length_factor is not None)
    jobs = []
    for name, model in loaded.items():
        w = default_workload(model, sequences=sequences, length_factor=length_factor)
        jobs.append(dict(model=model, device=profile, inputs=w.inputs, targets=w.targets, placement=placed[name],
                         seeds=tuple(range(seeds)), chips=tuple(range(chips)), calibration=w.calibration))
    # one process per core (the solves are many small operations), the models' runs on them at once
    return dict(zip(loaded, compare_all(jobs, workers=workers, progress=progress)))
