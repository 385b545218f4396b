"""Backward modes of an equilibrium layer, as objects.

The forward solve runs without autograd; a backward mode then re-attaches the
fixed point z* to the graph of the map f:

- `Implicit`: implicit differentiation. The gradient g = dL/dz* solves the
  adjoint fixed point g = J_f(z*)^T g + dL/dz (J_f the Jacobian of f in z),
  itself solved with `aocsim.solve`.
- `Phantom(k, tau)`: k damped steps z <- (1 - tau) z + tau f(z) from z* with
  autograd on: a truncated Neumann series of the implicit gradient
  (Geng et al., "On Training Implicit Models", NeurIPS 2021).
- `Unrolled(steps, tau)`: backpropagation through `steps` damped iterations
  from z0, ignoring the solver's answer (the baseline the others replace).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch

from aocsim.errors import InputError
from aocsim.solve.core import solve
from aocsim.solve.result import SolveResult

log = logging.getLogger(__name__)
Map = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Implicit:
    """Implicit-function-theorem gradient via an adjoint fixed-point solve.

    Args:
        solver, atol, rtol, max_iter: settings of the adjoint solve.
    """

    solver: str = "anderson"
    atol: float = 1e-12
    rtol: float = 1e-10
    max_iter: int = 200

    def attach(self, fn: Map, z_star: torch.Tensor, z0: torch.Tensor) -> torch.Tensor:
        z = fn(z_star.detach())  # one step with graph: dz/dtheta at the fixed point
        if not z.requires_grad:
            return z
        z_in = z.detach().requires_grad_()
        f_in = fn(z_in)  # the map at z*, kept for vector-Jacobian products

        def adjoint(grad: torch.Tensor | None) -> torch.Tensor | None:
            if grad is None:  # an undefined incoming gradient stays undefined
                return None

            def vjp_map(g: torch.Tensor) -> torch.Tensor:
                return torch.autograd.grad(f_in, z_in, g, retain_graph=True)[0] + grad

            with torch.enable_grad():
                res = solve(vjp_map, grad, solver=self.solver, atol=self.atol,
                            rtol=self.rtol, max_iter=self.max_iter)
            if not res.all_converged:
                log.warning("adjoint solve of the implicit backward: %s", res.summary())
            return res.z

        z.register_hook(adjoint)
        return z


@dataclass(frozen=True)
class Phantom:
    """Phantom gradient: k damped steps from z* with autograd on.

    Args:
        steps: k >= 1.
        damping: tau in (0, 1].
    """

    steps: int = 4
    damping: float = 0.8

    def __post_init__(self) -> None:
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise InputError(f"phantom.steps = {self.steps!r}; expected an integer >= 1")
        if not 0.0 < self.damping <= 1.0:
            raise InputError(f"phantom.damping = {self.damping!r}; expected a number in (0, 1]")

    def attach(self, fn: Map, z_star: torch.Tensor, z0: torch.Tensor) -> torch.Tensor:
        z = z_star.detach()
        for _ in range(self.steps):
            z = torch.lerp(z, fn(z), self.damping)
        return z


@dataclass(frozen=True)
class Unrolled:
    """Backpropagation through `steps` damped iterations from z0.

    Args:
        steps: number of unrolled iterations (>= 1).
        damping: tau in (0, 1].
    """

    steps: int = 30
    damping: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise InputError(f"unrolled.steps = {self.steps!r}; expected an integer >= 1")
        if not 0.0 < self.damping <= 1.0:
            raise InputError(f"unrolled.damping = {self.damping!r}; expected a number in (0, 1]")

    def attach(self, fn: Map, z_star: torch.Tensor, z0: torch.Tensor) -> torch.Tensor:
        z = z0
        for _ in range(self.steps):
            z = torch.lerp(z, fn(z), self.damping)
        return z


Backward = Implicit | Phantom | Unrolled


def equilibrium(
    fn: Map, z0: torch.Tensor, *, backward: Backward = Implicit(), **solve_options: Any
) -> tuple[torch.Tensor, SolveResult]:
    """Solve z* = fn(z*) without autograd, then attach gradients by `backward`.

    Args:
        fn: the map [B, ...] -> [B, ...]; parameters it closes over get gradients.
        z0: initial iterate.
        backward: an `Implicit`, `Phantom` or `Unrolled` object.
        **solve_options: passed to `aocsim.solve` (solver, atol, rtol, max_iter, ...).

    Returns:
        (z, result): z carries the graph when autograd is enabled (else it is
        result.z); result is the forward `SolveResult`.
    """
    if not isinstance(backward, (Implicit, Phantom, Unrolled)):
        raise InputError(f"backward = {backward!r}; expected Implicit(), Phantom(k, tau) or Unrolled(steps)")
    with torch.no_grad():
        result = solve(fn, z0.detach() if isinstance(z0, torch.Tensor) else z0, **solve_options)
    if not torch.is_grad_enabled():
        return result.z, result
    return backward.attach(fn, result.z, z0), result
