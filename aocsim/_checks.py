"""Argument checks shared by the public entry points.

Each check raises `InputError` with one line naming the argument, the value
found and what was expected, so that the CLI can print it as it is.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from aocsim.errors import InputError

# Dtypes the solvers and models compute in: half precision has no batched
# linear solve (Anderson) and too few digits for a fixed-point tolerance.
COMPUTE_DTYPES = (torch.float32, torch.float64)


def short(value: Any, limit: int = 60) -> str:
    """repr(value) cut to one short line (tensors as their shape and dtype)."""
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} ({str(value.dtype).replace('torch.', '')})"
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def integer(value: Any, name: str, *, minimum: int = 0) -> int:
    """`value` as an int >= minimum (Python or numpy integers; bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        raise InputError(f"{name} = {short(value)}; expected an integer >= {minimum}")
    return int(value)


def real(value: Any, name: str, *, low: float = -math.inf, high: float = math.inf,
         low_open: bool = False, high_open: bool = False) -> float:
    """`value` as a finite float in the given interval (bools and strings are refused)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        if math.isinf(high):
            interval = (">" if low_open else ">=") + f" {low:g}"
        else:
            interval = ("in (" if low_open else "in [") + f"{low:g}, {high:g}" + (")" if high_open else "]")
        raise InputError(f"{name} = {short(value)}; expected a finite number {interval}")
    return float(value)


def compute_tensor(t: Any, name: str, shape_hint: str) -> torch.Tensor:
    """A non-empty float32 / float64 tensor with at least one dimension."""
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} = {short(t)}; expected a float32 or float64 tensor {shape_hint}")
    if t.dtype not in COMPUTE_DTYPES:
        raise InputError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected float32 or float64 "
                         f"(convert with .double() or .float())")
    if t.ndim < 1 or t.numel() == 0:
        raise InputError(f"{name} has shape {tuple(t.shape)}; expected {shape_hint} with at least one sample "
                         "and one entry per sample")
    return t


def torch_device(value: Any, name: str = "device") -> torch.device:
    """A torch device this machine has ('cpu', 'cuda', 'cuda:1', ...)."""
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        raise InputError(f"{name} = {short(value)}; expected 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"{name} = {short(value)}; this torch ({torch.__version__}) sees no CUDA device; "
                             "expected 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"{name} = {short(value)}; expected an index below {torch.cuda.device_count()} "
                             "(CUDA devices visible)")
    elif dev.type != "cpu":
        raise InputError(f"{name} = {short(value)}; expected 'cpu', 'cuda' or 'cuda:N'")
    return dev
