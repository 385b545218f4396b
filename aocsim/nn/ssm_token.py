"""One token's fixed-point map in sequential mode (`TokenMap`): z -> f_token(z) with the previous
tokens' states fixed, and what a run tells an observer of its passes (`OnPass`).

An observer (a placed model's noise keys, aocsim/execute/token_keys.py) is called before each pass of
tokens through the maps with the pass's positions [T], its visit (0 for the injection, then the
iteration: of the sequence in simultaneous mode, of the token's own solve in sequential mode) and the
batch rows in it (None: all). The model itself knows nothing of what observes it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from aocsim.nn.ssm_blocks import TokenCache

# on_pass(positions [T] or [R], visit (int, or [R] with each row on its own token), rows [R] or None)
OnPass = Callable[[torch.Tensor, "int | torch.Tensor", "torch.Tensor | None"], None] | None


def announce(on_pass: OnPass, start: int, stop: int, visit: int, rows: torch.Tensor | None = None) -> None:
    """Tell `on_pass` (if any) of a pass of positions start..stop - 1 at `visit` on batch rows `rows`."""
    if on_pass is not None:
        on_pass(torch.arange(start, stop), visit, rows)


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
    pass's noise by it, through `on_pass`); with `trace`, `seen` holds each evaluation's relative residual per row [B]
    (NaN for rows not evaluated).
    """

    def __init__(self, model: Any, u_t: torch.Tensor, caches: list[TokenCache], t: int,
                 trace: bool = False, on_pass: OnPass = None) -> None:
        self.model, self.u_t, self.caches, self.t, self.on_pass = model, u_t, caches, t, on_pass
        self.last = caches
        self.at: torch.Tensor | None = None  # per row, the iterate of its latest evaluation
        self.visits = 0
        self.seen: list[torch.Tensor] | None = [] if trace else None

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return self.evaluate(z, None)

    def evaluate(self, z: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        """f_token on rows `index` (ascending) of the batch (None: every row), z [R, d_model]."""
        batch = self.u_t.shape[0]
        announce(self.on_pass, self.t, self.t + 1, self.visits, index)
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
