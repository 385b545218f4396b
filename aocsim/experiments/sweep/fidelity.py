"""Multi-fidelity search (`search.fidelity`): each round's trials screened on the workload's first samples
(and, with `chips`, on the spec's first chips only), the best of the round promoted to the whole workload.
See docs/SWEEPS.md section 6.

Successive halving with one rung per round, not Optuna's pruning: Optuna's pruners judge one trial's
intermediate values of one objective, while a search here has several objectives and constraints, and
its rounds already hold the trials to compare; NSGA-II moves to its next generation only when a
population of trials is complete, so its trials cannot end pruned either.

A screen is a prefix of the full run: the first k samples (sequences) of the point's workload, with the
full point's noise seeds. Device noise is keyed by sample index (aocsim/hardware/engine/keys.py), so a
screened sample draws what it draws in the full run. A screen has its own file (`screen_key`); a
promoted trial's full run is the point file a search without fidelity would write.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, Callable, Iterable

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.sweep.front import costs, pareto_mask
from aocsim.experiments.sweep.search_spec import Fidelity, Search
from aocsim.experiments.sweep.spec import Point
from aocsim.experiments.sweep.store import SweepStore

Evaluate = Callable[[list[Point]], Iterable[tuple[str, xr.Dataset]]]
Score = Callable[[str], tuple[np.ndarray, np.ndarray]]  # a point file's objectives and violations (search.scores)
PROMOTED, SCREENED = -1.0, 1.0  # the extra constraint told to the sampler: a trial not promoted violates it


def screen_size(n: int, fraction: float) -> int:
    """The samples a screen runs of a workload of `n`: the first floor(fraction n), at least one."""
    return max(1, math.floor(fraction * n))


def check_screen(n: int, fidelity: Fidelity) -> None:
    """A screen must run fewer samples than the whole workload (else it only adds work)."""
    if screen_size(n, fidelity.screen) >= n:
        raise InputError(f"search.fidelity.screen = {fidelity.screen!r} of a workload of {n} samples screens all of "
                         f"them; expected a fraction that leaves fewer than {n} (or more samples under data)")


def prefix(workload: Any, fraction: float) -> Any:
    """The workload's first samples (`screen_size`); the workload itself at fraction 1."""
    if fraction >= 1.0:
        return workload
    k = screen_size(len(workload.inputs), fraction)
    targets = None if workload.targets is None else workload.targets[:k]
    return dataclasses.replace(workload, inputs=workload.inputs[:k], targets=targets)


def with_fidelity(ds: xr.Dataset, fraction: float, samples: int) -> xr.Dataset:
    """A point file's record of what it was scored on: the workload's share and the samples compare ran (its
    chips are its chip dimension)."""
    out = ds.copy()
    out["fidelity"] = ((), float(fraction))
    out["fidelity"].attrs.update(units="1", description=(
        "the share of the workload's samples the trial was scored on: 1 for the whole workload, "
        "search.fidelity.screen for a trial screened and not promoted (its first samples)"))
    out["samples"] = ((), np.int64(samples))
    out["samples"].attrs.update(units="1", description="the samples (sequences or test inputs) compare scored")
    return out


def screen_key(key: str, fraction: float, chips: int | None = None) -> str:
    """The file of a point's screen: 16 hex digits, like every point file (store.POINT_FILE)."""
    on = "" if chips is None else f":chips:{chips}"
    return hashlib.sha256(f"{key}:screen:{fraction!r}{on}".encode()).hexdigest()[:16]


def screen_point(point: Point, fidelity: Fidelity) -> Point:
    """The screen of `point`: its first samples (and chips), drawing the noise of its full run."""
    return dataclasses.replace(point, key=screen_key(point.key, fidelity.screen, fidelity.chips), seeds_of=point.key,
                               fraction=fidelity.screen, chips=fidelity.chips)


def promoted_count(n: int, promote: float) -> int:
    """Of a round of `n` trials, ceil(promote n) are promoted: at least one."""
    return min(n, max(1, math.ceil(promote * n)))


def ranking(values: np.ndarray, violation: np.ndarray, directions: list[str]) -> np.ndarray:
    """Trial indices best first: feasible ones (every violation <= 0, finite objectives) by non-dominated
    rank, within a rank by crowding distance (larger first: NSGA-II's spread), then by index; then the
    rest by their summed violation, then by index."""
    feasible = np.all(violation <= 0, axis=1) & np.all(np.isfinite(values), axis=1)
    order: list[int] = []
    left = feasible.copy()
    while left.any():
        front = np.flatnonzero(pareto_mask(values, directions, left))
        crowd = crowding(costs(values[front], directions))
        order += [int(front[i]) for i in np.lexsort((front, -crowd))]
        left[front] = False
    rest = np.flatnonzero(~feasible)
    excess = np.nan_to_num(np.clip(violation[rest], 0, None).sum(axis=1), nan=np.inf)
    return np.array(order + [int(rest[i]) for i in np.lexsort((rest, excess))], dtype=np.int64)


def crowding(c: np.ndarray) -> np.ndarray:
    """NSGA-II's crowding distance of points [n, objectives] (costs): per objective, the gap between each
    point's neighbours over the span; the extremes infinite."""
    n = len(c)
    out = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(c.shape[1]):
        order = np.argsort(c[:, j], kind="stable")
        span = c[order[-1], j] - c[order[0], j]
        out[order[[0, -1]]] = np.inf
        if span > 0:
            out[order[1:-1]] += (c[order[2:], j] - c[order[:-2], j]) / span
    return out


def run_round(points: list[Point], store: SweepStore, evaluate: Evaluate, search: Search,
              score: Score) -> list[tuple[str, list[float]]]:
    """A round's trials (all of them, told or not, so that a resumed round promotes the same ones): each
    screened, the best `promoted_count` run on the whole workload. Per trial, the point file it is told
    from and the extra constraint the sampler is told (`PROMOTED` or `SCREENED`): a trial that repeats the
    settings of one run on the whole workload (promoted in this round or an earlier one) is told that run."""
    assert search.fidelity is not None
    screens = [screen_point(p, search.fidelity) for p in points]
    run_points(screens, store, evaluate)
    scored = [score(s.key) for s in screens]
    values, violation = np.concatenate([v for v, _ in scored]), np.concatenate([c for _, c in scored])
    top = set(ranking(values, violation, list(search.objectives.values()))[
        :promoted_count(len(points), search.fidelity.promote)].tolist())
    run_points([p for i, p in enumerate(points) if i in top], store, evaluate)
    whole = store.done()  # the whole-workload runs so far: the same after a resume, once this round's are written
    return [(p.key, [PROMOTED]) if i in top or p.key in whole else (s.key, [SCREENED])
            for i, (p, s) in enumerate(zip(points, screens))]


def run_points(points: list[Point], store: SweepStore, evaluate: Evaluate) -> None:
    """The points not written yet, each once (a repeated setting is one file), written as they finish."""
    done = store.done()
    todo = {p.key: p for p in points if p.key not in done}
    for key, ds in evaluate(list(todo.values())):
        store.write_point(key, ds)


def mark(ds: xr.Dataset, store: SweepStore, files: list[str]) -> xr.Dataset:
    """A search's trials with the `fidelity`, `samples` and `chips` each was scored on (from its point file)."""
    out = ds.copy()
    per = [store.read_point(f) for f in files]
    for name in ("fidelity", "samples"):
        out[name] = ("trial", np.array([p[name].item() for p in per]))
        out[name].attrs.update(per[0][name].attrs if per else {})
    out["chips"] = ("trial", np.array([p.sizes["chip"] for p in per], dtype=np.int64))
    out["chips"].attrs.update(units="1", description=(
        "the chips the trial was scored on: every chip, or search.fidelity.chips (the first ones; NaN on the "
        "others) for a trial screened and not promoted"))
    return out


def full(ds: xr.Dataset, n: int) -> np.ndarray:
    """Which of the `n` points of a results Dataset (flattened) were scored on the whole workload: all of
    them in results without fidelity (a grid's, a search's without the block)."""
    return ds["fidelity"].values.ravel() >= 1.0 if "fidelity" in ds else np.ones(n, dtype=bool)
