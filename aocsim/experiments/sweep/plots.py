"""Figures of a sweep's Dataset: a metric against one axis (mean over chips and seeds, a band of their
spread), a heat map over two axes, and the Pareto front of accuracy against energy or time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.sweep.front import pareto_mask
from aocsim.experiments.sweep.store import untrusted_points
from aocsim.experiments.sweep.labels import (SHARES, axis_label, clamp_share, cost_axis, declutter,
                                             log_cost_ticks, metric_label, percent_axis, settings_text, untrusted,
                                             value_ticks)
from aocsim.units import prefixable

RUN_DIMS = ("chip", "seed")
COSTS = {"energy": ("energy_per_inference_j", "J"), "time": ("time_per_inference_s", "s")}  # variable, unit


def open_results(path: str | Path) -> xr.Dataset:
    """A sweep's results.nc, loaded; a one-line error for any other file."""
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds = ds.load()
    except (OSError, ValueError) as exc:
        raise InputError(f"results = {str(path)!r}: not a NetCDF file ({type(exc).__name__}); expected a sweep's "
                         "results.nc") from None
    if "spec" not in ds.attrs:
        raise InputError(f"results = {str(path)!r} is not a sweep's results (no spec attribute); expected the "
                         "results.nc that aocsim sweep writes")
    return ds


def _axes(ds: xr.Dataset) -> list[str]:
    return [d for d in ds.dims if d not in ("model", *RUN_DIMS)]


def _coordinate(ds: xr.Dataset, dim: str) -> tuple[str, np.ndarray]:
    """What to put on the x axis for `dim`: its own values, or the first parameter that varies along it."""
    names = [c for c in ds.coords if ds.coords[c].dims == (dim,) and c != dim] or ([dim] if dim in ds.coords else [])
    if not names:
        return dim, np.arange(ds.sizes[dim])
    return names[0], np.asarray(ds.coords[names[0]].values)


def _unit(path: str) -> str:
    """The profile schema's unit of a swept device key ("" for placement settings and dimensionless keys)."""
    from aocsim.hardware.profiles.schema import BY_KEY

    return BY_KEY[path].unit if path in BY_KEY else ""


def _tick_text(values: np.ndarray, unit: str) -> list[str]:
    from matplotlib.ticker import EngFormatter

    fmt = EngFormatter(unit=unit, sep=" ")
    return [fmt(float(v)) if prefixable(unit) and isinstance(v, (float, np.floating, int, np.integer)) and not isinstance(
        v, (bool, np.bool_)) else (f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)) for v in values]


def plot_sweep(ds: xr.Dataset, path: str | Path, *, metric: str | None = None) -> Path:
    """One axis: the metric per model against it, a band of +-1 std over chips x seeds; two or more: a
    heat map over the first two (mean over chips, seeds and any further axes) per model. `metric`
    defaults to accuracy, or the first metric of the results when they have none. Axes are labelled
    in words with the profile schema's units (`labels.axis_label`), fractions in %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v for v in ds.data_vars if set(RUN_DIMS) <= set(ds[v].dims)]
    if metric is None:
        metric = "accuracy" if "accuracy" in names else names[0]
    if metric not in names:
        raise InputError(f"metric = {metric!r} is not in the results; expected one of {', '.join(names)}")
    da, axes = ds[metric], _axes(ds)
    label = metric_label(metric, da.attrs.get("units", ""))
    models = list(ds.model.values)
    if len(axes) >= 2:
        fig, grid = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False)
        for ax, model in zip(grid[0], models):
            mean = da.sel(model=model).mean([*RUN_DIMS, *axes[2:]]).transpose(axes[0], axes[1])
            (xname, xs), (yname, ys) = _coordinate(ds, axes[1]), _coordinate(ds, axes[0])
            image = ax.imshow(mean.values, origin="lower", aspect="auto", cmap="viridis",
                              **({"vmin": 0.0, "vmax": 1.0} if metric in SHARES else {}))
            bad = untrusted(ds, model, [axes[0], axes[1]])
            for yi, xi in zip(*np.nonzero(bad)):
                ax.text(xi, yi, "x", color="red", ha="center", va="center", fontsize=11, fontweight="bold")
            if bad.any():
                ax.text(0.0, -0.02, "x: a point compare did not trust (WARNING)", color="red", fontsize=7,
                        transform=ax.transAxes, va="top")
            ax.set_xticks(range(len(xs)), _tick_text(xs, _unit(xname)))
            ax.set_yticks(range(len(ys)), _tick_text(ys, _unit(yname)))
            ax.set_xlabel(axis_label(xname))
            ax.set_ylabel(axis_label(yname))
            over = [a for a in axes[2:] if ds.sizes[a] > 1]
            ax.set_title(str(model) + (f"\nmean over {', '.join(over)}" if over else ""), fontsize=9)
            bar = fig.colorbar(image, ax=ax, label=label)
            if metric in SHARES:
                percent_axis(bar.ax.yaxis)
            cost_axis(bar.ax.yaxis, da.attrs.get("units", ""))
            declutter(fig, ax.xaxis, ax.yaxis)
    else:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for model in models:
            one = da.sel(model=model)
            mean, std = one.mean(RUN_DIMS), one.std(RUN_DIMS)
            if axes:
                xname, xs = _coordinate(ds, axes[0])
                numeric = xs.dtype.kind in "iuf"
                if numeric:
                    order = np.argsort(xs)
                    xs = xs[order]
                else:  # settings such as analog / digital: one position each, named
                    order = np.arange(len(xs))
                    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
                    xs = np.arange(len(xs))
                m, s = mean.transpose(axes[0]).values[order], std.transpose(axes[0]).values[order]
                low, high = (m - s, m + s) if metric not in SHARES else (np.clip(m - s, 0, 1), np.clip(m + s, 0, 1))
                ax.plot(xs, m, marker="o", label=str(model), clip_on=metric not in SHARES)
                ax.fill_between(xs, low, high, alpha=0.25)
                bad = untrusted(ds, model, [axes[0]])[order]
                if bad.any():
                    ax.plot(xs[bad], m[bad], "x", color="red", ms=10, mew=2, ls="none", clip_on=False,
                            label=f"{model}: untrusted (compare's WARNING)")
                ax.set_xlabel(axis_label(xname))
                log = bool(numeric and np.all(xs > 0) and xs.max() / xs.min() > 50)
                if log:
                    ax.set_xscale("log")
                if numeric:
                    value_ticks(ax.xaxis, xs, _unit(xname), log)
            else:
                ax.errorbar([str(model)], [float(mean)], yerr=[float(std)], fmt="o")
        ax.set_ylabel(label)
        if metric in SHARES:
            percent_axis(ax.yaxis)
            clamp_share(ax)
        cost_axis(ax.yaxis, da.attrs.get("units", ""))
        ax.grid(alpha=0.3)
        ax.legend(title="mean +- std over chips x seeds", fontsize=8, title_fontsize=8)
    fig.suptitle(f"{metric_label(metric)} on {ds.attrs.get('device', '?')}")
    fig.tight_layout()
    if len(axes) < 2:
        declutter(fig, ax.xaxis, ax.yaxis)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is created (aocsim/io/outputs.py)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def pareto_front(cost: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats (lower or equal cost and higher or equal accuracy,
    one of them strictly), one per distinct (cost, accuracy), sorted by cost (`front.pareto_mask`)."""
    on = np.flatnonzero(pareto_mask(np.stack([cost, accuracy], axis=1), ("min", "max")))
    _, first = np.unique(np.stack([cost[on], accuracy[on]], axis=1), axis=0, return_index=True)
    on = on[np.sort(first)]
    return on[np.argsort(cost[on], kind="stable")]


def plot_front(ds: xr.Dataset, path: str | Path, *, other: xr.Dataset | None = None,
               other_label: str = "grid") -> Path:
    """A search's trials (mean over chips x seeds) in its first two objectives: feasible ones as dots,
    infeasible ones as crosses, the Pareto front drawn through its trials; with `other` (a grid of the
    same budget, say) its points and front beside them, both hypervolumes up to one reference point
    (`search.against`) in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aocsim.experiments.sweep.search import against, search_of

    if "pareto" not in ds:
        raise InputError("the results hold no search (no pareto variable); expected the results.nc of a sweep with "
                         "a search block")
    search, search_ds = search_of(ds), ds
    names, compared = list(search.objectives), against(ds, other if other is not None else ds)
    # a cost (a minimised objective) along x, the other objective up: the front climbs to the right
    ix = next((i for i, m in enumerate(names) if search.objectives[m] == "min"), 0) if len(names) > 1 else None
    iy = next(i for i in range(len(names)) if i != ix)
    x_name, y_name = (names[ix] if ix is not None else "trial"), names[iy]
    runs = [("search", 0, "C3", "o")] + ([(other_label, 1, "C0", "s")] if other is not None else [])
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    for label, k, color, marker in runs:
        values, feasible, front = compared["values"][k], compared["feasible"][k], compared["front"][k]
        x = values[:, ix] if ix is not None else np.arange(len(values))
        y = values[:, iy]
        for shown, fill, words in ((compared["full"][k], color, f"{len(values)} points ({int(feasible.sum())} "
                                    "feasible)"), (~compared["full"][k], "none", "screened only (search.fidelity)")):
            if shown.any():  # screened trials hollow: scored on part of the workload, never on the front
                ax.scatter(x[feasible & shown], y[feasible & shown], s=18, alpha=0.45, facecolors=fill,
                           edgecolors=color, marker=marker, label=f"{label}: {words}")
        ax.scatter(x[~feasible], y[~feasible], s=20, marker="x", color=color, alpha=0.45)
        bad = untrusted_points(search_ds if k == 0 else other, len(values))
        if bad.any():
            ax.scatter(x[bad], y[bad], s=70, facecolors="none", edgecolors="red", linewidths=1.2,
                       label=f"{label}: untrusted (compare's WARNING; infeasible)")
        order = np.flatnonzero(front)[np.argsort(x[front], kind="stable")]
        ax.step(x[order], y[order], where="post", color=color, marker=marker, mec="black",
                label=f"{label}: Pareto front, hypervolume {compared['hypervolume'][k]:.3g}")
    ax.set_xlabel(metric_label(x_name, ds[x_name].attrs.get("units", "")) if ix is not None else "trial")
    ax.set_ylabel(metric_label(y_name, ds[y_name].attrs.get("units", "")))
    x_all = np.concatenate([v[:, ix] for v in compared["values"]]) if ix is not None else np.array([])
    x_all = x_all[np.isfinite(x_all) & (x_all > 0)]
    log = bool(len(x_all) and x_all.max() / x_all.min() > 10)
    if log:
        ax.set_xscale("log")
    for name, axis in ((x_name, ax.xaxis), (y_name, ax.yaxis)):
        unit = str(ds[name].attrs.get("units", "")) if name in ds else ""
        if name in SHARES:
            percent_axis(axis)
            clamp_share(ax, "x" if axis is ax.xaxis else "y")
        elif unit in ("J", "s") and axis is ax.xaxis and log:
            log_cost_ticks(axis, unit, x_all.max() / x_all.min())
        elif unit in ("J", "s"):
            from matplotlib.ticker import EngFormatter

            axis.set_major_formatter(EngFormatter(unit=unit, sep=" "))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="x: infeasible (a constraint fails)", title_fontsize=7)
    ref = ", ".join(f"{k} {v:.3g}" for k, v in compared["reference"].items())
    more = f"; objectives beyond two: {', '.join(names[2:])}" if len(names) > 2 else ""
    ax.set_title(f"{metric_label(y_name)} against {metric_label(x_name)} on {ds.attrs.get('device', '?')}\n"
                 f"hypervolume up to ({ref}){more}", fontsize=8)
    fig.tight_layout()
    declutter(fig, ax.xaxis, ax.yaxis)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is created (aocsim/io/outputs.py)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def _settings(ds: xr.Dataset, da: xr.DataArray) -> list[str]:
    """Each configuration's settings, named ("tile_size=16, partial_sums=analog"), in the order of
    da.values.ravel(); every parameter along a zip or draw dimension."""
    along = {}
    for dim in (d for d in da.dims if da.sizes[d] > 1):  # a single value is the same for all: in the title
        params = [c for c in ds.coords if ds.coords[c].dims == (dim,) and c != dim] or [dim]
        along[dim] = [(str(p), np.asarray(ds.coords[p].values) if p in ds.coords else np.arange(ds.sizes[dim]))
                      for p in params]
    out = []
    for index in np.ndindex(*da.shape):
        names, values = [], []
        for dim, i in zip(da.dims, index):
            for name, vals in along.get(dim, ()):
                names.append(name)
                values.append(vals[i])
        out.append(settings_text(names, values))
    return out


def plot_pareto(ds: xr.Dataset, path: str | Path, *, cost: str = "energy") -> Path:
    """Every configuration (mean over chips x seeds) as accuracy against energy or time per inference,
    the Pareto front drawn through the ones nothing beats. Each front point is named by its settings in
    the legend (outside the axes: labels never overlap each other or the data); cost ticks in SI prefixes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if cost not in COSTS:
        raise InputError(f"cost = {cost!r}; expected one of {', '.join(COSTS)}")
    variable, unit = COSTS[cost]
    for needed in (variable, "accuracy"):
        if needed not in ds:
            raise InputError(f"the results have no {needed!r}; expected a sweep whose metrics include it")
    fig, ax = plt.subplots(figsize=(10, 4.8))
    markers = "osD^vP*Xph"
    for mi, model in enumerate(ds.model.values):
        cost_mean = ds[variable].sel(model=model).mean(RUN_DIMS)
        c = cost_mean.values.ravel()
        a = ds.accuracy.sel(model=model).mean(RUN_DIMS).values.ravel()
        labels = _settings(ds, cost_mean)
        bad = untrusted(ds, model, list(cost_mean.dims)).ravel()
        keep = np.flatnonzero(np.isfinite(c) & np.isfinite(a))
        c, a, bad, labels = c[keep], a[keep], bad[keep], [labels[i] for i in keep]
        color = f"C{mi}"
        prefix = f"{model}: " if len(ds.model) > 1 else ""
        ax.scatter(c, a, s=16, alpha=0.35, color=color, label=f"{prefix}every configuration", clip_on=False)
        if bad.any():
            ax.scatter(c[bad], a[bad], s=40, marker="x", color="red", clip_on=False,
                       label=f"{prefix}untrusted (compare's WARNING; not on the front)")
        trusted = np.flatnonzero(~bad)
        front = trusted[pareto_front(c[trusted], a[trusted])]
        ax.step(c[front], a[front], where="post", color=color, lw=1.2, label=f"{prefix}Pareto front")
        for k, i in enumerate(front):
            ax.plot(c[i], a[i], markers[k % len(markers)], color=color, ms=7, mec="black", mew=0.6, ls="none",
                    label=f"{prefix}{labels[i]}")
    ax.set_xscale("log")
    low, high = ax.get_xlim()
    log_cost_ticks(ax.xaxis, unit, high / low)
    ax.set_xlabel(metric_label(variable))
    ax.set_ylabel("device accuracy (%), mean over chips x seeds")
    percent_axis(ax.yaxis)
    clamp_share(ax)
    ax.grid(alpha=0.3, which="major")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fixed = _fixed(ds)
    ax.set_title(f"accuracy against {cost} per inference on {ds.attrs.get('device', '?')}"
                 + (f" ({fixed} throughout)" if fixed else ""), fontsize=9)
    fig.tight_layout()
    declutter(fig, ax.xaxis, ax.yaxis)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is created (aocsim/io/outputs.py)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def _fixed(ds: xr.Dataset) -> str:
    """The settings of the axes with a single value ("on_tiles=in_proj,out_proj"): the same for every point."""
    single = [str(c) for c in ds.coords if ds.coords[c].ndim == 1 and ds.coords[c].dims[0] not in ("model", *RUN_DIMS)
              and ds.sizes[ds.coords[c].dims[0]] == 1]
    return settings_text(single, [ds.coords[c].values[0] for c in single])
