"""A sweep's numbers as text: a table of the metrics per point, and one metric against one axis.

`point_table` is what `aocsim sweep` prints at the end and `aocsim sweep status DIR` prints of the
points finished so far (the mean over chips and seeds of every metric; with many points the first
and the best few, saying how many are left out). `show` answers one question (`aocsim sweep show DIR
--metric M --by AXIS`): the metric's mean +- std over chips and seeds for every value of AXIS, the
other axes' values listed beside it (or fixed with `at`). `open_sweep` reads a sweep folder (its
results.nc, or the points finished so far) or a results.nc file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.metrics import METRICS, resolve
from aocsim.units import si

RUN_DIMS = ("chip", "seed")
PREFIXED = ("s", "J")  # units printed with an SI prefix chosen per value (aocsim.units.si)
TRUST_WORDS = {1: "yes", 0: "NO", -1: "?"}  # the `trusted` column: compare's verdict on the point


def open_sweep(path: str | Path) -> xr.Dataset:
    """A sweep's Dataset from its folder (results.nc, or the points finished so far, the rest NaN) or from
    a results.nc file; a one-line InputError for anything else."""
    from aocsim.experiments.sweep.plots import open_results
    from aocsim.experiments.sweep.spec import parse_spec
    from aocsim.experiments.sweep.search import results
    from aocsim.experiments.sweep.store import SweepStore

    path = Path(path)
    if path.is_file():
        return open_results(path)
    store = SweepStore(path)
    saved = store.saved_spec()
    if saved is None:
        raise InputError(f"DIR = {str(path)!r} holds no sweep (spec.json missing or not a sweep's); expected a "
                         "folder written by aocsim sweep, or its results.nc")
    if store.results.is_file():
        return open_results(store.results)
    spec = parse_spec(json.loads(saved["spec"]), where=str(path / "spec.json"), check=False)
    return results(spec, store, {}, partial=True)


def axis_params(ds: xr.Dataset) -> dict[str, str]:
    """Every swept parameter (coordinate) and the dimension it lies along, in the Dataset's order."""
    dims = [d for d in ds.dims if d not in ("model", *RUN_DIMS)]
    out = {}
    for dim in dims:
        names = [c for c in ds.coords if ds.coords[c].dims == (dim,) and c != dim] or [dim]
        for name in names:
            out[str(name)] = dim
    return out


def _metrics(ds: xr.Dataset) -> list[str]:
    return [str(v) for v in ds.data_vars if set(RUN_DIMS) <= set(ds[v].dims)]


def _unit(ds: xr.Dataset, metric: str) -> str:
    """The unit a metric's cells are in: % for fractions, the Dataset's units otherwise ("1": none)."""
    declared = METRICS.get(metric)
    if declared is not None and declared.share:
        return "%"
    unit = str(ds[metric].attrs.get("units", declared.unit if declared else ""))
    return "" if unit == "1" else unit


def header(ds: xr.Dataset, metric: str) -> str:
    """A metric's short column name with the unit its cells are in ("accuracy (%)", "bits per character
    (bits)"); times and energies carry their prefixed unit in every cell, so their header has none."""
    declared = METRICS.get(metric)
    name = declared.column if declared else metric
    unit = _unit(ds, metric)
    return f"{name} ({unit})" if unit and unit not in PREFIXED and len(unit) <= 4 else name


def cell(value: float, ds: xr.Dataset, metric: str) -> str:
    """One value as a table prints it: fractions in %, times and energies with an SI prefix chosen for the
    value ('296 ns', '1.09 mJ'), errors in scientific notation, other numbers with two decimals."""
    if not np.isfinite(value):
        return "-"
    unit = _unit(ds, metric)
    if unit == "%":
        return f"{100 * value:.2f}"
    if unit in PREFIXED:
        return si(value, unit)
    if metric in ("fixed_point_error", "residual"):
        return f"{value:.2e}"
    return f"{value:.2f}" if abs(value) < 1000 else f"{value:.4g}"


def _value(v: Any, unit: str = "") -> str:
    """A setting as printed: numbers with 3 significant digits, with an SI prefix where the profile schema
    gives a unit (3e-05 W: '30 uW')."""
    if isinstance(v, np.generic):
        v = v.item()
    if unit and isinstance(v, (int, float)) and not isinstance(v, bool):
        return si(float(v), unit)
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _units(params: list[str]) -> dict[str, str]:
    """The profile schema's unit of each swept device key ('' for placement settings)."""
    from aocsim.hardware.profiles.schema import BY_KEY

    return {p: BY_KEY[p].unit if p in BY_KEY else "" for p in params}


def rows(ds: xr.Dataset) -> list[dict[str, Any]]:
    """One row per finished point (model, settings, mean and std of every metric over chips and seeds)."""
    params, metrics = axis_params(ds), _metrics(ds)
    mean, std = ds[metrics].mean(RUN_DIMS), ds[metrics].std(RUN_DIMS)
    point_dims = ["model", *dict.fromkeys(params.values())]
    out = []
    for index in np.ndindex(*(ds.sizes[d] for d in point_dims)):
        where = dict(zip(point_dims, index))
        m = {k: float(mean[k].isel(where)) for k in metrics}
        if all(not np.isfinite(v) for v in m.values()):
            continue  # not finished yet
        settings = {p: ds.coords[p].values[where[d]] if p in ds.coords else where[d] for p, d in params.items()}
        trusted = int(ds.trusted.isel(where)) if "trusted" in ds else -1
        note = str(ds.warnings.isel(where).values) if "warnings" in ds else ""
        out.append({"model": str(ds.model.values[index[0]]), "settings": settings, "mean": m,
                    "std": {k: float(std[k].isel(where)) for k in metrics}, "trusted": trusted, "warnings": note})
    return out


def _render(names: list[str], lines: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h) for i, h in enumerate(names)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return [fmt.format(*names), *(fmt.format(*r) for r in lines)]


def point_table(ds: xr.Dataset, *, limit: int = 12, few: int = 5) -> str:
    """Every finished point's metrics (mean over chips and seeds); more than `limit` points: the first `few`
    in the spec's order and the best `few` (by accuracy, else agreement, else the first metric), and a line
    saying how many are left out. The `trusted` column is compare's verdict on each point (NO: its numbers
    cannot be trusted; `untrusted_lines` says why)."""
    table = rows(ds)
    if not table:
        return "no points finished yet"
    metrics, params = _metrics(ds), list(axis_params(ds))
    key = next((m for m in ("accuracy", "agreement") if m in metrics), metrics[0])
    shown = list(range(len(table)))
    note = ""
    if len(table) > limit:
        best = sorted(range(len(table)), key=lambda i: -np.nan_to_num(table[i]["mean"][key], nan=-np.inf))[:few]
        shown = sorted(set(range(few)) | set(best))
        note = (f"... {len(table) - len(shown)} of {len(table)} points left out (shown: the first {few} and the best "
                f"{few} by {key}); all of them: aocsim sweep show DIR --metric {key}")
    models, units = len(ds.model) > 1, _units(params)
    names = [*(["model"] if models else []), *params, *(header(ds, m) for m in metrics), "trusted"]
    lines = []
    for i in shown:
        r = table[i]
        lines.append([*([r["model"]] if models else []), *(_value(r["settings"][p], units[p]) for p in params),
                      *(cell(r["mean"][m], ds, m) for m in metrics), TRUST_WORDS[r["trusted"]]])
    title = f"mean over {ds.sizes['chip']} chip(s) x {ds.sizes['seed']} seed(s) per point"
    return "\n".join([title, *_render(names, lines), *([note] if note else [])])


def show(ds: xr.Dataset, metric: str, by: str | None = None, at: Mapping[str, Any] | None = None) -> str:
    """`metric`'s mean +- std over chips and seeds per point, sorted by the values of the axis parameter `by`
    (default the first), the other axes' values listed beside it; `at` fixes some of them (parameter ->
    value). One-line InputErrors name the metric, axis or value that does not exist."""
    metrics, params = _metrics(ds), axis_params(ds)
    metric = resolve(metric)  # energy_j, time_s: as a search's objectives name them
    if metric not in metrics:
        raise InputError(f"--metric {metric!r} is not in the results; expected one of {', '.join(metrics)}")
    if by is not None and by not in params:
        raise InputError(f"--by {by!r} is not an axis of the sweep; expected one of {', '.join(params) or '(none)'}")
    table = rows(ds)
    for name, value in (at or {}).items():
        if name not in params:
            raise InputError(f"--at {name}: not an axis of the sweep; expected one of {', '.join(params)}")
        values = [r["settings"][name] for r in table]
        if not any(_same(v, value) for v in values):
            known = dict.fromkeys(str(v.item() if isinstance(v, np.generic) else v) for v in values)
            raise InputError(f"--at {name}={value!r}: not a value of that axis; expected one of {', '.join(known)}")
        table = [r for r in table if _same(r["settings"][name], value)]
    by = by or next(iter(params), None)
    others = [p for p in params if p != by and p not in (at or {})]
    if by is not None:
        table.sort(key=lambda r: (r["model"], _order(r["settings"][by])))
    models = len(ds.model) > 1
    names = [*(["model"] if models else []), *([by] if by else []), *others,
             header(ds, metric).replace(" (", " mean +- std (", 1) if "(" in header(ds, metric)
             else f"{header(ds, metric)} mean +- std", "trusted"]
    units = _units(list(params))
    lines = [[*([r["model"]] if models else []), *([_value(r["settings"][by], units[by])] if by else []),
              *(_value(r["settings"][p], units[p]) for p in others),
              f"{cell(r['mean'][metric], ds, metric)} +- {cell(r['std'][metric], ds, metric)}",
              TRUST_WORDS[r["trusted"]]] for r in table]
    fixed = "".join(f", {k} = {v}" for k, v in (at or {}).items())
    title = (f"{metric} on {ds.attrs.get('device', '?')}{fixed}: mean +- std over {ds.sizes['chip']} chip(s) x "
             f"{ds.sizes['seed']} seed(s) ({metric}: {ds[metric].attrs.get('description', '')})")
    return "\n".join([title, *_render(names, lines)])


def _order(value: Any) -> tuple[int, Any]:
    """Numbers by value, settings (strings, booleans) by name."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        return (0, float(value))
    return (1, str(value))


def _same(a: Any, b: Any) -> bool:
    """A coordinate value equals a value given on the command line (read as YAML: 1e-5 is a number)."""
    if isinstance(a, np.generic):
        a = a.item()
    if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)) \
            and not isinstance(b, bool):
        return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=0.0))
    return str(a) == str(b)


def untrusted_lines(ds: xr.Dataset) -> list[str]:
    """One WARNING line per finished point compare did not trust, with its settings and the first line of its
    notes (the likely cause); [] when every point is trusted."""
    params, table = list(axis_params(ds)), rows(ds)
    bad = [r for r in table if r["trusted"] == 0]
    if not bad:
        return []
    models, units = len(ds.model) > 1, _units(params)
    out = [f"WARNING {len(bad)} of {len(table)} points cannot be trusted (trusted = 0 in results.nc, their notes in "
           "its warnings variable):"]
    for r in bad:
        where = ", ".join([*([r["model"]] if models else []),
                           *(f"{p}={_value(r['settings'][p], units[p])}" for p in params)]) or r["model"]
        out.append(f"  {where}: {r['warnings'].splitlines()[0] if r['warnings'] else '(no note kept)'}")
    return out


def front_table(ds: xr.Dataset) -> str:
    """A search's result: its Pareto front (the feasible trials nothing beats), ordered by the first
    objective, and the front's hypervolume with its reference point (search.py)."""
    search = json.loads(ds.attrs["search"])
    objectives = list(search["objectives"])
    front = np.flatnonzero(ds.pareto.values)
    first = ds[objectives[0]].mean(("model", *RUN_DIMS)).values
    order = front[np.argsort(first[front], kind="stable")]
    goals = ", ".join(f"{m} {d}" for m, d in search["objectives"].items())
    repeated = np.flatnonzero(ds.repeat_of.values >= 0) if "repeat_of" in ds else np.array([], dtype=int)
    distinct = (f" ({ds.sizes['trial'] - len(repeated)} distinct: trial(s) {', '.join(map(str, repeated))} repeat "
                "earlier settings, see repeat_of)" if len(repeated) else "")
    untrusted = int((ds.trusted.values == 0).sum()) if "trusted" in ds else 0
    head = (f"search ({search['sampler']}, seed {search['seed']}): {ds.sizes['trial']} trials{distinct}, "
            f"{int(ds.feasible.sum())} feasible" + (f" ({untrusted} untrusted, infeasible)" if untrusted else "")
            + _screened(ds)
            + f", {len(front)} on the Pareto front of {goals}; "
            f"hypervolume {float(ds.attrs['hypervolume']):.4g} (reference {ds.attrs['hypervolume_reference']})")
    if not len(order):
        return head + "\nno feasible trial: the constraints hold nowhere the search looked"
    table = point_table(ds.isel(trial=order), limit=len(order))
    return f"{head}\nthe front, trials {', '.join(map(str, order))}:\n{table}"


def _screened(ds: xr.Dataset) -> str:
    """With search.fidelity: how many trials were scored only on the screen (never on the front)."""
    if "fidelity" not in ds:
        return ""
    screened = ds.fidelity.values < 1.0
    share = ""
    if screened.any():
        chips = int(ds.chips.values[screened].max()) if "chips" in ds else ds.sizes["chip"]
        on = f", {chips} of {ds.sizes['chip']} chips" if chips < ds.sizes["chip"] else ""
        share = f" ({100 * float(ds.fidelity.values[screened].max()):g}% of the workload{on})"
    return f", {int(screened.sum())} screened only{share}, {int((~screened).sum())} on the whole workload"
