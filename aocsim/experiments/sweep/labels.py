"""Words and units for a sweep's figures: axis labels from the profile schema (its doc and unit) and the
metrics' descriptions, tick formatters for log axes and for fractions shown in %."""

from __future__ import annotations

import re
import textwrap
from typing import Any

import numpy as np

from aocsim.experiments.metrics import METRICS
from aocsim.units import prefixable

# Placement settings in words (their declarations' help lines are sentences, too long for an axis).
PLACEMENT_WORDS = {
    "tile_size": "tile size (channels per side)", "partial_sums": "partial sums", "mode": "SSM mode",
    "elementwise": "SiLU and softplus", "averaging": "tile passes averaged per product", "on_tiles": "maps on tiles",
    "predistort": "emitter predistortion", "stop": "stop rule", "fit": "compilation fit", "tiling": "tiling",
    "max_iter": "iteration cap", "rtol": "relative tolerance", "atol": "absolute tolerance", "damping": "damping tau",
}
SHARES = {name for name, m in METRICS.items() if m.share}  # fractions, drawn in %


def axis_label(path: str, width: int = 48) -> str:
    """A swept parameter in words with its unit, the key beneath: the first clause of the profile schema's
    doc ("optical power on one photodetector per twin detector unit (W)") or the placement's words."""
    from aocsim.hardware.profiles.schema import BY_KEY

    if path.startswith("placement."):
        name = path.split(".", 1)[1]
        words, unit = PLACEMENT_WORDS.get(name, name.replace("_", " ")), ""
    elif path in BY_KEY:
        field = BY_KEY[path]
        words = re.split(r"[:;(,]| = ", field.doc, maxsplit=1)[0].strip()
        words = words if len(words) >= 4 else path.rsplit(".", 1)[-1].replace("_", " ")
        unit = field.unit
    else:  # a dimension without a parameter (zip, draw)
        return path
    text = words + (f" ({unit})" if unit else "")
    return "\n".join(textwrap.wrap(text, width)) + f"\n{path}"


def metric_label(metric: str, units: str = "") -> str:
    """'device accuracy (%)', 'energy per inference (J)' from the metric's declaration
    (aocsim/experiments/metrics.py); other variables by name with their units."""
    declared = METRICS.get(metric)
    words = declared.words if declared else metric.replace("_", " ")
    unit = "%" if declared and declared.share else (declared.unit if declared and declared.unit else units)
    return words + (f" ({unit})" if unit and unit != "1" and len(unit) <= 12 else "")


def percent_axis(axis: Any) -> None:
    """Fractions drawn on `axis` labelled in %."""
    from matplotlib.ticker import PercentFormatter

    axis.set_major_formatter(PercentFormatter(1.0, decimals=None))  # as many decimals as the range needs


def clamp_share(ax: Any, which: str = "y") -> None:
    """A fraction's axis kept within 0-100 % (bands of +-1 std and margins would reach past them)."""
    get, set_ = (ax.get_ylim, ax.set_ylim) if which == "y" else (ax.get_xlim, ax.set_xlim)
    low, high = get()
    set_(max(low, 0.0), min(high, 1.0))


def declutter(fig: Any, *axes: Any) -> None:
    """Tick labels that would overlap are thinned: every k-th label kept (the smallest k that leaves no two
    overlapping), the others blank. Call it last, after tight_layout: it measures the labels as drawn."""
    from matplotlib.ticker import FuncFormatter

    for axis in axes:
        fig.canvas.draw()
        ticks = [t for t in axis.get_major_ticks() if t.label1.get_visible() and t.label1.get_text()]
        if len(ticks) < 2 or not _overlap([t.label1.get_window_extent() for t in ticks]):
            continue
        ticks.sort(key=lambda t: t.get_loc())
        boxes = [t.label1.get_window_extent() for t in ticks]
        step = next(k for k in range(1, len(ticks) + 1) if not _overlap(boxes[::k]))
        kept = {float(t.get_loc()) for t in ticks[::step]}
        shown = axis.get_major_formatter()
        axis.set_major_formatter(FuncFormatter(
            lambda v, pos, shown=shown, kept=kept: shown(v, pos) if any(np.isclose(v, k, rtol=1e-9, atol=0)
                                                                       for k in kept) else ""))


def _overlap(boxes: list[Any]) -> bool:
    """Whether any two consecutive label boxes (in tick order) overlap, with a 2-pixel gap."""
    return any(a.x1 + 2 > b.x0 and a.y1 + 2 > b.y0 and b.x1 + 2 > a.x0 and b.y1 + 2 > a.y0
               for a, b in zip(boxes, boxes[1:]))


def untrusted(ds: Any, model: object, dims: list[str]) -> np.ndarray:
    """Per point of `model` along `dims` (in that order): compare did not trust it (trusted == 0); all False
    for results without the verdict."""
    shape = [ds.sizes[d] for d in dims]
    if "trusted" not in ds:
        return np.zeros(shape, dtype=bool)
    bad = ds.trusted.sel(model=model) == 0
    bad = bad.any([d for d in bad.dims if d not in dims])  # any untrusted point among the ones averaged
    return np.broadcast_to(bad.transpose(*[d for d in dims if d in bad.dims]).values, shape).copy()


def cost_axis(axis: Any, unit: str) -> None:
    """A time or energy axis in SI prefixes (5 uJ, 300 ns), as the tables print them."""
    from matplotlib.ticker import EngFormatter

    if unit in ("s", "J"):
        axis.set_major_formatter(EngFormatter(unit=unit, sep=" "))


def value_ticks(axis: Any, values: np.ndarray, unit: str, log: bool) -> None:
    """Ticks for the swept values: a labelled tick at each (up to 10 of them; SI prefixes with a unit), else
    on a log axis ticks at 1, 2 and 5 times the powers of ten, labelled."""
    from matplotlib.ticker import EngFormatter, FixedLocator, LogLocator, NullLocator, ScalarFormatter

    fmt = EngFormatter(unit=unit, sep=" ") if prefixable(unit) else ScalarFormatter()
    unit = unit if prefixable(unit) else ""  # a rate (1/s): plain numbers, its unit in the axis label
    distinct = np.unique(values)
    if len(distinct) <= 10:
        axis.set_major_locator(FixedLocator(distinct))
        axis.set_minor_locator(NullLocator())
        if not unit:  # plain numbers as written: 1, 4, 16, 1e-05
            axis.set_major_formatter(_plain())
            return
    elif log:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(fmt)


def log_cost_ticks(axis: Any, unit: str, span: float) -> None:
    """A log axis of a cost (J, s) spanning a factor `span`: ticks at 1, 2 and 5 times the powers of ten (1 to
    9 times within one decade), in SI prefixes (2 uJ, 50 uJ), so that a narrow range still has several
    labelled ticks."""
    from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if span >= 10 else (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(EngFormatter(unit=unit, sep=" "))
    axis.set_minor_formatter(NullFormatter())


def _plain() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:g}")


def settings_text(names: list[str], values: list[Any]) -> str:
    """A configuration's settings, named: 'tile_size=16, partial_sums=analog' (placement. prefixes dropped)."""
    parts = []
    for name, value in zip(names, values):
        short = name.removeprefix("placement.")
        shown = f"{value:.3g}" if isinstance(value, (float, np.floating)) else str(value)
        parts.append(f"{short}={shown}")
    return ", ".join(parts)
