"""The swept dimensions of a spec (`Axis`): a grid axis's values, a zip of lists varied together,
points drawn in a box (Latin hypercube or uniform); one-line InputErrors naming the key."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aocsim.errors import InputError

SAMPLING = ("latin_hypercube", "uniform")


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def mapping(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{name} = {short(value)}; expected a mapping")
    return value


def count(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} = {short(value)}; expected an integer >= {minimum}")
    return value


@dataclass(frozen=True)
class Axis:
    """One swept dimension: its name and, per parameter path, the value at each coordinate."""

    dim: str
    values: dict[str, tuple[Any, ...]]

    def __len__(self) -> int:
        return len(next(iter(self.values.values())))



def values(name: str, value: Any) -> tuple[Any, ...]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{name} = {short(value)}; expected a non-empty list of values")
    if any(v is None or isinstance(v, (dict, list)) for v in value):
        raise InputError(f"{name} = {short(value)}; expected a list of numbers, strings or booleans (no null: "
                         "a coordinate must be a value)")
    distinct = {(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else json.dumps(v))
                for v in value}  # 4 and 4.0 are one setting
    if len(distinct) != len(value):
        raise InputError(f"{name} = {short(value)}; expected distinct values")
    return tuple(value)


def zipped(zipped: dict[str, Any]) -> Axis:
    lists = {path: values(f"zip.{path}", v) for path, v in zipped.items()}
    lengths = {len(v) for v in lists.values()}
    if len(lengths) != 1:
        raise InputError(f"zip: lists of lengths {sorted(lengths)}; expected lists of one length (varied together)")
    return Axis("zip", lists)


def drawn(random: dict[str, Any]) -> Axis:
    """Points drawn in a box: Latin hypercube (one point per stratum of every parameter) or uniform."""
    unknown = [k for k in random if k not in ("method", "points", "seed", "ranges")]
    if unknown:
        raise InputError(f"random.{unknown[0]} is not a setting; expected method, points, seed, ranges")
    method = random.get("method", "latin_hypercube")
    if method not in SAMPLING:
        raise InputError(f"random.method = {method!r}; expected one of {', '.join(SAMPLING)}")
    n = count("random.points", random.get("points"), minimum=1)
    rng = np.random.default_rng(count("random.seed", random.get("seed", 0)))
    ranges = mapping("random.ranges", random.get("ranges"))
    if not ranges:
        raise InputError("random.ranges is empty; expected {path: {low, high, scale}} for at least one parameter")
    out = {}
    for path, box in ranges.items():
        box = mapping(f"random.ranges.{path}", box)
        low, high, scale = box.get("low"), box.get("high"), box.get("scale", "linear")
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high))
        if not ok or low >= high or scale not in ("linear", "log") or (scale == "log" and low <= 0):
            raise InputError(f"random.ranges.{path} = {short(box)}; expected {{low, high, scale}} with finite "
                             "low < high, scale linear or log (log: low > 0)")
        if method == "latin_hypercube":
            u = (rng.permutation(n) + rng.random(n)) / n
        else:
            u = rng.random(n)
        a, b = (math.log(low), math.log(high)) if scale == "log" else (low, high)
        drawn = a + u * (b - a)
        out[path] = tuple(float(v) for v in (np.exp(drawn) if scale == "log" else drawn))
    return Axis("draw", out)
