"""A placed implicit SSM's sequential mode: its own token loop (`TokenLoop`), which the placed model gives
the model's forward (`ImplicitSSM.forward(..., sequential=)`), so that aocsim/nn knows no device; and a keyed
run (`KeyedRun`, what `PlacedSSM.keyed` yields): the model, the observer of its passes and its loop.

Each way it differs from the exact path's token-by-token solve is there for the device:
- `rows_alone` (`ActiveRowsMap`): once some rows of a token have stopped, its passes carry only the
  others. A device's passes cost in proportion to their rows, and its noise is keyed per sequence and
  position (aocsim/execute/token_keys.py), so a row draws the same in any pass; its results follow
  the rounding of products over other rows (statistics, not bits: a kernel can change with the rows,
  and an ADC can turn that into another code). The exact path keeps whole batches: its float32 solves
  stop at a tolerance near the rounding, where a product's kernel may move a stop by an iteration.
- `own_tokens` (aocsim/execute/ssm_rows.py): each row moves on to its next token once it stops, so a
  batch's cost follows its mean iteration count, not its slowest row's; only where every part keys its
  draws per row (`PlacedSSM.keyed` decides).
- `full_passes`: with own tokens, every pass padded to the whole batch (compiled tile products: one graph).
- `commits`: what happens to the states committed after each token (noise on the states,
  aocsim/execute/snr.py); `solver`: a token's iteration in place of `ImplicitSSM.solve_token`'s
  (the reference noise protocol's, snr.ReferenceSolve), called with the same arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from aocsim.execute.ssm_rows import solve_rows
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.nn.mamba2_lm import Mamba2LM
from aocsim.nn.ssm_blocks import TokenCache
from aocsim.nn.ssm_token import OnPass, TokenMap


class ActiveRowsMap(TokenMap):
    """A `TokenMap` that `aocsim.solve.solve` evaluates on the rows still iterating (a `RowMap`; module
    docstring, `rows_alone`)."""

    def rows(self, z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return self.evaluate(z, index)


Commit = Callable[[list[TokenCache], int], list[TokenCache]]


@dataclass(frozen=True)
class TokenLoop:
    """How a placed model runs sequential mode (module docstring); call it as `ImplicitSSM.sequential`."""

    rows_alone: bool = False
    own_tokens: bool = False
    full_passes: bool = False
    commits: tuple[Commit, ...] = ()
    solver: Callable[..., tuple[Any, ...]] | None = None

    @property
    def map_type(self) -> type[TokenMap]:
        return ActiveRowsMap if self.rows_alone else TokenMap

    def token(self, model: ImplicitSSM, u_t: torch.Tensor, caches: list[TokenCache], t: int, *, tau: float, tol: float,
              max_iter: int, trace: bool = False, on_pass: OnPass = None) -> tuple[Any, ...]:
        """One token's solve and its states as committed (`ImplicitSSM.solve_token`'s returns)."""
        # an explicit model's token is one pass from z = 0, whatever solves the implicit ones
        solve = self.solver if self.solver is not None and model.config.implicit else ImplicitSSM.solve_token
        z, after, *rest = solve(model, u_t, caches, t, tau=tau, tol=tol, max_iter=max_iter, trace=trace,
                                on_pass=on_pass, map_type=self.map_type)
        for commit in self.commits:
            after = commit(after, t)
        return (z, after, *rest)

    def __call__(self, model: ImplicitSSM, u: torch.Tensor, *, tau: float, tol: float, max_iter: int,
                 trace: bool = False, on_pass: OnPass = None) -> tuple[Any, ...]:
        if self.own_tokens and not self.commits and self.solver is None and model.config.implicit:
            return solve_rows(model, u, tau=tau, tol=tol, max_iter=max_iter, trace=trace, on_pass=on_pass,
                              full_passes=self.full_passes)

        def one(u_t: torch.Tensor, caches: list[TokenCache], t: int) -> tuple[Any, ...]:
            return self.token(model, u_t, caches, t, tau=tau, tol=tol, max_iter=max_iter, trace=trace, on_pass=on_pass)

        return model.sequential(u, tau=tau, tol=tol, max_iter=max_iter, trace=trace, on_pass=on_pass, solve_one=one)


@dataclass(frozen=True)
class KeyedRun:
    """What `PlacedSSM.keyed` yields: the placed model's own model, the observer that keys its passes'
    noise (`on_pass`) and its token loop; call it like the model."""

    model: ImplicitSSM | Mamba2LM
    on_pass: Callable[..., None]
    loop: TokenLoop

    def __call__(self, tokens: torch.Tensor, **options: Any) -> Any:
        return self.model(tokens, on_pass=self.on_pass, sequential=self.loop, **options)

    def one_pass(self, length: int) -> None:
        """Announce one pass of every position 0 ... length - 1 at visit 0 (a one-pass model's run)."""
        self.on_pass(torch.arange(length), 0, None)
