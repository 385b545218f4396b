"""Validation of device-profile values against the schema: types, shapes, ranges, and the
relations between fields. Every failure is a `ProfileError` naming where, the dotted key, the
value and what was expected (`aocsim.hardware.profiles.profile` applies these to files and overrides)."""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from aocsim.errors import ProfileError
from aocsim.hardware.profiles.schema import BY_KEY, FIELDS, N, Field


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def suggest(key: str) -> str:
    close = difflib.get_close_matches(key, list(BY_KEY), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_value(spec: Field, value: Any, where: str, channels: int | None) -> Any:
    """Validate one value; returns it normalised (arrays -> read-only float64)."""
    key = spec.key
    bad = f"{where}: {key} = {value!r}"
    if value is None:
        if spec.nullable:
            return None
        raise ProfileError(f"{bad}; expected a {spec.kind} (null is not allowed here)")
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise ProfileError(f"{bad}; expected true or false")
        return value
    if spec.kind == "str":
        if not isinstance(value, str):
            raise ProfileError(f"{bad}; expected a string")
        if spec.choices and value not in spec.choices:
            raise ProfileError(f"{bad}; expected one of {list(spec.choices)}")
        return value
    if spec.kind == "float" and spec.choices and isinstance(value, str):
        if value not in spec.choices:
            raise ProfileError(f"{bad}; expected a number or one of {list(spec.choices)}")
        return value
    if spec.kind in ("int", "float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if spec.kind == "int":
            ok = ok and float(value).is_integer()
        if not ok or not math.isfinite(value):
            raise ProfileError(f"{bad}; expected a finite {'integer' if spec.kind == 'int' else 'number'}")
        _check_range(spec, np.asarray(value, dtype=float), bad)
        return int(value) if spec.kind == "int" else float(value)
    return _check_array(spec, value, bad, channels, where)


def _check_range(spec: Field, arr: np.ndarray, bad: str) -> None:
    if spec.low is not None and bool((arr < spec.low).any()):
        lo = "> 0" if spec.low == 1e-300 else f">= {spec.low:g}"
        raise ProfileError(f"{bad}; expected values {lo}")
    if spec.high is not None and bool((arr > spec.high).any()):
        raise ProfileError(f"{bad}; expected values <= {spec.high:g}")


def _check_array(spec: Field, value: Any, bad: str, channels: int | None, where: str) -> np.ndarray:
    if isinstance(value, (str, bytes, dict, bool)):
        raise ProfileError(f"{bad}; expected numbers of shape {_expected(spec, channels)}")
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProfileError(f"{bad}; expected numbers of shape {_expected(spec, channels)}") from None
    if not np.isfinite(arr).all():
        raise ProfileError(f"{bad}; expected finite numbers")
    if not _shape_ok(spec, arr.shape, channels):
        raise ProfileError(f"{where}: {spec.key} has shape {list(arr.shape)}; "
                           f"expected {_expected(spec, channels)}")
    _check_range(spec, arr, bad)
    arr.setflags(write=False)
    return arr


def _expected(spec: Field, channels: int | None) -> str:
    if spec.lengths:
        return " or ".join(f"[{n}]" for n in spec.lengths)
    dims = [str(channels if (s == N and channels) else s) for s in spec.shape or ()]
    text = "[" + ", ".join(dims) + "]"
    if spec.shape and spec.shape[0] == N:
        text += " (or one value for every channel)" if channels else " as one value (channels is null)"
    return text


def _shape_ok(spec: Field, shape: tuple[int, ...], channels: int | None) -> bool:
    if spec.lengths:
        return len(shape) == 1 and shape[0] in spec.lengths
    want = spec.shape or ()
    if want and want[0] == N:
        if shape == tuple(want[1:]):  # one value (or row) for every channel
            return True
        return channels is not None and shape == (channels, *want[1:])
    return shape == tuple(want)


def check_complete(flat: dict[str, Any], where: str) -> None:
    """Validate every field (in schema order) and the relations between fields."""
    unknown = sorted(set(flat) - set(BY_KEY))
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r}{suggest(unknown[0])}")
    missing = [f.key for f in FIELDS if f.key not in flat]
    if missing:
        raise ProfileError(f"{where}: missing key {missing[0]!r}" + (f" (and {len(missing) - 1} more)"
                                                                      if len(missing) > 1 else ""))
    channels = _check_value(BY_KEY["channels"], flat["channels"], where, None)
    for spec in FIELDS:
        flat[spec.key] = _check_value(spec, flat[spec.key], where, channels)
    _check_relations(flat, where)


def _check_relations(v: dict[str, Any], where: str) -> None:
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ProfileError(f"{where}: {key} = {_plain(v[key])!r}; {msg}")

    if v["nonlinearity.kind"] == "algebraic_sigmoid":
        need(v["nonlinearity.coeffs"] is not None, "nonlinearity.coeffs",
             "expected 5 or 6 coefficients for the algebraic sigmoid")
        need(v["nonlinearity.coeffs"][2] > 0, "nonlinearity.coeffs", "expected the exponent c (third) > 0")
    else:  # the exact stage has no circuit to warm
        need(v["environment.loop_gain_per_k"] == 0, "environment.loop_gain_per_k",
             "expected 0 on a tanh nonlinearity (a temperature gain applies to the calibrated algebraic_sigmoid)")
    if v["closed_loop.enabled"]:
        for k in ("solution_to_adc_ratio", "dc_offset", "linear_offset", "scaling"):
            need(v[f"closed_loop.{k}"] is not None, f"closed_loop.{k}", "required when closed_loop.enabled")
    if v["crosstalk.pbs.enabled"]:
        model = v["crosstalk.pbs.model"]
        keys = (("negative_to_positive", "positive_to_negative") if model == "per_channel"
                else ("poly_pos", "poly_neg", "scale_pos", "scale_neg"))
        for k in keys:
            need(v[f"crosstalk.pbs.{k}"] is not None, f"crosstalk.pbs.{k}", f"required by the {model} PBS model")
        if model == "mirrored_poly":
            need(v["channels"] == 16, "channels", "the mirrored_poly PBS model is defined for 16 channels")
    for key in ("injection.clip", "readout.range_v"):
        if v[key] is not None:
            need(v[key][0] < v[key][1], key, "expected [low, high] with low < high")
    need(v["saturation.low_v"] < v["saturation.high_v"], "saturation.low_v", "expected low_v < high_v")
    for key in ("readout.hold_leakage_a", "readout.hold_injection_c", "readout.hold_injection_c_per_v"):
        need(v[key] == 0 or v["readout.hold_capacitance_f"] is not None, key,
             "expected 0 without a hold capacitance (readout.hold_capacitance_f = null)")
