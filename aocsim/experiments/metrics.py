"""Every metric a sweep, a search, a table or a plot can name, declared once.

A `Metric` holds what each reader needs: how it is reduced from a `compare` Dataset to one value per
chip and seed (`reduce`, for sweep points and search trials), its unit and the range of its values
(a search's constraints are checked against it before any work), whether more is better (a search's
objective direction), its words for table columns and plot axes, which models have it (`task`), and
its definition (the Dataset's `description`). `aocsim.experiments.sweep` (spec, points, tables,
labels, plots) and the search read `METRICS`; nothing else lists metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from aocsim.execute.placement import MODULES

if TYPE_CHECKING:  # numpy, xarray and torch are imported where a metric is computed: `--help` stays fast
    import xarray as xr

Reducer = Callable[["xr.Dataset", list], "xr.DataArray"]  # (compare Dataset, the per-run dims) -> [chip, seed]


@dataclass(frozen=True)
class Metric:
    """One metric of a point (mean over its samples or tokens unless said), per chip and seed."""

    name: str
    definition: str
    words: str  # a plot axis: "device accuracy"
    column: str  # a table's column: "accuracy"
    unit: str  # "" for a fraction or a count; "s", "J", "bits"
    reduce: Reducer
    share: bool = False  # a fraction, printed and plotted in %
    low: float = 0.0  # the range its values can take
    high: float = math.inf
    better: str | None = None  # "max" or "min": which way a search should push it
    task: str = "any"  # "any", "classes" (answers are classes), "language", "regression"
    default: bool = True  # in a sweep's metrics when the spec names none
    needs: str = ""  # the compare Dataset variable `reduce` reads ("" : one every Dataset has)

    def available(self, ds: xr.Dataset) -> bool:
        """Whether a compare Dataset has what this metric reads (a regression has no `correct`)."""
        return not self.needs or self.needs in ds

    def describe_range(self) -> str:
        """'a fraction in [0, 1] (tables print it in %)', 'a value >= 0 (J)'."""
        if self.share:
            return "a fraction in [0, 1] (tables print it in %)"
        unit = f" ({self.unit})" if self.unit else ""
        if math.isinf(self.high):
            return f"a value >= {self.low:g}{unit}"
        return f"a value in [{self.low:g}, {self.high:g}]{unit}"


def inference_unit(ds: xr.Dataset) -> str:
    """What one inference of the Dataset is: a language model's character, a sequence model's token, a
    DEQ's sample."""
    if "position" not in ds.dims:
        return "sample"
    return "character" if ds.attrs.get("task") == "language" else "token"


def is_explicit(ds: xr.Dataset) -> bool:
    """An explicit model (`implicit=False`): one pass of its map per token, no fixed point to solve."""
    return int(ds.attrs.get("implicit", 1)) == 0


def _device(ds: xr.Dataset) -> xr.Dataset:
    return ds.sel(path="device")


def _exact(ds: xr.Dataset) -> xr.Dataset:
    return ds.sel(path="exact")


def _converged(ds: xr.Dataset, per_run: list) -> xr.DataArray:
    from aocsim.solve.result import SolveStatus

    status = _device(ds).status
    return status.isin([SolveStatus.CONVERGED.value, SolveStatus.NOISE_FLOOR.value]).mean(per_run)


def _utilisation(ds: xr.Dataset, per_run: list) -> xr.DataArray:
    """Busy module-seconds over powered module-seconds, pooled over the run's samples (tokens)."""
    powered = ds.attrs.get("modules", 1) * _device(ds).hardware_time_s
    return ds.busy_s.sum(per_run) / powered.sum(per_run).where(powered.sum(per_run) > 0)


def _modules(ds: xr.Dataset, per_run: list) -> xr.DataArray:
    import numpy as np
    import xarray as xr

    return xr.full_like(ds.fixed_point_error.mean(per_run), ds.attrs.get("modules", 1), dtype=np.float64)


_DECLARED = (
    Metric("accuracy", "device accuracy (fraction; per sample, or per token for sequence models)",
           "device accuracy", "accuracy", "", lambda ds, r: _device(ds).correct.mean(r), share=True, high=1.0,
           better="max", task="classes", needs="correct"),
    Metric("exact_accuracy", "accuracy of the exact path (the same at every chip and seed)", "exact-path accuracy",
           "exact accuracy", "", lambda ds, r: _exact(ds).correct.mean(r), share=True, high=1.0, better="max",
           task="classes", needs="correct"),
    Metric("agreement", "fraction of device predictions equal to the exact ones", "agreement with the exact path",
           "agreement", "", lambda ds, r: ds.agreement.mean(r), share=True, high=1.0, better="max", task="classes",
           needs="agreement"),
    Metric("iterations", "mean device iterations per sample (per token)", "device iterations per inference",
           "iterations", "", lambda ds, r: _device(ds).iterations.mean(r), better="min"),
    Metric("converged", "fraction of device solves that met the tolerance or settled at the noise floor",
           "solves converged", "converged", "", _converged, share=True, high=1.0, better="max"),
    Metric("fixed_point_error", "median ||z_device - z_exact|| / ||z_exact||", "fixed-point error (median)",
           "fixed-point error", "", lambda ds, r: ds.fixed_point_error.median(r), better="min"),
    Metric("residual", "median device residual at the end of each solve (the Dataset's units)",
           "device residual (median)", "residual", "", lambda ds, r: _device(ds).residual.median(r), better="min"),
    Metric("time_per_inference_s", "mean hardware time per sample (per token), s", "hardware time per inference",
           "time", "s", lambda ds, r: _device(ds).hardware_time_s.mean(r), better="min"),
    Metric("energy_per_inference_j", "mean energy per sample (per token), J (docs/PHYSICS.md section 6)",
           "energy per inference", "energy", "J", lambda ds, r: ds.energy_j.mean(r), better="min"),
    Metric("modules", f"{MODULES}: the placement option's value, else one per tile of every map (docs/PHYSICS.md "
                      "section 6)",
           "optical modules", "modules", "", _modules, low=1.0, better="min"),
    Metric("module_utilisation", "busy module-seconds (a module running a pass) over the powered modules' "
                                 "time; the rest idle at energy.idle_power_fraction (docs/PHYSICS.md section 6)",
           "module utilisation", "utilisation", "", _utilisation, share=True, high=1.0, better="max",
           default=False, needs="busy_s"),
    Metric("weight_loads_per_inference",
           "mean SLM weight loads per sample (per token): a time-multiplexed machine's reloads",
           "weight loads per inference", "weight loads", "", lambda ds, r: ds.weight_loads.mean(r), better="min",
           needs="weight_loads"),
    Metric("bits_per_character", "language models: mean -log2 p(target) of the device's next-character outputs, bits",
           "device bits per character", "bits per character", "bits", lambda ds, r: _device(ds).nll_bits.mean(r),
           better="min", task="language", default=False, needs="nll_bits"),
    Metric("exact_bits_per_character", "language models: the same on the exact path", "exact bits per character",
           "exact bits per character", "bits", lambda ds, r: _exact(ds).nll_bits.mean(r), better="min",
           task="language", default=False, needs="nll_bits"),
    Metric("mse", "regressions: the device's mean squared error against the targets", "device mean squared error",
           "mse", "", lambda ds, r: _device(ds).squared_error.mean(r), better="min", task="regression",
           default=False, needs="squared_error"),
    Metric("exact_mse", "regressions: the same on the exact path", "exact-path mean squared error", "exact mse", "",
           lambda ds, r: _exact(ds).squared_error.mean(r), better="min", task="regression", default=False,
           needs="squared_error"),
    Metric("output_rms", "regressions: root mean square of the device's output - the exact path's",
           "device output error (rms)", "output rms", "", lambda ds, r: ((ds.output_error ** 2).mean(r)) ** 0.5,
           better="min", task="regression", default=False, needs="output_error"),
)
METRICS: dict[str, Metric] = {m.name: m for m in _DECLARED}
# Short names for the cost metrics, as a co-design question says them (a spec, `sweep show --metric`).
ALIASES = {"energy_j": "energy_per_inference_j", "time_s": "time_per_inference_s"}


def resolve(name: str) -> str:
    """A metric's name from its name or alias (unknown names are returned as given)."""
    return ALIASES.get(name, name) if isinstance(name, str) else name


def point_metrics(ds: xr.Dataset, names: tuple[str, ...]) -> xr.Dataset:
    """Per chip and seed: the metrics `names` of a `compare` Dataset, each reduced by its declaration, with
    its unit."""
    import numpy as np
    import xarray as xr

    per_run = [d for d in ("sample", "position") if d in ds.dims]
    out = {}
    for name in names:
        metric = METRICS[name]
        value = metric.reduce(ds, per_run).astype(np.float64).drop_vars("path", errors="ignore")
        value.attrs = {"units": units_attribute(metric, ds)}
        out[name] = value
    return xr.Dataset(out).transpose("chip", "seed")


def units_attribute(metric: Metric, ds: xr.Dataset | None = None) -> str:
    """The CF `units` of a metric's variable: its unit, the residual's own units, or "1" (dimensionless)."""
    if metric.name == "residual" and ds is not None and "residual" in ds:
        return str(ds.residual.attrs.get("units", "1")) or "1"
    return metric.unit or "1"
