"""Regression of analytic 1-D functions on [-1, 1], as in the published twin's regression example.

The functions are those of the twin's examples (github microsoft/aoc,
src/aoc/training/datasets.py, MIT licence), each mapping [-1, 1] into about [-1, 1]:

    gaussian     y = 2 (exp(-x^2 / (2 0.25^2)) - 1/2)
    sinusoidal   y = x cos(x) / 0.6
    sinusoidal2  y = sqrt(|x|) sin(3 pi x)
    polynomial   y = ((x - 0.3)(x + 0.15)(x - 0.7)(x + 0.5)(x + 0.7) - 0.17) / 0.45

Sampling, as the twin's: the training set is `n_train` evenly spaced points from -1 to 1 (both
ends included); the test set is `n_test` points drawn uniformly on [-1, 1]
(`numpy.random.default_rng(seed)`, sorted). The AOC paper reports MSE 0.0037 on the Gaussian
(hardware, Nature 2025).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from aocsim.errors import UnknownNameError


def gaussian(x: torch.Tensor) -> torch.Tensor:
    return 2.0 * (torch.exp(-x ** 2 / (2 * 0.25 ** 2)) - 0.5)


def sinusoidal(x: torch.Tensor) -> torch.Tensor:
    return x * torch.cos(x) / 0.6


def sinusoidal2(x: torch.Tensor) -> torch.Tensor:
    return x.abs().sqrt() * torch.sin(3 * math.pi * x)


def polynomial(x: torch.Tensor) -> torch.Tensor:
    return ((x - 0.3) * (x + 0.15) * (x - 0.7) * (x + 0.5) * (x + 0.7) - 0.17) / 0.45


FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gaussian": gaussian, "sinusoidal": sinusoidal, "sinusoidal2": sinusoidal2, "polynomial": polynomial,
}
TEST_SEED = 2024


@dataclass(frozen=True)
class RegressionSplit:
    """Inputs [n, 1] in [-1, 1] and targets [n, 1]."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def function(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The target function `name`, or an UnknownNameError listing them."""
    if name not in FUNCTIONS:
        raise UnknownNameError("regression function", name, list(FUNCTIONS))
    return FUNCTIONS[name]


def load_split(name: str, *, n_train: int = 1000, n_test: int = 1000, seed: int = TEST_SEED,
               dtype: torch.dtype = torch.float64) -> RegressionSplit:
    """The training grid and the random test points of function `name` (module docstring)."""
    f = function(name)
    x_train = torch.linspace(-1.0, 1.0, n_train, dtype=dtype)[:, None]
    x_test = torch.as_tensor(np.sort(np.random.default_rng(seed).uniform(-1.0, 1.0, n_test)), dtype=dtype)[:, None]
    return RegressionSplit(x_train, f(x_train), x_test, f(x_test))
