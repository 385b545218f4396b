"""Fixed-point solvers: small strategy objects with `init` and `step`.

A solver sees flattened batches: `z` and `fz = f(z)` of shape [B, D]. The
driver loop in `aocsim.solve.core` owns tolerances, statuses, best iterates and
traces, so a solver only proposes the next iterate. Every solver treats the
samples of a batch independently (per-sample mixing coefficients), so a
sample's trajectory does not depend on which other samples share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from aocsim._checks import integer, real, short
from aocsim.errors import InputError, UnknownNameError


@dataclass(frozen=True)
class Picard:
    """Damped Picard (Krasnoselskii-Mann) iteration.

    z_{k+1} = (1 - damping) z_k + damping f(z_k). The fixed point does not
    depend on `damping`; damping < 1 widens the set of maps that converge.

    Args:
        damping: tau in (0, 1].
    """

    damping: float = 1.0
    name = "picard"

    def __post_init__(self) -> None:
        real(self.damping, "picard.damping", low=0.0, high=1.0, low_open=True)

    def init(self, z: torch.Tensor) -> None:
        return None

    def step(self, state: None, z: torch.Tensor, fz: torch.Tensor) -> torch.Tensor:
        if self.damping == 1.0:
            return fz
        return torch.lerp(z, fz, self.damping)


@dataclass
class _AndersonState:
    dF: list[torch.Tensor]  # differences of residuals f(z) - z, each [B, D]
    dG: list[torch.Tensor]  # differences of map values f(z), each [B, D]
    last_F: torch.Tensor | None = None
    last_G: torch.Tensor | None = None


@dataclass(frozen=True)
class Anderson:
    """Anderson acceleration (type II, difference form, per sample).

    With residuals F_k = f(z_k) - z_k, G_k = f(z_k) and the last m differences
    dF, dG as columns, solve the regularised least-squares problem
    gamma = argmin ||F_k - dF gamma||^2 + lam s ||gamma||^2 (s = mean squared
    column norm, so the regularisation is scale free) and set
    z_{k+1} = G_k - dG gamma - (1 - mixing) (F_k - dF gamma).

    Args:
        memory: m, number of past differences kept (>= 1).
        mixing: beta in (0, 1]; 1 is undamped Anderson.
        regularization: lam >= 0, relative Tikhonov weight.
    """

    memory: int = 5
    mixing: float = 1.0
    regularization: float = 1e-10
    name = "anderson"

    def __post_init__(self) -> None:
        integer(self.memory, "anderson.memory", minimum=1)
        real(self.mixing, "anderson.mixing", low=0.0, high=1.0, low_open=True)
        real(self.regularization, "anderson.regularization", low=0.0)

    def init(self, z: torch.Tensor) -> _AndersonState:
        return _AndersonState(dF=[], dG=[])

    def step(self, state: _AndersonState, z: torch.Tensor, fz: torch.Tensor) -> torch.Tensor:
        F, G = fz - z, fz
        if state.last_F is not None:
            state.dF.append(F - state.last_F)
            state.dG.append(G - state.last_G)
            if len(state.dF) > self.memory:
                state.dF.pop(0)
                state.dG.pop(0)
        state.last_F, state.last_G = F, G
        if not state.dF:
            return torch.lerp(z, fz, self.mixing)
        dF = torch.stack(state.dF, dim=2)  # [B, D, m]
        dG = torch.stack(state.dG, dim=2)
        gram = dF.transpose(1, 2) @ dF  # [B, m, m]
        m = gram.shape[-1]
        scale = gram.diagonal(dim1=1, dim2=2).mean(dim=1, keepdim=True)  # [B, 1]
        floor = torch.finfo(z.dtype).tiny * 1e6
        reg = (self.regularization * scale + floor).unsqueeze(-1)
        eye = torch.eye(m, dtype=z.dtype, device=z.device)
        rhs = (dF.transpose(1, 2) @ F.unsqueeze(-1))  # [B, m, 1]
        gamma, info = torch.linalg.solve_ex(gram + reg * eye, rhs)
        z_next = G - (dG @ gamma).squeeze(-1)
        if self.mixing < 1.0:
            z_next = z_next - (1.0 - self.mixing) * (F - (dF @ gamma).squeeze(-1))
        # A singular system (differences at the precision floor, e.g. float32 near the
        # fixed point) gives no usable mixing: those samples take a plain damped step.
        bad = (info != 0) | ~torch.isfinite(z_next).all(dim=1)
        if bool(bad.any()):
            z_next = torch.where(bad.unsqueeze(1), torch.lerp(z, fz, self.mixing), z_next)
        return z_next


_REGISTRY: dict[str, Callable[..., Any]] = {"picard": Picard, "anderson": Anderson}


def available_solvers() -> list[str]:
    """Names accepted by `make_solver` and `aocsim.solve(solver=...)`."""
    return sorted(_REGISTRY)


def make_solver(solver: str | Picard | Anderson, **options: Any) -> Picard | Anderson:
    """Return a solver object from a registered name (with options) or pass one through."""
    if not isinstance(solver, str):
        if not (hasattr(solver, "init") and hasattr(solver, "step")):
            raise InputError(f"solver = {short(solver)}; expected one of {available_solvers()} or a solver "
                             "object (Picard(...), Anderson(...))")
        if options:
            raise InputError(f"solver options {sorted(options)} given with a solver object; "
                             "set them on the object instead")
        return solver
    if solver not in _REGISTRY:
        raise UnknownNameError("solver", solver, list(_REGISTRY))
    cls = _REGISTRY[solver]
    try:
        return cls(**options)
    except TypeError as exc:  # an unknown option name
        fields = sorted(cls.__dataclass_fields__)
        raise InputError(
            f"solver {solver!r} got options {sorted(options)}; it accepts {fields}"
        ) from exc
