"""Annealing schedules for the loop's leak alpha(k) and gain beta(k), k = iteration index."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Union

import torch

from aocsim.errors import InputError


@dataclass(frozen=True)
class Constant:
    """alpha(k) = value (a number, or a 0-dim tensor that may require grad: a trainable gain)."""

    value: float | torch.Tensor

    def __call__(self, k: int) -> float | torch.Tensor:
        return self.value


@dataclass(frozen=True)
class Linear:
    """Linear ramp from `start` to `end` over `iterations`, then `end`: v(k) = start + (end - start) min(k / K, 1)."""

    start: float
    end: float
    iterations: int

    def __post_init__(self) -> None:
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            raise InputError(f"Linear.iterations = {self.iterations!r}; expected an integer >= 1")

    def __call__(self, k: int) -> float:
        return self.start + (self.end - self.start) * min(k / self.iterations, 1.0)


@dataclass(frozen=True)
class Exponential:
    """Exponential approach: v(k) = end + (start - end) exp(-rate k)."""

    start: float
    end: float
    rate: float

    def __post_init__(self) -> None:
        if not self.rate >= 0:
            raise InputError(f"Exponential.rate = {self.rate!r}; expected a number >= 0")

    def __call__(self, k: int) -> float:
        return self.end + (self.start - self.end) * math.exp(-self.rate * k)


@dataclass(frozen=True)
class Function:
    """A user callable k -> value."""

    fn: Callable[[int], float]

    def __call__(self, k: int) -> float:
        return float(self.fn(k))


Schedule = Union[Constant, Linear, Exponential, Function]


def as_schedule(value: float | Schedule | Callable[[int], float] | None, name: str) -> Schedule | None:
    """None stays None (no such term); numbers become Constant; callables become Function."""
    if value is None or isinstance(value, (Constant, Linear, Exponential, Function)):
        return value
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not value.is_floating_point() or not bool(torch.isfinite(value).all()):
            raise InputError(f"{name} = tensor of shape {tuple(value.shape)} {value.dtype}; expected a finite "
                             "floating-point tensor with one element")
        return Constant(value.reshape(()))
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InputError(f"{name} = {value!r}; expected a finite number, a schedule or None")
        return Constant(float(value))
    if callable(value):
        return Function(value)
    raise InputError(f"{name} = {value!r}; expected a number, a schedule (Constant, Linear, Exponential, "
                     "Function), a callable k -> value, or None")
