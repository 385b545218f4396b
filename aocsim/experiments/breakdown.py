"""Where it breaks: device accuracy against the noise multiplier and the SLM's bits.

For each workload (a model with its inputs and `compare` options) and each setting of one axis,
the other at the profile's value, `where_it_breaks` runs `aocsim.compare` on the overridden
profile and keeps, per chip and seed, the device accuracy, the agreement with the exact path and
the device's iterations (a regression: its mean squared error). A model breaks at the first
setting, going from the profile's toward worse hardware (more noise, fewer bits), where its mean
device accuracy falls more than `BREAK_POINTS` percentage points below its exact accuracy (the
tolerance of issue 9's A5 bar); a regression where its mean device error exceeds `BREAK_FACTOR`
times its exact error.
The study and its figures: docs/DEVICE_RUNS.md, section 4.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.metrics import METRICS, point_metrics
from aocsim.progress import bar

MULTIPLIERS = (1.0, 2.0, 4.0, 16.0, 64.0)  # scale of every per-iteration noise source (noise.multiplier)
SLM_BITS = (2, 3, 4, 5, 6, 7, 8, 9)  # the SLM's weight resolution (slm.bits)
BREAK_POINTS = 2.0  # percentage points below the exact accuracy that count as broken
BREAK_FACTOR = 2.0  # a regression: device mean squared error above this multiple of the exact one
AXES = {"multiplier": "noise.multiplier", "bits": "slm.bits"}
# The metrics kept per run (aocsim/experiments/metrics.py reduces each, where a Dataset has what it reads).
REDUCED = ("accuracy", "exact_accuracy", "agreement", "iterations", "mse", "exact_mse")


@dataclass(frozen=True)
class Case:
    """A model of the study, what it runs on and how it is placed: `compare(model, device, inputs, targets,
    placement=placement)` (inputs, targets and calibration from aocsim.experiments.workloads)."""

    name: str
    model: Any
    inputs: Any
    targets: Any
    placement: dict[str, Any] = field(default_factory=dict)


def default_workloads(*, sequences: int = 16, length_factor: int = 4, a5: bool = True) -> list[Case]:
    """The study's models on their default workloads (`workloads.default_workload`): the digits DEQ on its
    test set; parity-implicit and (with `a5`) a5-implicit on `sequences` fresh sequences at `length_factor`
    x their training length in sequential mode. A5 runs with its injection digital (a token's injection
    is a table lookup; on tiles its error is never iterated away: docs/DEVICE_RUNS.md, section 3)."""
    from aocsim.experiments.workloads import default_workload
    from aocsim.io.model_files import load_model

    out = []
    for name, placement in (("digits-deq48", {}), ("parity-implicit", {"mode": "sequential"}),
                            ("a5-implicit", {"mode": "sequential", "on_tiles": ("in_proj", "out_proj")})):
        if name == "a5-implicit" and not a5:
            continue
        model = load_model(name)
        w = default_workload(model, sequences=sequences, length_factor=length_factor)
        out.append(Case(name, model, w.inputs, w.targets, placement))
    return out


def _settings(name: str, values: Iterable[Any], kind: type) -> list[Any]:
    try:
        out = [kind(v) for v in values]
    except (TypeError, ValueError):
        raise InputError(f"{name} = {values!r}; expected a sequence of numbers") from None
    if kind is int and any(float(v) != int(v) for v in values):  # 4.5 bits is not 4 bits
        raise InputError(f"{name} = {values!r}; expected whole numbers")
    if not out or len(set(out)) != len(out):
        raise InputError(f"{name} = {values!r}; expected a non-empty sequence of distinct values")
    return out


def where_it_breaks(workloads: Sequence[Case], device: str = "aoc48", *,
                    multipliers: Iterable[float] = MULTIPLIERS, slm_bits: Iterable[int] = SLM_BITS,
                    seeds: Sequence[int] = (0,), chips: Sequence[int] = (0,), progress: bool = True) -> xr.Dataset:
    """Run every workload at every noise multiplier (SLM bits at the profile's) and every SLM
    resolution (noise at the profile's); see the module docstring.

    Returns a Dataset with dims model, multiplier, bits, chip, seed and variables
    `{multiplier,bits}_{accuracy,agreement,iterations,mse}` (per run; accuracy and agreement as
    fractions, per sample or per token; mse for regressions, the others' NaN where they do not
    apply), `exact_accuracy` and `exact_mse` [model] and `breaks_at_multiplier`,
    `breaks_at_bits` [model] (NaN: does not break within the range).
    """
    from aocsim.experiments.compare import _ids, compare
    from aocsim.hardware.profiles.profile import load_device

    if not workloads:
        raise InputError("workloads is empty; expected at least one breakdown.Case")
    if not isinstance(device, str):
        raise InputError(f"device = {device!r}; expected a profile name (its values are overridden per setting)")
    axes = {"multiplier": _settings("multipliers", multipliers, float), "bits": _settings("slm_bits", slm_bits, int)}
    seeds, chips = _ids("seeds", seeds), _ids("chips", chips)
    names = [w.name for w in workloads]
    shape = (len(workloads), len(chips), len(seeds))
    data: dict[str, Any] = {}
    exact, exact_mse = np.full(len(workloads), np.nan), np.full(len(workloads), np.nan)
    for axis, values in axes.items():
        for what in ("accuracy", "agreement", "iterations", "mse"):
            data[f"{axis}_{what}"] = np.full((shape[0], len(values), *shape[1:]), np.nan)
    work = [(i, w, axis, v) for i, w in enumerate(workloads) for axis, values in axes.items() for v in values]
    for i, w, axis, v in bar(work, desc="where it breaks", total=len(work), enabled=progress):
        profile = load_device(device, overrides={AXES[axis]: v})
        ds = compare(w.model, profile, w.inputs, w.targets, placement=w.placement, seeds=seeds, chips=chips)
        k = axes[axis].index(v)
        m = point_metrics(ds, tuple(name for name in REDUCED if METRICS[name].available(ds)))  # the registry's
        for what, name in (("accuracy", "accuracy"), ("agreement", "agreement"), ("iterations", "iterations"),
                           ("mse", "mse")):
            if name in m:
                data[f"{axis}_{what}"][i, k] = m[name].values
        if "exact_accuracy" in m:
            exact[i] = float(m.exact_accuracy.isel(chip=0, seed=0))
        if "exact_mse" in m:
            exact_mse[i] = float(m.exact_mse.isel(chip=0, seed=0))
    dims = {"multiplier": ("model", "multiplier", "chip", "seed"), "bits": ("model", "bits", "chip", "seed")}
    out = xr.Dataset(
        {name: (dims[name.split("_")[0]], values) for name, values in data.items()}
        | {"exact_accuracy": ("model", exact), "exact_mse": ("model", exact_mse)},
        coords={"model": names, "multiplier": axes["multiplier"], "bits": axes["bits"], "chip": chips, "seed": seeds},
        attrs={"device": device, "break_points": BREAK_POINTS, "break_factor": BREAK_FACTOR,
               "description": "device accuracy, agreement and iterations against noise.multiplier and slm.bits "
                              "(docs/DEVICE_RUNS.md, section 4)"})
    out["breaks_at_multiplier"] = ("model", [_break(out, m, "multiplier", ascending=True) for m in names])
    out["breaks_at_bits"] = ("model", [_break(out, m, "bits", ascending=False) for m in names])
    return out


def _break(ds: xr.Dataset, model: str, axis: str, *, ascending: bool) -> float:
    """The first setting, from the best hardware toward the worst, where the mean device accuracy is more
    than BREAK_POINTS below the exact one (a regression: its mean squared error above BREAK_FACTOR times the
    exact one); for bits, the highest such resolution. NaN if none."""
    regression = "exact_mse" in ds and np.isfinite(float(ds.exact_mse.sel(model=model)))
    what = "mse" if regression else "accuracy"
    exact = float(ds[f"exact_{what}"].sel(model=model))
    score = ds[f"{axis}_{what}"].sel(model=model).mean(("chip", "seed"))
    values = sorted(ds[axis].values.tolist(), reverse=not ascending)
    for v in values:
        s = float(score.sel({axis: v}))
        if (s > BREAK_FACTOR * exact) if regression else (s < exact - BREAK_POINTS / 100):
            return float(v)
    return float("nan")


def _regression(ds: xr.Dataset, model: str) -> bool:
    return "exact_mse" in ds and bool(np.isfinite(float(ds.exact_mse.sel(model=model))))


def _scores(ds: xr.Dataset, model: str, axis: str) -> tuple[xr.DataArray, float]:
    """A model's score per run along `axis` and its exact value: the accuracy, or a regression's device
    mean squared error over its exact one (1: as good as the exact path)."""
    if _regression(ds, model):
        exact = float(ds.exact_mse.sel(model=model))
        return ds[f"{axis}_mse"].sel(model=model) / exact, exact
    return ds[f"{axis}_accuracy"].sel(model=model), float(ds.exact_accuracy.sel(model=model))


def breakdown_table(ds: xr.Dataset) -> str:
    """Plain-text table: per model the exact accuracy, the device accuracy at each setting (mean over
    runs) and where it breaks; a regression's rows give its exact mean squared error and the device's
    over it."""
    lines = []
    for axis, label in (("multiplier", "noise multiplier"), ("bits", "SLM bits")):
        values = ds[axis].values.tolist()
        head = f"{'model':18s} {'exact':>7s} " + " ".join(f"{_fmt(v):>7s}" for v in values) + "  breaks"
        lines += [f"device accuracy (a regression: device mse / exact mse) against the {label} "
                  f"({ds.attrs['device']}, mean over runs)", head]
        for m in ds.model.values.tolist():
            score, exact = _scores(ds, m, axis)
            where = float(ds["breaks_at_multiplier" if axis == "multiplier" else "breaks_at_bits"].sel(model=m))
            edge = "-" if np.isnan(where) else (f"at {_fmt(where)}x" if axis == "multiplier" else f"at {int(where)} bits")
            first = f"{exact:7.1e}" if _regression(ds, m) else f"{exact:7.4f}"
            lines.append(f"{m:18s} {first} " + " ".join(f"{a:7.4f}" for a in score.mean(("chip", "seed")).values)
                         + f"  {edge}")
        lines.append("")
    return "\n".join(lines).rstrip()


def _fmt(v: float) -> str:
    return f"{v:g}"


def plot_breakdown(ds: xr.Dataset, path: str | Path) -> Path:
    """Two panels: device accuracy against the noise multiplier (log axis) and against SLM bits, one line
    per model (mean over runs, band min-max), its exact accuracy dashed; regressions in a second row,
    their device mean squared error over the exact one (log axis; dashed: 1 and the break factor)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = ds.model.values.tolist()
    groups = [g for g in ([m for m in models if not _regression(ds, m)], [m for m in models if _regression(ds, m)]) if g]
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 4 * len(groups)), sharey="row", squeeze=False)
    for row, group in zip(axes, groups):
        regression = _regression(ds, group[0])
        for ax, axis, label in ((row[0], "multiplier", "noise multiplier (x the profile's noise)"),
                                (row[1], "bits", "SLM bits")):
            x = ds[axis].values
            for m in group:
                score, exact = _scores(ds, m, axis)
                mean, lo, hi = (score.mean(("chip", "seed")), score.min(("chip", "seed")), score.max(("chip", "seed")))
                color = f"C{models.index(m)}"
                ax.plot(x, mean, "o-", color=color, label=m)
                ax.fill_between(x, lo, hi, color=color, alpha=0.2)
                for level in ((1.0, BREAK_FACTOR) if regression else (exact,)):
                    ax.axhline(level, color="k" if regression else color, ls="--", lw=0.8)
            ax.set_xlabel(label)
            if axis == "multiplier":
                ax.set_xscale("log", base=2)
            if regression:
                ax.set_yscale("log")
            ax.set_xticks(x, [f"{v:g}" for v in x])
            ax.minorticks_off()
        row[0].set_ylabel(f"device mse / exact mse ({ds.attrs['device']})" if regression else
                          f"device accuracy ({ds.attrs['device']}); dashed: exact")
        row[0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is created (aocsim/io/outputs.py)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
