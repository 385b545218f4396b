"""One token's fixed-point map in sequential mode (`TokenMap`): z -> f_token(z) with the previous
tokens' states fixed, on every row of the batch or on the rows still iterating.

As an `ActiveRowsMap` (a placed model's), `aocsim.solve.solve` sees a `RowMap` and, once some rows
have stopped, evaluates the others alone: a sequence draws the same noise in any batch (rows are
independent problems, the device's noise is keyed by sequence id and position, not by row), its
results are the same to the rounding of products over other rows (statistics, not bits: a kernel can
change with the rows and an ADC turn that into another code), and a batch's cost follows its mean
iteration count instead of its slowest row's.
"""

from __future__ import annotations

from typing import Any

import torch

from aocsim.nn.ssm_blocks import TokenCache

def take(caches: list[TokenCache], index: torch.Tensor | None) -> list[TokenCache]:
    """The caches of rows `index` (None: all)."""
    return caches if index is None else [TokenCache(c.conv[index], c.ssm[index]) for c in caches]


def put(caches: list[TokenCache], index: torch.Tensor | None, rows: list[TokenCache]) -> list[TokenCache]:
    """`caches` with rows `index` replaced by `rows` (None: all of them)."""
    if index is None:
        return rows
    return [TokenCache(c.conv.index_copy(0, index, r.conv), c.ssm.index_copy(0, index, r.ssm))
            for c, r in zip(caches, rows)]


def relative_change(out: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """||f(z) - z|| / ||f(z)|| per row: a token's trace entry."""
    return torch.linalg.vector_norm(out - z, dim=-1) / torch.linalg.vector_norm(out, dim=-1).clamp_min(1e-30)


class TokenMap:
    """f_token of token `t` of `model` (an `ImplicitSSM`), its injection u_t [B, d], with `caches`
    (the previous tokens' states) fixed.

    Keeps, per row, the caches of that row's latest evaluation at a new iterate (`last`): the solve
    stops a row at the iterate it last evaluated, so these are the states to commit, without a
    recompute (a stopped row evaluated again with its batch, at the same iterate, keeps them: on a
    device the second evaluation draws other noise). `visits` counts evaluations (the device keys a
    pass's noise by it); with `trace`, `seen` holds each evaluation's relative residual per row [B]
    (NaN for rows not evaluated).
    """

    def __init__(self, model: Any, u_t: torch.Tensor, caches: list[TokenCache], t: int,
                 trace: bool = False) -> None:
        self.model, self.u_t, self.caches, self.t = model, u_t, caches, t
        self.last = caches
        self.at: torch.Tensor | None = None  # per row, the iterate of its latest evaluation
        self.visits = 0
        self.seen: list[torch.Tensor] | None = [] if trace else None

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return self.evaluate(z, None)

    def evaluate(self, z: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        """f_token on rows `index` (ascending) of the batch (None: every row), z [R, d_model]."""
        batch = self.u_t.shape[0]
        self.model._announce(self.t, self.t + 1, self.visits, index)
        self.visits += 1
        u = self.u_t if index is None else self.u_t[index]
        out, after = self.model.f_token(z, u, take(self.caches, index))
        if index is None and self.at is not None:  # a stopped row, evaluated with its batch, keeps its states
            moved = (z != self.at).any(-1)
            after = [TokenCache(torch.where(moved[:, None, None], a.conv, c.conv),
                                torch.where(moved[:, None, None, None], a.ssm, c.ssm))
                     for a, c in zip(after, self.last)]
        self.last = put(self.last, index, after)
        self.at = z if index is None else self.at.index_copy(0, index, z)
        if self.seen is not None:
            r = relative_change(out, z)
            self.seen.append(r if index is None else
                             self.u_t.new_full((batch,), float("nan")).index_copy(0, index, r))
        return out


class ActiveRowsMap(TokenMap):
    """A `TokenMap` that `aocsim.solve.solve` evaluates on the rows still iterating (a `RowMap`): a
    placed model's (aocsim/execute/ssm_device.py), whose passes cost in proportion to their rows. The
    exact path keeps whole batches: its float32 solves stop at a tolerance near the rounding, where a
    product's kernel (which can change with the batch size) may move a token's stop by an iteration."""

    def rows(self, z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return self.evaluate(z, index)
