"""A co-design search: Optuna's ask/tell over a spec's `space`, its points run as a sweep's points.

The search runs in rounds of `batch` trials: a round's trials are asked, run as sweep points (on the
same local workers or Dask cluster, each written as it finishes: store.py), then told in trial
order. The study lives in the sweep folder (`search.journal`, an Optuna journal file), and the
sampler is seeded anew for every trial from the search's seed and the trial's number, so what a
trial asks depends only on the seed and the trials told before its round: a search killed at any
moment and resumed asks for the same points as an uninterrupted one, and the number of workers
changes nothing (a round is `batch` trials whatever runs them). See docs/SWEEPS.md section 6.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.sweep.axes import Axis
from aocsim.experiments.sweep.fidelity import Evaluate, full, mark, run_points, run_round
from aocsim.experiments.sweep.front import default_reference, hypervolume, pareto_mask
from aocsim.experiments.sweep.search_spec import Search
from aocsim.experiments.sweep.spec import Point, SweepSpec, point_key
from aocsim.experiments.sweep.store import SweepStore, assemble, untrusted_points

STUDY_FILE = "search.journal"
STUDY_NAME = "aocsim-search"
VIOLATION = "constraint_violation"  # a trial's user attribute: Optuna's constraint values (<= 0 feasible)



def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise InputError("a search needs Optuna; install it with pip install optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def open_study(store: SweepStore, search: Search, *, writer: bool = True) -> Any:
    """The search's study in the sweep folder, created or loaded. As the writer, first drop what a
    killed run may have left: a half-written last journal line and the journal's lock files (one
    search writes a folder at a time)."""
    optuna = _optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = store.root / STUDY_FILE
    if writer:
        _repair(path)
    elif not path.is_file():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's experimental-feature notices
        storage = JournalStorage(JournalFileBackend(str(path)))
        directions = ["maximize" if d == "max" else "minimize" for d in search.objectives.values()]
        return optuna.create_study(study_name=STUDY_NAME, storage=storage, directions=directions,
                                   load_if_exists=True)


def _repair(path: Path) -> None:
    for suffix in (".lock", ".rename"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    if path.is_file():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):  # killed mid-append: the line is incomplete, the trial re-asked
            with path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)


def sampler(search: Search, number: int) -> Any:
    """The sampler that asks trial `number`: seeded from the search's seed and the trial's number."""
    optuna = _optuna()
    seed = int(hashlib.sha256(f"{search.seed}:{number}".encode()).hexdigest()[:8], 16)
    violation = _violation  # the search's constraints and compare's verdict: an untrusted trial is infeasible
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if search.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(population_size=search.batch, seed=seed, constraints_func=violation)
        if search.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=search.batch, constraints_func=violation)
        return optuna.samplers.RandomSampler(seed=seed)


def _violation(trial: Any) -> list[float]:
    return list(trial.user_attrs[VIOLATION])


def distributions(search: Search) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for p in search.space:
        if p.kind == "int":
            out[p.path] = IntDistribution(*p.bounds)
        elif p.kind == "choice":
            out[p.path] = CategoricalDistribution(p.bounds)
        else:
            out[p.path] = FloatDistribution(*p.bounds, log=p.kind == "log")
    return out


def trial_point(spec: SweepSpec, trial: Any) -> Point:
    settings = {p.path: trial.params[p.path] for p in spec.search.space}
    return Point(spec.models[0], settings, (0, trial.number), point_key(spec, spec.models[0], settings))


def run_search(spec: SweepSpec, store: SweepStore, evaluate: Evaluate, *, progress: bool = False) -> None:
    """Ask, run and tell until `budget` trials are told; each finished point is written to `store`."""
    from aocsim.progress import bar

    study = open_study(store, spec.search)
    left = spec.search.budget - sum(not _running(t) for t in study.get_trials(deepcopy=False))
    for _ in bar(_rounds(spec, store, study, evaluate), desc="search points", total=max(left, 0), enabled=progress):
        pass


def _running(trial: Any) -> bool:
    return trial.state.name == "RUNNING"


def _rounds(spec: SweepSpec, store: SweepStore, study: Any, evaluate: Evaluate) -> Iterator[int]:
    """Yields each trial's number as it is told."""
    optuna = _optuna()
    search, space = spec.search, distributions(spec.search)
    while True:
        trials = study.get_trials(deepcopy=False)
        waiting = [t.number for t in trials if t.state.name == "WAITING"]
        if waiting:  # a start trial enqueued before a kill: ask it now (asking takes it as enqueued)
            study.sampler = sampler(search, waiting[0])
            study.ask(space)
            continue
        running = [t.number for t in trials if _running(t)]
        if not running and len(trials) >= search.budget:
            return
        # the round of the first trial not told (asked before a kill, or the next to ask)
        start = (min(running) if running else len(trials)) // search.batch * search.batch
        end = min(start + search.batch, search.budget)
        for number in range(len(trials), end):  # ask the round's trials not asked before a kill
            study.sampler = sampler(search, number)
            if number < len(search.start):  # a start trial: enqueued, it is the next asked, as given
                study.enqueue_trial(search.start[number])
            study.ask(space)
        trials = study.get_trials(deepcopy=False)[start:end]
        batch = [t for t in trials if _running(t)]
        if search.fidelity is None:
            run_points([trial_point(spec, t) for t in batch], store, evaluate)
            files = {t.number: (trial_point(spec, t).key, []) for t in batch}
        else:  # the whole round screened, told or not: a resumed round promotes what the first run did
            told = run_round([trial_point(spec, t) for t in trials], store, evaluate, search,
                             lambda key: scores(store.read_point(key), search, violations=True))
            files = {t.number: file for t, file in zip(trials, told)}
        for t in batch:
            key, promoted = files[t.number]
            (values,), (violation,) = scores(store.read_point(key), search, violations=True)
            handle = optuna.trial.Trial(study, t._trial_id)
            handle.set_user_attr("point_key", key)
            handle.set_user_attr(VIOLATION, [*violation.tolist(), *promoted])
            study.sampler = sampler(search, t.number)  # tell's after_trial uses the sampler of the trial
            study.tell(t.number, values.tolist())
            yield t.number


def trials_spec(spec: SweepSpec, store: SweepStore) -> tuple[SweepSpec, list[str]]:
    """The spec with the trials asked so far as its one axis (`trial`): what `assemble` reads; and each
    trial's point file (the one it was told from: a screen's with fidelity; its own point's before its tell)."""
    study = open_study(store, spec.search, writer=False)
    trials = [] if study is None else study.get_trials(deepcopy=False)
    values = {p.path: tuple(t.params[p.path] for t in trials) for p in spec.search.space}
    files = [t.user_attrs.get("point_key") or trial_point(spec, t).key for t in trials]
    return dataclasses.replace(spec, axes=(Axis("trial", values),)), files


def results(spec: SweepSpec, store: SweepStore, provenance: dict[str, str], *, partial: bool = False) -> xr.Dataset:
    """A sweep's Dataset (store.assemble): a grid's points, or a search's trials along `trial` with its
    front marked (`mark_front`; not for `partial`, the points finished so far) and, with fidelity, what
    each trial was scored on (`fidelity.mark`)."""
    if spec.search is None:
        return assemble(spec, store, provenance, partial=partial)
    trials, files = trials_spec(spec, store)
    ds = assemble(trials, store, provenance, partial=partial, files=files)
    if partial:
        return ds
    return mark_front(ds if spec.search.fidelity is None else mark(ds, store, files), spec.search)


def status(root: str | Path) -> dict[str, object]:
    """What is done in a sweep folder: points done and total (a search's budget), whether results.nc is
    written, and the keys of the points not written yet."""
    from aocsim.experiments.sweep.spec import parse_spec
    from aocsim.experiments.sweep.store import SPEC_FILE

    store = SweepStore(root)
    saved = store.saved_spec()
    if saved is None:
        raise InputError(f"DIR = {str(root)!r} holds no sweep ({SPEC_FILE} missing or not a sweep's); expected a "
                         "folder written by aocsim sweep")
    spec = parse_spec(json.loads(saved["spec"]), where=str(store.root / SPEC_FILE), check=False)
    keys = trials_spec(spec, store)[1] if spec.search else [p.key for p in spec.points()]
    done = store.done()
    total = spec.search.budget if spec.search else len(keys)
    return {"done": sum(k in done for k in keys), "total": total, "results": store.results.is_file(),
            "missing": [k for k in keys if k not in done]}


def scores(ds: xr.Dataset, search: Search, *, violations: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every point of a results Dataset or point file (a search's trials or a grid's points, flattened):
    its objectives [points, objectives] (each metric's mean over chips x seeds) and whether it is feasible:
    it meets the search's constraints and compare trusted it (`trusted`; results without the verdict count
    as trusted). With `violations`, instead of that, each constraint's violation and then the verdict's
    [points, constraints + 1] (Optuna's convention: <= 0 met; an untrusted point violates by 1)."""
    mean = {m: ds[m].mean(("chip", "seed")).values.ravel() for m in search.metrics}
    values = np.stack([mean[m] for m in search.objectives], axis=1)
    violation = np.stack([*(c.violation(mean[c.metric]) for c in search.constraints),
                          np.where(untrusted_points(ds, len(values)), 1.0, -1.0)], axis=1)
    return values, violation if violations else np.all(violation <= 0, axis=1)


def reference_point(search: Search, *scored: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The hypervolume's reference: the search's own (`search.reference`); else, per objective, the bound
    of a constraint on it that limits it from the bad side (an infeasible trial never counts, so the
    front is measured from the worst value allowed), or `front.default_reference` over the feasible
    points of all `scored` (values, feasible) pairs."""
    if search.reference is not None:
        return np.array(list(search.reference.values()))
    values = np.concatenate([v[f] for v, f in scored])
    ref = default_reference(values, list(search.objectives.values()))
    for i, (metric, direction) in enumerate(search.objectives.items()):
        for c in search.constraints:
            if c.metric == metric and c.op == (">=" if direction == "max" else "<="):
                ref[i] = c.bound
    return ref


def search_of(ds: xr.Dataset) -> Search:
    """The search block a results Dataset was run with (its spec attribute)."""
    from aocsim.experiments.sweep.spec import parse_spec

    spec = parse_spec(json.loads(ds.attrs["spec"]), check=False)
    if spec.search is None:
        raise InputError("the results are a grid's, not a search's; expected the results.nc of a sweep with a search")
    return spec.search


def against(search_ds: xr.Dataset, other: xr.Dataset) -> dict[str, Any]:
    """A search's front against another sweep's results (a grid of the same budget, say) in the search's
    objectives and constraints: each one's hypervolume up to one common reference point."""
    search = search_of(search_ds)
    missing = [m for m in search.metrics if m not in other]
    if missing:
        raise InputError(f"the other results lack {missing[0]!r}; expected the search's metrics ({', '.join(search.metrics)})")
    (a, fa), (b, fb) = scores(search_ds, search), scores(other, search)
    whole = (full(search_ds, len(a)), full(other, len(b)))  # a front and its volume: whole-workload trials only
    ea, eb = fa & whole[0], fb & whole[1]
    ref = reference_point(search, (a, ea), (b, eb))
    directions = list(search.objectives.values())
    return {"reference": dict(zip(search.objectives, map(float, ref))), "points": (len(a), len(b)),
            "hypervolume": (hypervolume(a, directions, ref, ea), hypervolume(b, directions, ref, eb)),
            "front": (pareto_mask(a, directions, ea), pareto_mask(b, directions, eb)), "values": (a, b),
            "feasible": (fa, fb), "full": whole}


def repeats(ds: xr.Dataset) -> np.ndarray:
    """Per trial, the first earlier trial asked with the same settings, or -1."""
    params = [c for c in ds.coords if ds.coords[c].dims == ("trial",) and c != "trial"]
    first: dict[str, int] = {}
    out = np.full(ds.sizes["trial"], -1, dtype=np.int64)
    for i in range(ds.sizes["trial"]):
        key = json.dumps([str(ds.coords[p].values[i]) for p in params])
        out[i] = first.setdefault(key, i)
        out[i] = -1 if out[i] == i else out[i]
    return out


def mark_front(ds: xr.Dataset, search: Search) -> xr.Dataset:
    """The search's Dataset with each trial's feasibility and Pareto membership, and the front's
    hypervolume (in the attributes, with its reference point)."""
    values, feasible = scores(ds, search)
    eligible = feasible & full(ds, len(values))  # a screened trial is never on the front, nor in its volume
    directions = list(search.objectives.values())
    front = pareto_mask(values, directions, eligible)
    reference = reference_point(search, (values, eligible))
    out = ds.copy()
    out["feasible"] = ("trial", feasible)
    out["feasible"].attrs.update(units="1", description=(
        "the trial meets every constraint of the search (mean over chips x seeds) and compare trusted it (trusted)"))
    out["pareto"] = ("trial", front)
    out["pareto"].attrs.update(units="1", description="no feasible trial is as good in every objective and better in one"
                               + (" (of the trials scored on the whole workload, fidelity 1: only they are on the "
                                  "front)" if search.fidelity else ""))
    out["repeat_of"] = ("trial", repeats(ds))
    out["repeat_of"].attrs.update(units="1", description=(
        "the first earlier trial with the same settings (the sampler asked them again; the point ran once), -1 for "
        "a trial whose settings are new"))
    out.attrs.update({
        "search": json.dumps({"objectives": search.objectives, "sampler": search.sampler, "budget": search.budget,
                              "seed": search.seed, "batch": search.batch,
                              **({"fidelity": dataclasses.asdict(search.fidelity)} if search.fidelity else {}),
                              "constraints": {c.metric: f"{c.op} {c.bound!r}" for c in search.constraints}}),
        "hypervolume": hypervolume(values, directions, reference, eligible) if np.all(np.isfinite(reference))
        else 0.0,
        "hypervolume_reference": json.dumps(dict(zip(search.objectives, map(float, reference)))),
    })
    return out
