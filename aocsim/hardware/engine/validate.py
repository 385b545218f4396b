"""Checks of what users pass to the engine: one-line errors naming the argument, the value and the expectation."""

from __future__ import annotations

from typing import Any

import torch

from aocsim.errors import InputError


def check_state(name: str, t: Any, n: int, *, allow_1d: bool = False, dtype: torch.dtype | None = None,
                batch: int | None = None) -> torch.Tensor:
    """A finite real floating-point tensor [B, n] (or [n] with allow_1d), B >= 1, B = batch if given, of
    at most `dtype`'s precision (promotion is fine; demotion would lose what the caller asked for)."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise InputError(f"{name} must be a floating-point tensor [B, {n}]; got {type(t).__name__}"
                         + (f" {t.dtype}" if isinstance(t, torch.Tensor) else ""))
    ok = (t.ndim == 2 and t.shape[1] == n) or (allow_1d and t.ndim == 1 and t.shape[0] == n)
    if not ok:
        raise InputError(f"{name} has shape {tuple(t.shape)}; expected [B, {n}]" + (f" or [{n}]" if allow_1d else ""))
    if dtype is not None and torch.finfo(t.dtype).bits > torch.finfo(dtype).bits:
        raise InputError(f"{name} is {t.dtype} but the loop computes in {dtype} (its weight's dtype); expected "
                         f"{dtype} or lower (build the loop with a {t.dtype} weight to keep the precision)")
    if batch is not None and t.ndim == 2 and t.shape[0] != batch:
        raise InputError(f"{name} has batch size {t.shape[0]} but z has {batch}; expected equal sizes")
    if t.ndim == 2 and t.shape[0] == 0:
        raise InputError(f"{name} has an empty batch {tuple(t.shape)}; expected at least one sample")
    if not bool(torch.isfinite(t).all()):
        raise InputError(f"{name} contains NaN or infinite values")
    return t


def check_iterations(name: str, value: Any, *, allow_zero: bool = True) -> int:
    """A plain integer count >= 0 (>= 1 unless allow_zero)."""
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) and not (
            type(value).__module__ == "numpy" and getattr(getattr(value, "dtype", None), "kind", "") in "iu"):
        raise InputError(f"{name} = {value!r}; expected an integer >= {low}")
    if int(value) < low:
        raise InputError(f"{name} = {value!r}; expected an integer >= {low}")
    return int(value)
