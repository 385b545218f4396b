"""How a placement option's value is read and checked: Python values, YAML values or command-line text,
each reader a one-line `InputError` naming the option (aocsim/execute/placement.py declares which option
uses which). This module imports nothing heavy: the CLI reads it at start."""

from __future__ import annotations

import math
from typing import Any, Callable

from aocsim.errors import InputError

MAP_KINDS = ("inject", "in_proj", "out_proj")  # an implicit SSM's linear maps that can go onto tiles


def short(value: Any, limit: int = 60) -> str:
    """repr(value) cut to one short line (this module does not import torch: the CLI reads it at start)."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def choice(*allowed: str) -> Callable[[str, Any], str]:
    def read(name: str, value: Any) -> str:
        if value not in allowed:
            raise InputError(f"{name} = {short(value)}; expected one of {list(allowed)}")
        return value
    return read


def count(name: str, value: Any) -> int:
    """An integer >= 1 (command-line text allowed)."""
    return _integer(name, value, 1)


def count_or_zero(name: str, value: Any) -> int:
    """An integer >= 0 (command-line text allowed)."""
    return _integer(name, value, 0)


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} = {short(value)}; expected an integer >= {minimum}")
    return value


def switch(name: str, value: Any) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if not isinstance(value, bool):
        raise InputError(f"{name} = {short(value)}; expected true or false")
    return value


def fraction(name: str, value: Any) -> float:
    """A relative tolerance in [0, 1)."""
    value = _number(name, value)
    if not 0.0 <= value < 1.0:
        raise InputError(f"{name} = {short(value)}; expected a relative residual in [0, 1)")
    return value


def _weight(name: str, value: Any, what: str) -> float:
    """A weight in (0, 1]; `what` names it in the error."""
    value = _number(name, value)
    if not 0.0 < value <= 1.0:
        raise InputError(f"{name} = {short(value)}; expected {what}")
    return value


def damping(name: str, value: Any) -> float:
    """A damping factor tau in (0, 1] of z <- (1 - tau) z + tau f(z)."""
    return _weight(name, value, "a damping in (0, 1]")


def nonnegative(name: str, value: Any) -> float:
    value = _number(name, value)
    if value < 0.0:
        raise InputError(f"{name} = {short(value)}; expected a finite number >= 0")
    return value


def decibels(name: str, value: Any) -> float:
    """An SNR in dB: any real number, +inf (no noise) included."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "+inf"):
        value = math.inf
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == math.inf:
        return math.inf
    try:
        return _number(name, value)
    except InputError:
        raise InputError(f"{name} = {short(value)}; expected an SNR in dB (a number, or inf for no noise)") from None


def ema(name: str, value: Any) -> float:
    """The weight alpha in (0, 1] of z_read <- alpha z_k + (1 - alpha) z_read."""
    return _weight(name, value, "an EMA weight alpha in (0, 1] (1: the last iterate)")


def _number(name: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} = {short(value)}; expected a finite number")
    return float(value)


def map_names(name: str, value: Any) -> tuple[str, ...]:
    """A subset of MAP_KINDS, in their order: a sequence of names or 'in_proj,out_proj'; 'none' (every
    map digital: the model with only the noise the snr_* options draw) is the empty set."""
    if isinstance(value, str) and value.strip() == "none":
        return ()
    names = tuple(n.strip() for n in value.split(",")) if isinstance(value, str) else value
    try:
        chosen = tuple(names)
    except TypeError:
        chosen = ("?",)
    unknown = [n for n in chosen if n not in MAP_KINDS]
    if unknown or len(set(chosen)) != len(chosen):  # empty: 'none' read again
        raise InputError(f"{name} = {short(value)}: {'unknown map ' + repr(unknown[0]) if unknown else 'not a set'}; "
                         f"expected 'none' or a non-empty subset of {list(MAP_KINDS)} (e.g. 'in_proj,out_proj')")
    return tuple(k for k in MAP_KINDS if k in chosen)
