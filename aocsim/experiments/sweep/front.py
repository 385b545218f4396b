"""Pareto fronts and hypervolumes of points with several objectives, each maximised or minimised.

Objectives are turned into costs (a maximised one negated) so that lower is better everywhere. The
hypervolume is the measure of the region the front dominates up to a reference point (no better
than any front point in any objective): the larger, the better the front. Exact, by slicing along
the first objective (fine for the few objectives and the hundreds of points a search has).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def costs(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """`values` [points, objectives] as costs: maximised columns negated."""
    signs = np.array([-1.0 if d == "max" else 1.0 for d in directions])
    return np.asarray(values, dtype=np.float64) * signs


def pareto_mask(values: np.ndarray, directions: Sequence[str], feasible: np.ndarray | None = None) -> np.ndarray:
    """True for the points no other (feasible) point dominates: as good in every objective and better in
    one. Points with a NaN objective, or infeasible ones, are never on the front."""
    c = costs(values, directions)
    ok = np.all(np.isfinite(c), axis=1)
    if feasible is not None:
        ok &= np.asarray(feasible, dtype=bool)
    mask = np.zeros(len(c), dtype=bool)
    idx = np.flatnonzero(ok)
    for i in idx:
        others = c[idx]
        dominated = np.any(np.all(others <= c[i], axis=1) & np.any(others < c[i], axis=1))
        mask[i] = not dominated
    return mask


def default_reference(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """A reference point no trial reaches: each objective's worst value among the finite points, moved
    outwards by a tenth of its span (a tenth of its size where every point agrees, or 0.1 at 0), so that
    the front's extreme points still count. In the objectives' units."""
    c = costs(values, directions)
    c = c[np.all(np.isfinite(c), axis=1)]
    if not len(c):
        return np.full(len(directions), np.nan)
    worst, span = c.max(axis=0), np.ptp(c, axis=0)
    margin = np.where(span > 0, 0.1 * span, np.where(worst != 0, 0.1 * np.abs(worst), 0.1))
    return costs((worst + margin)[None, :], directions)[0]


def hypervolume(values: np.ndarray, directions: Sequence[str], reference: Sequence[float] | Mapping[str, float],
                feasible: np.ndarray | None = None) -> float:
    """The hypervolume of the front of `values` [points, objectives] up to `reference` (in the objectives'
    units); points beyond the reference in any objective add nothing."""
    ref = costs(np.asarray(list(reference.values() if isinstance(reference, Mapping) else reference))[None, :],
                directions)[0]
    front = costs(values, directions)[pareto_mask(values, directions, feasible)]
    front = front[np.all(front < ref, axis=1)]
    return float(_volume(front, ref))


def _volume(points: np.ndarray, ref: np.ndarray) -> float:
    """Lebesgue measure of the union of boxes [p, ref] (minimisation): slices between sorted first coordinates."""
    if not len(points):
        return 0.0
    if points.shape[1] == 1:
        return float(ref[0] - points[:, 0].min())
    order = np.argsort(points[:, 0])
    points = points[order]
    total = 0.0
    for k in range(len(points)):
        upper = points[k + 1, 0] if k + 1 < len(points) else ref[0]
        width = upper - points[k, 0]
        if width > 0:
            total += width * _volume(points[: k + 1, 1:], ref[1:])
    return total
