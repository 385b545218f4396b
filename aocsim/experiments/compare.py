"""`compare`: a trained model on a virtual AOC next to its exact path, as a labelled `xarray.Dataset`.

The model's placement class (aocsim/execute/registry.py) is chosen once: a DEQ that fits the device
runs natively, a larger one with its feedback on tiles, an implicit SSM as a hybrid. For every
chip (`variation.chip_seed`) the model is placed once; for every seed it is loaded (programming
draws) and run on all inputs, sample indices keying the noise so that results do not depend on the
batch or on how the runs are shared among processes. The exact path is the same for every chip and
seed. Each run's `Activity` is what the machine did; it is priced here, once (aocsim.hardware.physics
.energy). See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import inspect
import json
import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import xarray as xr

from aocsim._checks import integer, short
from aocsim.errors import InputError
from aocsim.execute.registry import Placed, resolve, resolve_profile
from aocsim.experiments.results import ACTIVITY, comparison_dataset, is_regression, nll_bits, predictions
from aocsim.hardware.physics.energy import Activity, energy_j
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.io.model_files import load_model
from aocsim.parallel import Workers, run_parts, split_rows
from aocsim.progress import bar


def _model(model: Any) -> Any:
    return load_model(model) if isinstance(model, (str, Path)) else model


def _ids(name: str, values: Any) -> list[int]:
    """A non-empty list of distinct integers >= 0 (seeds, chips)."""
    try:
        out = list(values)
    except TypeError:
        raise InputError(f"{name} = {values!r}; expected a sequence of integers >= 0") from None
    ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in out)
    if not out or not ok or len(set(out)) != len(out):
        raise InputError(f"{name} = {values!r}; expected a non-empty sequence of distinct integers >= 0")
    return [int(v) for v in out]


def compare(model: Any, device: DeviceProfile | str, inputs: torch.Tensor, targets: torch.Tensor | None = None, *,
            placement: Any = None, seeds: Sequence[int] = (0,), chips: Sequence[int] = (0,),
            calibration: Any = None, workers: int = 1, progress: bool = False) -> xr.Dataset:
    """Run `model` on `device` and on its exact path; per chip, seed and sample (and position).

    Args:
        model: a loaded DEQ or implicit SSM, a bundled model name or a model directory.
        device: a profile name or `DeviceProfile`.
        inputs: a DEQ's inputs [B, input_size] (digits: pixel / 16), or token ids [B, L].
        targets: class ids [B] or [B, L] (adds `correct`), a regression's values [B] or [B, 1] (adds
            `squared_error`), or None.
        placement: an `aocsim.execute.Placement` (or a mapping of its options): how the model goes onto
            the device; None = its kind's defaults. An option that does not apply to the model's kind
            is a one-line error.
        seeds: keys of each weight load's programming draws and of its inferences' noise.
        chips: values of `variation.chip_seed` (one placement each).
        calibration: inputs whose exact-path values the placement fits and calibrates on (default: the
            model's task's, aocsim.experiments.workloads).
        workers: cores for the device runs (`aocsim.parallel.run_parts`). A kind that runs its weight loads as
            one batch (an SSM in sequential mode) runs every chip and seed of a part as one batch (a part per
            worker, more where a batch would pass `STACK_ROWS` rows); the results depend on the workers only
            in statistics (a batch's rounding: docs/DEVICE_RUNS.md, "A compare's chips and seeds run as one
            batch").
        progress: a progress bar over the runs.

    Returns:
        Dataset with dims path ("exact", "device"), chip, seed, sample (and position for sequence
        models): `prediction` (a class; a regression's output value), `correct` (`squared_error` for a regression), `iterations`, `status` (`SolveStatus` values), `residual`,
        `hardware_time_s` (NaN on the exact path); over chip, seed, sample: `agreement` (device
        prediction == exact; a regression: `output_error`, device - exact), `fixed_point_error`, the machine's activity (conversions, digital
        operations, round trips, weight loads) and `energy_j`; `residual_trace` per iteration.
        Attributes: the placement, provenance.

    Example:
        >>> w = default_workload(load_model("digits-deq48"))
        >>> ds = compare("digits-deq48", "aoc48", w.inputs, w.targets, seeds=(0, 1))
        >>> float(ds.agreement.mean())
    """
    return compare_all([dict(model=model, device=device, inputs=inputs, targets=targets, placement=placement,
                             seeds=seeds, chips=chips, calibration=calibration)], workers=workers, progress=progress)[0]


@dataclass
class _Plan:
    """One model's compare up to its device runs: what `compare` resolved and computed, and its parts."""

    placed: Any
    model: Any
    base: DeviceProfile
    inputs: torch.Tensor
    targets: torch.Tensor | None
    seeds: list[int]
    chips: list[int]
    where: list[tuple[tuple[int, ...], slice]]  # each part's chips (indices) and seeds
    calibration: Any
    exact: Any = None
    prepared: Any = None

    def predictions(self, k: int) -> int:
        """Part k's predictions (seeds x samples x positions): its rough cost, to hand the longest out first."""
        chips, s = self.where[k]
        return len(chips) * (s.stop - s.start) * math.prod(self.inputs.shape[:len(self.placed.cls.dims)])

    def parts(self) -> list[tuple[Any, ...]]:
        """`chip_runs`'s arguments for every part."""
        p = self.placed
        return [(p, self.model, [resolve_profile(self.base, self.chips[ci]) for ci in chips], self.prepared,
                 self.inputs, self.exact.z, [self.seeds[i] for i in range(s.start, s.stop)], self.targets)
                for chips, s in self.where]


def _plan(model: Any, device: DeviceProfile | str, inputs: torch.Tensor, targets: torch.Tensor | None = None, *,
          placement: Any = None, seeds: Sequence[int] = (0,), chips: Sequence[int] = (0,), calibration: Any = None,
          workers: int = 1, split: bool = True) -> _Plan:
    """A compare's arguments checked and its parts chosen (one-line errors before any work); `split`:
    whether a chip's seeds may be split over parts to keep the workers busy (no need where other models'
    parts run beside them: `compare_all`)."""
    m = _model(model)
    base = resolve_profile(device)
    placed = resolve(m, base, placement)
    x, y = placed.cls.check_inputs(m, inputs, targets)
    seed_ids, chip_ids = _ids("seeds", seeds), _ids("chips", chips)
    return _Plan(placed, m, base, x, y, seed_ids, chip_ids,
                 _parts(len(chip_ids), len(seed_ids), workers, split=split, stacked=placed.stacks(), rows=len(x)),
                 calibration)


def compare_all(jobs: Sequence[dict[str, Any]], *, workers: int | Workers = 1, progress: bool = False
                ) -> list[xr.Dataset]:
    """`compare` for several models (`jobs`: each one's keyword arguments), their runs shared out on
    the same `workers` cores at once (a count, or `aocsim.parallel.Workers` already started), longest
    first (so that one model's last parts run beside another's instead of leaving cores idle); each
    Dataset is what `compare` alone gives."""
    from aocsim.experiments.workloads import default_calibration

    given = workers if isinstance(workers, Workers) else None
    count = given.workers if given is not None else integer(workers, "workers", minimum=1)
    known = set(inspect.signature(compare).parameters) - {"workers", "progress"}
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping) or not {"model", "device", "inputs"} <= set(job) or set(job) - known:
            extra = sorted(set(job) - known) if isinstance(job, Mapping) else []
            raise InputError(f"jobs[{i}] = {short(job)}{f' has {extra}' if extra else ''}; expected a mapping of "
                             f"compare's arguments with model, device and inputs (of {sorted(known)})")
    plans = [_plan(**job, workers=count, split=len(jobs) == 1) for job in jobs]
    # the spawned workers start now, so that their start-up overlaps the preparation and the exact paths
    with (nullcontext(given) if given is not None else
          Workers(min(count, sum(len(p.where) for p in plans)), warm=warm_worker)) as pool:
        with pool.alongside():  # the spawned workers start on the other cores meanwhile
            for plan in plans:
                m, placed = plan.model, plan.placed
                plan.prepared = placed.cls.prepare(m, default_calibration(m) if plan.calibration is None
                                                   else plan.calibration, placed.placement)
                plan.exact = placed.cls.exact(m, plan.inputs, placed.placement)
        every = [(j, k, part) for j, plan in enumerate(plans) for k, part in enumerate(plan.parts())]
        every.sort(key=lambda e: -plans[e[0]].predictions(e[1]))  # stable: each plan's own order kept
        runs: list[dict[int, list[list[dict[str, Any]]]]] = [{} for _ in plans]
        done = run_parts(chip_runs, [part for _, _, part in every], pool)
        size = [len(plans[j].where[k][0]) * (plans[j].where[k][1].stop - plans[j].where[k][1].start)
                for j, k, _ in every]  # a part's runs: its chips x its seeds
        for i, per_chip in bar(done, desc="compare runs (chip x seed)", total=sum(size), enabled=progress,
                               weight=lambda item: size[item[0]]):
            j, k, _ = every[i]
            runs[j][k] = per_chip
    return [_dataset(plan, runs[j]) for j, plan in enumerate(plans)]


def _dataset(plan: _Plan, runs: dict[int, list[list[dict[str, Any]]]]) -> xr.Dataset:
    """A compare's Dataset from its parts' runs (`chip_runs`, by part: per chip, per seed)."""
    placed, x = plan.placed, plan.inputs
    shape = (len(plan.chips), len(plan.seeds), *x.shape[:len(placed.cls.dims)])
    device: dict[str, np.ndarray] = {}
    traces: dict[tuple[int, int], np.ndarray] = {}
    program_error = 0.0  # the worst chip's tile programs (models on tiles)
    overrides = ["{}"] * len(plan.chips)  # what each chip's runs used beside the base profile
    for i, per_chip in runs.items():
        chips, s = plan.where[i]
        for ci, per_seed in zip(chips, per_chip):  # each run is keyed by its chip and seed alone
            for si, run in zip(range(s.start, s.stop), per_seed):
                program_error = max(program_error, run.pop("program_error"))
                overrides[ci] = run.pop("run_overrides")
                trace = run.pop("trace")
                if trace is not None:
                    traces[ci, si] = trace
                for name, values in run.items():
                    device.setdefault(name, np.zeros(shape, dtype=values.dtype))[ci, si] = values
    lit, modules = int(device.pop("channels").max()), int(device.pop("modules").max())
    activity = Activity(**{name: device.pop(name) for name in ACTIVITY}, channels=lit or None, modules=modules)
    device["energy_j"] = np.asarray(energy_j(plan.base, activity)["total"])
    return comparison_dataset(placed, plan.model, plan.base, plan.exact, device, activity, traces, plan.targets,
                              plan.seeds, plan.chips, program_error=program_error, run_overrides=overrides)


def warm_worker() -> None:
    """A spawned worker's imports, done while the caller prepares (`aocsim.parallel.Workers`)."""
    import aocsim.execute.registry  # noqa: F401 - the placed-model classes and their engine


# The most batch rows (chips x seeds x sequences) a stacked part runs at once: a run keeps every row's
# residual trace (float64, per position and iteration: 4096 rows of 256 tokens x 30 iterations, 250 MB).
STACK_ROWS = 4096


def _parts(chips: int, seeds: int, workers: int, split: bool = True, stacked: bool = False, rows: int = 1
           ) -> list[tuple[tuple[int, ...], slice]]:
    """The runs shared out as (chips, seeds), longest first. A kind that runs its loads as one batch
    (`stacked`; `rows`: the rows of one run) runs every chip and seed of a part as one batch: a part per
    worker (contiguous chips, so that their fits run side by side), and as many more as keep a part within
    `STACK_ROWS` rows (a chip's seeds stay together). Otherwise a part per chip while the chips fill whole rounds of
    the workers (each chip placed once: a placement fits its tile programs and measures its emitters,
    seconds to a minute), then the chips left over split into pieces of their seeds, so that the last
    round keeps every core busy (a split chip is placed once per piece); without `split` a part per chip."""
    if stacked:
        least = -(-chips // max(1, STACK_ROWS // (seeds * rows)))  # parts within STACK_ROWS
        return [(tuple(range(c.start, c.stop)), slice(0, seeds))
                for c in split_rows(chips, max(workers, least))]
    whole = chips - chips % workers if workers > 1 and split else chips
    rest = chips - whole
    pieces = 1 if rest == 0 else min(seeds, -(-workers // rest))
    return ([((ci,), slice(0, seeds)) for ci in range(whole)]
            + [((ci,), s) for ci in range(whole, chips) for s in split_rows(seeds, pieces)])


def chip_runs(resolved: Placed, model: Any, profiles: list[DeviceProfile], prepared: Any, x: torch.Tensor,
              exact_z: torch.Tensor, seeds: list[int], targets: torch.Tensor | None = None
              ) -> list[list[dict[str, Any]]]:
    """A part's chips: the model placed once per chip (`Placed.build`: the kind, with noise injection where
    the placement asks for it), then every chip run with every seed, as one batch where the kind runs its
    loads so (`run_population`: every chip's and seed's loads stacked); what `compare` records per chip and
    run, as numpy arrays (a module-level function so that `aocsim.parallel.run_parts` can run it elsewhere)."""
    built = [resolved.build(model, profile, prepared) for profile in profiles]
    results = (resolved.cls.run_population(built, x, [seeds] * len(built)) if len(built) > 1
               else [built[0].run_seeds(x, seeds)])
    return [record_runs(resolved.cls, placed, runs, exact_z,
                        json.dumps(placed.run_overrides(), sort_keys=True, default=str), targets)  # the chip's
            for placed, runs in zip(built, results)]


def record_runs(cls: Any, placed: Any, runs: list[Any], exact_z: torch.Tensor, overrides: str,
                targets: torch.Tensor | None) -> list[dict[str, Any]]:
    """What `compare` records of each of one chip's runs (`Run`s of `placed`), as numpy arrays."""
    out = []
    for run in runs:
        solve, act = run.solve, run.activity
        one: dict[str, Any] = {
            "prediction": predictions(run.outputs), "iterations": solve.iterations.numpy(),
            "status": solve.status.numpy(), "residual": getattr(solve, cls.residual).double().numpy(),
            "fixed_point_error": ((run.z - exact_z).norm(dim=-1) / exact_z.norm(dim=-1)).double().numpy(),
            "trace": None if run.trace is None else run.trace.double().numpy()}
        if targets is not None and not is_regression(run.outputs):
            one["nll_bits"] = nll_bits(run.outputs, targets)
        for name in ACTIVITY:
            one[name] = np.broadcast_to(np.asarray(getattr(act, name), dtype=np.float64), one["iterations"].shape)
        one["channels"] = np.full(one["iterations"].shape, act.channels or 0, dtype=np.int64)
        one["modules"] = np.full(one["iterations"].shape, act.modules or 1, dtype=np.int64)
        one["program_error"] = float(placed.program_error)
        one["run_overrides"] = overrides
        out.append(one)
    return out
