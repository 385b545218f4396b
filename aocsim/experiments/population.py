"""`compare_population`: a population of design points, one model on one placement's shapes, as one run.

Co-design asks many design points (sweeps' grids, a search's generations) of one model that differ in
profile values that are not shapes: SLM and ADC bits, light, RIN, noise, temperature (`tile_product.PER_LOAD`).
Run one by one, each point pays its own exact path, its own fits and its own device passes, and a pass of a
few sequences costs mostly per-call overhead. Here the exact path runs once; per chip, every point's tile
programs are fitted together (each point's own program, remembered as its own: `PlacedModel.fit_population`),
then every chip's and point's seeds run as one batch where the kind can (`PlacedModel.run_population`: a
hybrid SSM stacks every load, each row through its own chip's and point's load, keyed by its own seed). Each
point's Dataset is what `compare` gives it alone, statistically: its keyed draws are its own, and a larger
batch changes only a product's rounding (tests/experiments/test_population.py). See docs/SWEEPS.md section 7.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Sequence

import torch
import xarray as xr

from aocsim._checks import short
from aocsim.errors import InputError
from aocsim.execute.map_fit import FITS
from aocsim.execute.registry import resolve_profile
from aocsim.experiments.compare import _dataset, _plan, record_runs
from aocsim.experiments.workloads import default_calibration
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.progress import bar

# Points fitted together at most: the fits memo keeps this many programs in memory (`map_fit.FITS`), and
# each point is placed from it right after (with the calibration store off, a program pushed out would be fitted again).
FIT_CHUNK = FITS.size


def compare_population(model: Any, devices: Sequence[DeviceProfile], inputs: torch.Tensor,
                       targets: torch.Tensor | None = None, *, placement: Any = None,
                       seeds: Sequence[Sequence[int]] = ((0,),), chips: Sequence[int] = (0,),
                       calibration: Any = None, progress: bool = False) -> list[xr.Dataset]:
    """`compare` for every design point of a population at once (module docstring): one Dataset per point.

    Args:
        model: a loaded model, a bundled model name or a model directory.
        devices: one profile per design point (`DeviceProfile`s or names).
        inputs, targets, placement, chips, calibration: as `compare`'s, the same for every point.
        seeds: each point's seeds (as many for every point), or one list for all of them.
        progress: a progress bar over the chips.
    """
    if not isinstance(devices, Sequence) or isinstance(devices, str) or not devices:
        raise InputError(f"devices = {short(devices)}; expected a non-empty sequence of profiles, one per design point")
    per_point = _seeds(seeds, len(devices))
    plans = [_plan(model, device, inputs, targets, placement=placement, seeds=s, chips=chips,
                   calibration=calibration, split=False) for device, s in zip(devices, per_point)]
    first = plans[0]
    for i, plan in enumerate(plans[1:], 1):
        if plan.placed != first.placed:
            raise InputError(f"devices[{i}] resolves the placement differently from devices[0] ({plan.placed.placement} "
                             f"against {first.placed.placement}); expected design points of one placement")
    placed, m = first.placed, first.model
    prepared = placed.cls.prepare(m, default_calibration(m) if first.calibration is None else first.calibration,
                                  placed.placement)
    exact = placed.cls.exact(m, first.inputs, placed.placement)  # once: the same for every point
    runs: list[dict[int, list[list[dict[str, Any]]]]] = [{} for _ in plans]
    built: list[tuple[int, int, Any]] = []  # (chip, point, placed), every chip's points: run as one population
    for k, ci in bar(list(enumerate(first.chips)), desc="population chips", enabled=progress):
        profiles = [resolve_profile(plan.base, ci) for plan in plans]
        for i in range(0, len(profiles), FIT_CHUNK):  # each chunk placed while its fits are still in memory
            chunk = profiles[i:i + FIT_CHUNK]
            placed.cls.fit_population(m, chunk, prepared, placed.placement)
            built += [(k, i + j, placed.build(m, profile, prepared)) for j, profile in enumerate(chunk)]
    # the chips too are rows of one batch (`variation.chip_seed` is a per-load value)
    results = placed.cls.run_population([one for _, _, one in built], first.inputs,
                                        [plans[p].seeds for _, p, _ in built])
    for (k, p, one), result in zip(built, results):
        overrides = json.dumps(one.run_overrides(), sort_keys=True, default=str)
        runs[p][k] = [record_runs(placed.cls, one, result, exact.z, overrides, plans[p].targets)]
    out = []
    for p, plan in enumerate(plans):
        plan = replace(plan, prepared=prepared, exact=exact, where=[((ci,), slice(0, len(plan.seeds)))
                                                                     for ci in range(len(plan.chips))])
        out.append(_dataset(plan, runs[p]))
    return out


def _seeds(seeds: Any, points: int) -> list[list[int]]:
    """Each point's seeds: a list per point (of one length), or one list for every point."""
    try:
        items = list(seeds)
    except TypeError:
        raise InputError(f"seeds = {short(seeds)}; expected a list of seeds or one per design point") from None
    if items and all(isinstance(s, Sequence) and not isinstance(s, str) for s in items):
        if len(items) != points or len({len(s) for s in items}) != 1:
            raise InputError(f"seeds has {len(items)} lists of lengths {sorted({len(s) for s in items})}; expected "
                             f"one per design point ({points}), all of one length")
        return [list(s) for s in items]
    return [items] * points
