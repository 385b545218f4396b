"""Words and units for a sweep's figures: axis labels from the profile schema (its doc and unit) and the
metrics' descriptions, tick formatters for log axes and for fractions shown in %."""

from __future__ import annotations

import re
import textwrap
from typing import Any

import numpy as np

# Placement settings in words (their declarations' help lines are sentences, too long for an axis).
PLACEMENT_WORDS = {
    "tile_size": "tile size (channels per side)", "partial_sums": "partial sums", "mode": "SSM mode",
    "elementwise": "SiLU and softplus", "averaging": "tile passes averaged per product", "on_tiles": "maps on tiles",
    "predistort": "emitter predistortion", "stop": "stop rule", "fit": "compilation fit", "tiling": "tiling",
    "max_iter": "iteration cap", "rtol": "relative tolerance", "atol": "absolute tolerance", "damping": "damping tau",
}
METRIC_WORDS = {
    "accuracy": ("device accuracy", "%"), "exact_accuracy": ("exact-path accuracy", "%"),
    "agreement": ("agreement with the exact path", "%"), "converged": ("solves converged", "%"),
    "iterations": ("device iterations per inference", ""), "fixed_point_error": ("fixed-point error (median)", ""),
    "residual": ("device residual (median)", ""), "time_per_inference_s": ("hardware time per inference", "s"),
    "energy_per_inference_j": ("energy per inference", "J"),
    "bits_per_character": ("device bits per character", "bits"), "exact_bits_per_character": ("exact bits per character", "bits"),
}
SHARES = {"accuracy", "exact_accuracy", "agreement", "converged"}


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
    """'device accuracy (%)', 'energy per inference (J)'; other metrics by name with their units."""
    words, unit = METRIC_WORDS.get(metric, (metric.replace("_", " "), units))
    return words + (f" ({unit})" if unit and len(unit) <= 12 else "")


def percent_axis(axis: Any) -> None:
    """Fractions drawn on `axis` labelled in %."""
    from matplotlib.ticker import PercentFormatter

    axis.set_major_formatter(PercentFormatter(1.0, decimals=None))  # as many decimals as the range needs


def value_ticks(axis: Any, values: np.ndarray, unit: str, log: bool) -> None:
    """Ticks for the swept values: a labelled tick at each (up to 10 of them; SI prefixes with a unit), else
    on a log axis ticks at 1, 2 and 5 times the powers of ten, labelled."""
    from matplotlib.ticker import EngFormatter, FixedLocator, LogLocator, NullLocator, ScalarFormatter

    fmt = EngFormatter(unit=unit, sep=" ") if unit else ScalarFormatter()
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
