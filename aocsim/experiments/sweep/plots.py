"""Figures of a sweep's Dataset: a metric against one axis (mean over chips and seeds, a band of their
spread), a heat map over two axes, and the Pareto front of accuracy against energy or time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from aocsim.errors import InputError

RUN_DIMS = ("chip", "seed")
COSTS = {"energy": ("energy_per_inference_j", "energy per inference (J)"),
         "time": ("time_per_inference_s", "hardware time per inference (s)")}


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


def plot_sweep(ds: xr.Dataset, path: str | Path, *, metric: str | None = None) -> Path:
    """One axis: the metric per model against it, a band of +-1 std over chips x seeds; two or more: a
    heat map over the first two (mean over chips, seeds and any further axes) per model. `metric`
    defaults to accuracy, or the first metric of the results when they have none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v for v in ds.data_vars if set(RUN_DIMS) <= set(ds[v].dims)]
    if metric is None:
        metric = "accuracy" if "accuracy" in names else names[0]
    if metric not in names:
        raise InputError(f"metric = {metric!r} is not in the results; expected one of {', '.join(names)}")
    da, axes = ds[metric], _axes(ds)
    units = da.attrs.get("units", "")
    label = f"{metric} ({units})" if units else metric
    models = list(ds.model.values)
    if len(axes) >= 2:
        fig, grid = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
        for ax, model in zip(grid[0], models):
            mean = da.sel(model=model).mean([*RUN_DIMS, *axes[2:]]).transpose(axes[0], axes[1])
            (xname, xs), (yname, ys) = _coordinate(ds, axes[1]), _coordinate(ds, axes[0])
            image = ax.imshow(mean.values, origin="lower", aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(xs)), [f"{v:.3g}" if isinstance(v, float) else str(v) for v in xs])
            ax.set_yticks(range(len(ys)), [f"{v:.3g}" if isinstance(v, float) else str(v) for v in ys])
            ax.set_xlabel(xname)
            ax.set_ylabel(yname)
            ax.set_title(str(model))
            fig.colorbar(image, ax=ax, label=label)
    else:
        fig, ax = plt.subplots(figsize=(6, 4))
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
                ax.plot(xs, m, marker="o", label=str(model))
                ax.fill_between(xs, m - s, m + s, alpha=0.25)
                ax.set_xlabel(xname)
                if numeric and np.all(xs > 0) and xs.max() / xs.min() > 50:
                    ax.set_xscale("log")
            else:
                ax.errorbar([str(model)], [float(mean)], yerr=[float(std)], fmt="o")
        ax.set_ylabel(label)
        ax.legend(title="mean +- std over chips x seeds", fontsize=8)
    fig.suptitle(f"{metric} on {ds.attrs.get('device', '?')}")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def pareto_front(cost: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats (lower or equal cost and higher or equal accuracy,
    one of them strictly), sorted by cost."""
    order = np.lexsort((-accuracy, cost))
    front, best = [], -np.inf
    for i in order:
        if accuracy[i] > best:
            front.append(i)
            best = accuracy[i]
    return np.asarray(front, dtype=int)


def _labels(ds: xr.Dataset, da: xr.DataArray) -> list[str]:
    """Each configuration's settings, short ("16, analog"), in the order of da.values.ravel()."""
    dims = [d for d in da.dims]
    out = []
    for index in np.ndindex(*da.shape):
        parts = []
        for dim, i in zip(dims, index):
            name, values = _coordinate(ds, dim)
            value = values[i]
            parts.append(f"{value:.3g}" if isinstance(value, (float, np.floating)) else str(value))
        out.append(", ".join(parts))
    return out


def plot_pareto(ds: xr.Dataset, path: str | Path, *, cost: str = "energy") -> Path:
    """Every configuration (mean over chips x seeds) as accuracy against energy or time per inference,
    the Pareto front drawn through the ones nothing beats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if cost not in COSTS:
        raise InputError(f"cost = {cost!r}; expected one of {', '.join(COSTS)}")
    variable, xlabel = COSTS[cost]
    for needed in (variable, "accuracy"):
        if needed not in ds:
            raise InputError(f"the results have no {needed!r}; expected a sweep whose metrics include it")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model in ds.model.values:
        cost_mean = ds[variable].sel(model=model).mean(RUN_DIMS)
        c = cost_mean.values.ravel()
        a = ds.accuracy.sel(model=model).mean(RUN_DIMS).values.ravel()
        labels = _labels(ds, cost_mean)
        keep = np.flatnonzero(np.isfinite(c) & np.isfinite(a))
        c, a, labels = c[keep], a[keep], [labels[i] for i in keep]
        ax.scatter(c, a, s=14, alpha=0.5, label=f"{model}: configurations")
        front = pareto_front(c, a)
        ax.step(c[front], a[front], where="post", marker="o", label=f"{model}: Pareto front")
        if len(c) <= 30:  # few enough to name
            for x, y, text in zip(c, a, labels):
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(3, -9), fontsize=6)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy (mean over chips x seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
