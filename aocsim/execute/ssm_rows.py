"""Sequential mode with every row on its own token (`solve_rows`): a row that stops moves on to its
next token at once, instead of waiting for the batch's slowest row.

Token by token (`ImplicitSSM.solve_token`), each token's solve runs until its last row stops: on a
device, where a few noisy rows often run to the iteration cap, most passes carry a handful of rows
and cost what their kernel calls cost. Here a pass carries every row that has tokens left, each at
its own token t and iteration k: its injection u[:, t], its states after token t - 1, and, through
`on_pass`, its own position and visit k (a device keys its noise by them). Each row
goes through exactly the iterations, stops and states of its token-by-token solve (the same damped
Picard updates, tests `aocsim.solve.core.residuals` and `verdicts`), so its results are those of
`solve_token` to the rounding of the batch's products: a product's kernel, and so its last bits, can
change with its rows, and a device's ADC can turn that into another code, so the two agree in
statistics, not bit for bit (tests/execute/test_ssm_rows.py states the tolerance). With
`full_passes` every pass is padded to the whole batch with finished rows (their results
discarded), so that compiled tile products see one shape. The rows must be independent problems and
their maps keyed per row: a placed model's (aocsim/execute/token_loop.py decides when).
"""

from __future__ import annotations

from typing import Any

import torch

from aocsim.nn.ssm_token import OnPass, put, relative_change, take
from aocsim.solve.core import DIVERGENCE_RATIO, per_sample, residuals, verdicts
from aocsim.solve.solvers import Picard


def solve_rows(model: Any, u: torch.Tensor, *, tau: float, tol: float, max_iter: int, trace: bool = False,
               on_pass: OnPass = None, full_passes: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`ImplicitSSM.sequential`'s results (z [B, L, d], iterations [B, L], relative residuals [B, L],
    the trace [B, L, I] or None) with every row on its own token (module docstring); u [B, L, d_in];
    each pass told to `on_pass` with every row's own position and visit."""
    b, length, _ = u.shape
    caches = [block.init_cache(b, u) for block in model.blocks]  # each row's states before its token
    token = torch.zeros(b, dtype=torch.int64, device=u.device)  # each row's token and iteration on it
    k = torch.zeros_like(token)
    z = u.new_zeros(b, model.config.d_model)
    first, last_rel = u.new_full((b,), float("inf")), u.new_full((b,), float("inf"))
    zs, rel_out = u.new_zeros(b, length, z.shape[1]), u.new_zeros(b, length)
    iterations = torch.zeros(b, length, dtype=torch.int64, device=u.device)
    seen = u.new_full((b, length, min(max_iter + 1, 32)), float("nan")) if trace else None  # grown as needed
    atol, rtol = per_sample(0.0, "atol", b, z), per_sample(tol, "tol", b, z)
    picard = Picard(tau)
    going = token < length
    while bool(going.any()):
        index = going.nonzero().squeeze(1)
        rows = _padded(index, ~going, b) if full_passes and index.numel() < b else index
        at = token[rows].clamp_max(length - 1)
        if on_pass is not None:
            on_pass(at, k[rows], rows)
        out, after = model.f_token(z[rows], u[rows, at], take(caches, rows))
        if rows.numel() > index.numel():
            keep = torch.isin(rows, index)
            out, after = out[keep], take(after, keep.nonzero().squeeze(1))
        if seen is not None:
            deepest = int(k[index].max())
            if deepest >= seen.shape[2]:
                seen = torch.cat([seen, torch.full_like(seen, float("nan"))], 2)[..., :max_iter + 1]
            seen[index, token[index], k[index]] = relative_change(out, z[index])
        fz = z.index_copy(0, index, out)  # a finished row: f(z) = z, as `solve` has a stopped row
        res, fnorm, rel = residuals(z, fz)
        first = torch.where(k == 0, res, first)
        finite, diverging, within = verdicts(res, fnorm, first, atol, rtol, DIVERGENCE_RATIO)
        last_rel = torch.where(going & finite, rel, last_rel)
        stopped = going & (within | diverging | (k == max_iter))
        z = torch.where((going & ~stopped)[:, None], picard.step(None, z, fz), z)
        k = torch.where(going & ~stopped, k + 1, k)
        if bool(stopped.any()):  # its token's results, its states committed; on to its next token
            done = stopped.nonzero().squeeze(1)
            t = token[done]
            zs[done, t], iterations[done, t], rel_out[done, t] = z[done], k[done], last_rel[done]
            caches = put(caches, done, take(after, torch.searchsorted(index, done)))
            token = token.index_add(0, done, torch.ones_like(done))
            z, k = z.index_fill(0, done, 0.0), k.index_fill(0, done, 0)
            last_rel = last_rel.index_fill(0, done, float("inf"))
            going = token < length
    if seen is not None:
        seen = seen[..., : int(iterations.max()) + 1]
    return zs, iterations, rel_out, seen


def _padded(index: torch.Tensor, idle: torch.Tensor, least: int) -> torch.Tensor:
    """A pass's rows `index` [R] (ascending) with the first rows of `idle` [B] (bool) added up to `least`
    rows (their results are discarded), ascending."""
    pad = idle.nonzero().squeeze(1)[:max(least - index.numel(), 0)]
    return torch.sort(torch.cat([index, pad])).values
