"""The `search` and `space` blocks of a sweep spec: a co-design search instead of a grid.

    search:
      objectives: {agreement: max, energy_j: min}   # metrics of a point (mean over chips x seeds); a list
                                                     #   [agreement, energy_j] pushes each the way it is better
      constraints: {agreement: ">= 0.99"}           # optional: a point outside them is infeasible (a fraction
                                                     #   also as ">= 99 %"; a bound outside the metric's range is refused)
      budget: 10                                     # points evaluated
      sampler: nsga2                                 # nsga2 or tpe (Optuna), or random
      seed: 3
      batch: 4                                       # optional: points asked together (default 4)
      reference: {agreement: 0.9, energy_j: 1.0e-5}  # optional: the hypervolume's reference point
      start: [{slm.bits: 9, noise.power_per_unit_w: 1.0e-4}]   # optional: the first trials' settings
      fidelity: {screen: 0.25, promote: 0.5}         # optional: each trial first on the workload's first quarter,
                                                     #   the best half of each round then on all of it (fidelity.py);
                                                     #   chips: 1 screens on the first of the spec's chips only
    space:
      slm.bits: {int: [2, 9]}
      noise.power_per_unit_w: {log: [1.0e-6, 1.0e-3]}
      placement.partial_sums: {choice: [analog, digital]}

Read and checked here, before any work (one-line InputErrors naming the field); run by
`search.run_search` (docs/SWEEPS.md section 6).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from aocsim.errors import InputError
from aocsim.experiments.metrics import ALIASES, METRICS, resolve
from aocsim.experiments.sweep.axes import count, mapping, short

SAMPLERS = ("nsga2", "tpe", "random")
DIRECTIONS = ("max", "min")
KINDS = ("int", "float", "log", "choice")  # a range of integers, of reals (linear or log-uniform), a list
SEARCH_KEYS = ("objectives", "constraints", "budget", "sampler", "seed", "batch", "reference", "start", "fidelity")
FIDELITY_KEYS = ("screen", "promote")  # required
FIDELITY_OPTIONAL = ("chips",)
_CONSTRAINT = re.compile(r"\s*(>=|<=)\s*([^\s%]+)\s*(%?)\s*")


@dataclass(frozen=True)
class Param:
    """One searched parameter: its kind (`KINDS`) and its bounds, or its choices."""

    path: str
    kind: str
    bounds: tuple[Any, ...]  # (low, high) for int/float/log; the choices for choice


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str  # ">=" or "<="
    bound: float

    def violation(self, value: float) -> float:
        """Optuna's convention: <= 0 when the point meets the constraint."""
        return self.bound - value if self.op == ">=" else value - self.bound


@dataclass(frozen=True)
class Fidelity:
    """Successive halving in each round (fidelity.py): every trial scored first on the first `screen` of the
    workload's samples (on the first `chips` of the spec's chips), the best `promote` of the round's trials
    then on all of them."""

    screen: float  # in (0, 1)
    promote: float  # in (0, 1); at least one trial of a round is promoted, never all of a full round
    chips: int | None = None  # the chips a screen runs, the spec's first ones (fewer than it has); None: all


@dataclass(frozen=True)
class Search:
    objectives: dict[str, str]  # metric -> max or min
    constraints: tuple[Constraint, ...]
    budget: int
    sampler: str
    seed: int
    batch: int
    reference: dict[str, float] | None
    space: tuple[Param, ...]
    start: tuple[dict[str, Any], ...] = ()  # the first trials' settings, asked as given (a known-good machine)
    fidelity: Fidelity | None = None  # None: every trial on the whole workload

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric the search reads: its objectives, then its constraints' ones."""
        return tuple(dict.fromkeys([*self.objectives, *(c.metric for c in self.constraints)]))


def metric_name(name: str, field: str, known: tuple[str, ...]) -> str:
    """A metric of a point by its name or short alias; a one-line error naming the field otherwise."""
    metric = resolve(name)
    if metric not in known:
        names = [*known, *ALIASES]
        raise InputError(f"{field}: unknown metric {name!r}; expected one of {', '.join(names)}")
    return metric


def parse_search(raw: Any, space: Any, known: tuple[str, ...]) -> Search:
    """The search block and its space, checked (metrics among `known`)."""
    raw = mapping("search", raw)
    unknown = [k for k in raw if k not in SEARCH_KEYS]
    if unknown:
        raise InputError(f"search.{unknown[0]} is not a search setting; expected {', '.join(SEARCH_KEYS)}")
    objectives = raw.get("objectives")
    if isinstance(objectives, list):  # metric names: each pushed the way its declaration says is better
        objectives = {name: METRICS[metric_name(name, "search.objectives", known)].better for name in objectives}
    objectives = mapping("search.objectives", objectives)
    if not objectives:
        raise InputError("search.objectives is empty; expected {metric: max or min} for at least one metric, or a "
                         "list of metrics (each pushed the way the metric is better)")
    goals: dict[str, str] = {}
    for name, direction in objectives.items():
        metric = metric_name(name, "search.objectives", known)
        if direction not in DIRECTIONS:
            raise InputError(f"search.objectives.{name} = {short(direction)}; expected max or min")
        if metric in goals:
            raise InputError(f"search.objectives names {metric!r} twice; expected each metric once")
        goals[metric] = direction
    constraints = tuple(_constraint(name, text, known) for name, text in
                        mapping("search.constraints", raw.get("constraints", {})).items())
    budget = count("search.budget", raw.get("budget"), minimum=1)
    sampler = raw.get("sampler", "nsga2")
    if sampler not in SAMPLERS:
        raise InputError(f"search.sampler = {short(sampler)}; expected one of {', '.join(SAMPLERS)}")
    batch = count("search.batch", raw.get("batch", min(4, budget)), minimum=1)
    if sampler == "nsga2" and batch < 2:
        raise InputError(f"search.batch = {batch}; expected >= 2 with sampler nsga2 (its population)")
    params = _space(space)
    return Search(goals, constraints, budget, sampler, count("search.seed", raw.get("seed", 0)), batch,
                  _reference(raw.get("reference"), goals, known), params, _start(raw.get("start", []), params, budget),
                  _fidelity(raw.get("fidelity"), batch))


def _fidelity(raw: Any, batch: int) -> Fidelity | None:
    """{screen, promote[, chips]}: both fractions in (0, 1), promote leaving a round of `batch` some trial
    unpromoted; chips a count (checked against the spec's chips in spec.py)."""
    if raw is None:
        return None
    raw = mapping("search.fidelity", raw)
    unknown = [k for k in raw if k not in (*FIDELITY_KEYS, *FIDELITY_OPTIONAL)]
    if unknown:
        raise InputError(f"search.fidelity.{unknown[0]} is not a fidelity setting; expected screen, promote and "
                         "optionally chips")
    if not set(FIDELITY_KEYS) <= set(raw):
        raise InputError(f"search.fidelity = {short(raw)}; expected {{screen: FRACTION, promote: FRACTION}} and "
                         "optionally chips: COUNT, e.g. {screen: 0.25, promote: 0.5}")
    for name, what in (("screen", "of the workload each trial is first run on"),
                       ("promote", "of each round's screened trials run on the whole workload")):
        value = raw[name]
        if not (_finite(value) and 0 < value < 1):
            raise InputError(f"search.fidelity.{name} = {short(value)}; expected a fraction in (0, 1) {what}, "
                             "such as 0.25")
    if batch < 2:
        raise InputError(f"search.batch = {batch} with search.fidelity: a round of one trial has none to screen out; "
                         "expected search.batch >= 2")
    if math.ceil(raw["promote"] * batch) >= batch:  # then the screen would only add work
        raise InputError(f"search.fidelity.promote = {short(raw['promote'])} promotes every trial of a round of "
                         f"search.batch = {batch}; expected a fraction at most {(batch - 1) / batch:.3g}")
    chips = count("search.fidelity.chips", raw["chips"], minimum=1) if "chips" in raw else None
    return Fidelity(float(raw["screen"]), float(raw["promote"]), chips)


def _start(raw: Any, params: tuple[Param, ...], budget: int) -> tuple[dict[str, Any], ...]:
    """Settings of the first trials: each a value for every parameter of the space, inside it."""
    if not isinstance(raw, list) or len(raw) > budget:
        raise InputError(f"search.start = {short(raw)}; expected a list of at most budget ({budget}) settings")
    out = []
    for i, point in enumerate(raw):
        point = mapping(f"search.start[{i}]", point)
        if set(point) != {p.path for p in params}:
            raise InputError(f"search.start[{i}] = {short(point)}; expected a value for each parameter of the space "
                             f"({', '.join(p.path for p in params)})")
        for p in params:
            v = point[p.path]
            inside = (v in p.bounds if p.kind == "choice" else
                      _finite(v) and (isinstance(v, int) or p.kind != "int") and p.bounds[0] <= v <= p.bounds[1])
            if not inside:
                raise InputError(f"search.start[{i}].{p.path} = {short(v)}; expected a value inside space.{p.path}")
        out.append({p.path: point[p.path] for p in params})
    return tuple(out)


def _constraint(name: str, text: Any, known: tuple[str, ...]) -> Constraint:
    """'>= 0.99' or '>= 99 %' (fractions may be written in %, as tables print them), the bound checked
    against the metric's range (`aocsim.experiments.metrics`): a bound no point can meet is refused here,
    before any trial runs."""
    metric = metric_name(name, "search.constraints", known)
    match = _CONSTRAINT.fullmatch(text) if isinstance(text, str) else None
    bound = _number(match.group(2)) if match else None
    if bound is None:
        raise InputError(f"search.constraints.{name} = {short(text)}; expected \">= VALUE\" or \"<= VALUE\" "
                         "(VALUE % for a fraction)")
    declared = METRICS[metric]
    if match.group(3):  # written in %
        if not declared.share:
            raise InputError(f"search.constraints.{name} = {short(text)}: {metric} is {declared.describe_range()}, "
                             "not a fraction; expected a bound without %")
        bound /= 100.0
    op = match.group(1)
    if not declared.low <= bound <= declared.high:
        example = f'"{op} 0.99" or "{op} 99 %"' if declared.share else f'"{op} VALUE" with VALUE >= {declared.low:g}'
        raise InputError(f"search.constraints.{name} = {short(text)}: {metric} is {declared.describe_range()}, so no "
                         f"point can meet it; expected a bound inside that range, such as {example}")
    return Constraint(metric, op, bound)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _reference(raw: Any, goals: dict[str, str], known: tuple[str, ...]) -> dict[str, float] | None:
    if raw is None:
        return None
    ref = {metric_name(k, "search.reference", known): v for k, v in mapping("search.reference", raw).items()}
    if set(ref) != set(goals) or not all(_finite(v) for v in ref.values()):
        raise InputError(f"search.reference = {short(raw)}; expected a finite number for each objective "
                         f"({', '.join(goals)})")
    return {k: float(ref[k]) for k in goals}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _space(raw: Any) -> tuple[Param, ...]:
    if raw is None:
        raise InputError("a search needs a space; expected space: {path: {int|float|log|choice: ...}}")
    raw = mapping("space", raw)
    if not raw:
        raise InputError("space is empty; expected {path: {int|float|log|choice: ...}} for at least one parameter")
    return tuple(_param(path, box) for path, box in raw.items())


def _param(path: str, box: Any) -> Param:
    expected = "{int: [low, high]}, {float: [low, high]}, {log: [low, high]} or {choice: [values]}"
    if not isinstance(box, dict) or len(box) != 1 or next(iter(box)) not in KINDS:
        raise InputError(f"space.{path} = {short(box)}; expected one of {expected}")
    kind, value = next(iter(box.items()))
    if kind == "choice":
        from aocsim.experiments.sweep.axes import values

        return Param(path, kind, values(f"space.{path}.choice", value))
    ok = isinstance(value, list) and len(value) == 2 and all(_finite(v) for v in value)
    if ok and kind == "int":
        ok = all(isinstance(v, int) for v in value)
    if not ok:
        what = "two integers" if kind == "int" else "two finite numbers"
        raise InputError(f"space.{path}.{kind} = {short(value)}; expected [low, high], {what}")
    low, high = value
    if low >= high:
        raise InputError(f"space.{path}.{kind} = {short(value)}; expected low < high")
    if kind == "log" and low <= 0:
        raise InputError(f"space.{path}.log = {short(value)}; expected low > 0 (a log-uniform range)")
    return Param(path, kind, (low, high) if kind == "int" else (float(low), float(high)))
