"""What a fixed-point solve returns: the iterate, a status per sample, traces."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


class SolveStatus(enum.IntEnum):
    """Outcome of a fixed-point solve for one sample.

    The integer values are what `SolveResult.status` holds per sample.
    """

    CONVERGED = 0
    MAX_ITER = 1
    DIVERGED = 2
    NOISE_FLOOR = 3

    @property
    def message(self) -> str:
        return {
            SolveStatus.CONVERGED: "residual below tolerance",
            SolveStatus.MAX_ITER: "iteration cap reached before the tolerance",
            SolveStatus.DIVERGED: "non-finite values (the map diverged)",
            SolveStatus.NOISE_FLOOR: ("settled at the noise floor (the residual puts the state within a few stationary "
                                    "spreads of the fixed point)"),
        }[self]


@dataclass(frozen=True)
class SolveResult:
    """Result of `aocsim.solve`.

    Attributes:
        z: the returned iterate per sample, shape of `z0` (the best-residual
            iterate, or the last one, as requested).
        status: int64 [B], values of `SolveStatus`.
        iterations: int64 [B], map evaluations until the sample converged (the
            cap for samples that did not).
        abs_residual: [B] ||f(z) - z||_2 of the returned iterate.
        rel_residual: [B] abs_residual / ||f(z)||_2.
        trace: [B, K] absolute residual per iteration (NaN after a sample
            stopped), or None when traces were not requested.
        solver: name of the solver used.
    """

    z: torch.Tensor
    status: torch.Tensor
    iterations: torch.Tensor
    abs_residual: torch.Tensor
    rel_residual: torch.Tensor
    trace: torch.Tensor | None
    solver: str

    @property
    def converged(self) -> torch.Tensor:
        """Boolean [B]: which samples reached the tolerance."""
        return self.status == SolveStatus.CONVERGED

    @property
    def all_converged(self) -> bool:
        return bool(self.converged.all())

    def summary(self) -> str:
        """One line: how many samples converged, iteration statistics."""
        n = self.status.numel()
        counts = {s.name.lower(): int((self.status == s).sum()) for s in SolveStatus}
        it = self.iterations.double()
        floor = f", {counts['noise_floor']} at the noise floor" if counts["noise_floor"] else ""
        return (
            f"{counts['converged']}/{n} converged ({counts['max_iter']} at cap, "
            f"{counts['diverged']} diverged{floor}); iterations mean {it.mean():.1f}, "
            f"max {int(it.max()) if n else 0}; solver {self.solver}"
        )
