"""The one fixed-point entry point: `solve(fn, z0, ...)`."""

from __future__ import annotations

import numbers
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from aocsim._checks import compute_tensor, integer, real, short
from aocsim.errors import ConvergenceError, InputError
from aocsim.solve.result import SolveResult, SolveStatus
from aocsim.solve.solvers import Anderson, Picard, make_solver

Tolerance = float | torch.Tensor


@runtime_checkable
class NoisyMap(Protocol):
    """A map that predicts its own noise (the device loop: aocsim.hardware.engine.dynamics.LoopMap).

    noise_floor(z, spreads) [B]: the rms residual the map shows at a state `spreads` stationary spreads
        (rms distances of the noisy iterate from its fixed point) away, for the iteration just taken
        from z (the solve's NOISE_FLOOR status);
    advance(z, n): n iterations with no residual checks (the fixed-count path, e.g. compiled blocks).
    """

    def __call__(self, z: torch.Tensor) -> torch.Tensor: ...
    def noise_floor(self, z: torch.Tensor, spreads: float) -> torch.Tensor: ...
    def advance(self, z: torch.Tensor, n: int) -> torch.Tensor: ...

@runtime_checkable
class RowMap(Protocol):
    """A map whose batch rows are independent problems and that can evaluate any subset of them:
    rows(z[index], index) is fn(z)[index] (index ascending; to a matrix product's rounding). The solve
    then evaluates only its active rows once some have stopped, so a stopped row costs nothing (a
    placed sequence model's token map: aocsim/nn/ssm_token.py)."""

    def __call__(self, z: torch.Tensor) -> torch.Tensor: ...
    def rows(self, z: torch.Tensor, index: torch.Tensor) -> torch.Tensor: ...


# NOISE_FLOOR means "within FLOOR_SPREADS stationary spreads of the fixed point": the window's mean
# square residual is at most what a state that far away shows on average (docs/PHYSICS.md section 3).
FLOOR_SPREADS = 2.0
DIVERGENCE_RATIO = 1e8  # residual growth over a sample's first residual that counts as divergence
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def per_sample(tol: Tolerance, name: str, batch: int, like: torch.Tensor) -> torch.Tensor:
    expected = f"expected a finite number >= 0 or a real tensor of shape [{batch}]"
    ok = (isinstance(tol, numbers.Real) and not isinstance(tol, bool)) or (
        isinstance(tol, torch.Tensor) and (tol.is_floating_point() or tol.dtype in _INT_DTYPES))
    if not ok:
        raise InputError(f"{name} = {short(tol)}; {expected}")
    t = torch.as_tensor(tol).to(dtype=like.dtype, device=like.device)
    if t.ndim == 0:
        t = t.expand(batch)
    if t.shape != (batch,) or bool((t < 0).any()) or not bool(torch.isfinite(t).all()):
        raise InputError(f"{name} = {short(tol)}; {expected}")
    return t


def _check_map_output(fz: object, z: torch.Tensor) -> None:
    if not isinstance(fz, torch.Tensor) or fz.shape != z.shape:
        shape = tuple(fz.shape) if isinstance(fz, torch.Tensor) else type(fz).__name__
        raise InputError(f"fixed-point map returned {shape}; expected a tensor of shape {tuple(z.shape)}")
    if fz.dtype != z.dtype:  # a map that changes precision would silently demote (or mix) the iterate
        raise InputError(f"fixed-point map returned dtype {str(fz.dtype).replace('torch.', '')}; expected "
                         f"the dtype of z0 ({str(z.dtype).replace('torch.', '')})")


def solve(
    fn: Callable[[torch.Tensor], torch.Tensor],
    z0: torch.Tensor,
    *,
    solver: str | Picard | Anderson = "anderson",
    atol: Tolerance | None = 1e-10,
    rtol: Tolerance | None = 1e-8,
    max_iter: int = 200,
    return_best: bool = True,
    trace: bool = False,
    divergence_ratio: float = DIVERGENCE_RATIO,
    raise_on_failure: bool = False,
    early_stop: bool = True,
    floor_spreads: float = FLOOR_SPREADS,
    patience: int = 10,
    return_value: bool = False,
    **solver_options: Any,
) -> SolveResult:
    """Solve z = fn(z) for a batch of independent problems.

    A sample converges when ||fn(z) - z||_2 <= atol + rtol ||fn(z)||_2 (norms
    over all but the first dimension). Converged samples are frozen (a `RowMap`
    is then evaluated on the active samples alone); the loop ends when every
    sample has stopped or after `max_iter` updates. A sample whose map value
    turns non-finite, or whose residual grows beyond `divergence_ratio` times
    its first residual, is marked DIVERGED.

    Args:
        fn: the map, tensor [B, ...] -> tensor of the same shape. Any input
            injection x is bound inside (for example a lambda).
        z0: initial iterate [B, ...].
        solver: a registered name (`available_solvers()`) or a solver object.
        atol, rtol: absolute / relative tolerance, scalars or [B] tensors.
        max_iter: cap on solver updates per sample.
        return_best: return the lowest-residual iterate (True) or the last.
        trace: record per-sample absolute residuals per iteration.
        divergence_ratio: residual growth that counts as divergence.
        raise_on_failure: raise ConvergenceError unless every sample converged.
        early_stop: freeze a sample once it has a status (False: every sample runs `max_iter`
            updates, its status is the first one it reached; the device readout runs this way).
        floor_spreads, patience: for maps that predict their own noise (a `NoisyMap`, the
            device loop): a sample whose mean square residual over the last `patience` iterations
            is at most the mean of noise_floor(z, floor_spreads)^2 over them is NOISE_FLOOR
            ("settled at the noise floor": within about floor_spreads stationary spreads of the
            fixed point, up to the window's sampling error).
        return_value: return fn(z) of each sample's last check instead of z (with return_best=False):
            for a map whose value is itself a reading (the machine's sampled loop,
            aocsim.hardware.engine.sampling), the last one read.
        **solver_options: options of a named solver (e.g. damping, memory).

    With atol = rtol = None and no trace, the solve is a fixed count of `max_iter`
    updates with no residual checks (a `NoisyMap` runs them itself with `advance`,
    for example as compiled blocks); the status is then MAX_ITER.

    Returns:
        SolveResult with the iterate, per-sample status, iterations, residuals.

    Example:
        >>> A = 0.5 * torch.eye(3, dtype=torch.float64); b = torch.ones(1, 3, dtype=torch.float64)
        >>> solve(lambda z: z @ A.T + b, torch.zeros(1, 3, dtype=torch.float64)).z
        tensor([[2., 2., 2.]], dtype=torch.float64)
    """
    if not callable(fn):
        raise InputError(f"fn = {short(fn)}; expected a callable map tensor [B, ...] -> tensor [B, ...]")
    compute_tensor(z0, "z0", "[B, ...]")
    max_iter = integer(max_iter, "max_iter")
    divergence_ratio = real(divergence_ratio, "divergence_ratio", low=1.0, low_open=True)
    if not bool(torch.isfinite(z0).all()):
        raise InputError("z0 contains NaN or infinite values; expected finite numbers")
    strategy = make_solver(solver, **solver_options)
    batch = z0.shape[0]
    shape = z0.shape
    if atol is None and rtol is None:  # a fixed count (with a trace: residuals recorded, tolerance 0)
        if not trace:
            return _fixed_count(fn, z0, strategy, max_iter)
        atol = rtol = 0.0
    atol_b = per_sample(atol, "atol", batch, z0)
    rtol_b = per_sample(rtol, "rtol", batch, z0)
    floor_fn = fn.noise_floor if isinstance(fn, NoisyMap) else None
    if not (isinstance(patience, int) and patience >= 1):
        raise InputError(f"patience = {patience!r}; expected an integer >= 1")
    floor_spreads = real(floor_spreads, "floor_spreads", low=1.0)
    if return_value and return_best:
        raise InputError(f"return_value = True with return_best = {return_best!r}; expected return_best=False (the "
                         "value of the last check, not the best)")

    by_rows = early_stop and isinstance(fn, RowMap)  # (a protocol check costs microseconds: once)

    def flat_map(zf: torch.Tensor) -> torch.Tensor:
        if by_rows and not bool(active.all()):  # the active rows alone
            index = active.nonzero().squeeze(1)
            z_rows = zf[index].reshape(-1, *shape[1:])
            out_rows = fn.rows(z_rows, index)
            _check_map_output(out_rows, z_rows)
            return zf.index_copy(0, index, out_rows.reshape(index.shape[0], -1))  # a stopped row: f(z) = z
        out = fn(zf.reshape(shape))
        _check_map_output(out, zf.reshape(shape))
        return out.reshape(batch, -1)

    z = z0.reshape(batch, -1)
    state = strategy.init(z)
    status = torch.full((batch,), SolveStatus.MAX_ITER, dtype=torch.int64, device=z.device)
    active = torch.ones(batch, dtype=torch.bool, device=z.device)
    iterations = torch.full((batch,), max_iter, dtype=torch.int64, device=z.device)
    best_z, best_res = z.clone(), torch.full((batch,), float("inf"), dtype=z.dtype, device=z.device)
    best_rel = best_res.clone()
    last_res, last_rel = best_res.clone(), best_res.clone()
    first_res: torch.Tensor | None = None
    value = z.clone() if return_value else None
    traces: list[torch.Tensor] = []
    # the last `patience` squared residuals (+inf until filled) and squared floors, as rings
    res_sq = torch.full((patience, batch), float("inf"), dtype=z.dtype, device=z.device)
    floor_sq = torch.zeros_like(res_sq)

    for k in range(max_iter + 1):
        fz = flat_map(z)
        res, fnorm, rel = residuals(z, fz)
        if first_res is None:
            first_res = res.clone()
        finite, diverging, within = verdicts(res, fnorm, first_res, atol_b, rtol_b, divergence_ratio)
        diverged, converged = active & diverging, active & within
        if floor_fn is not None:
            floor = floor_fn(z.reshape(shape), floor_spreads)
            res_sq[k % patience] = torch.where(finite, res * res, float("inf"))
            floor_sq[k % patience] = floor * floor
            settled = active & ~converged & (floor > 0) & (res_sq.sum(0) <= floor_sq.sum(0))
        else:
            settled = torch.zeros_like(converged)
        # A sample updates its record only while active and finite.
        live = active & finite
        last_res = torch.where(live, res, last_res)
        last_rel = torch.where(live, rel, last_rel)
        if return_best:
            better = live & (res < best_res)
            best_z = torch.where(better.unsqueeze(1), z, best_z)
            best_res = torch.where(better, res, best_res)
            best_rel = torch.where(better, rel, best_rel)
        if trace:
            traces.append(torch.where(active, res, torch.full_like(res, float("nan"))))
        status = torch.where(converged, SolveStatus.CONVERGED, status)
        status = torch.where(diverged & ~converged, SolveStatus.DIVERGED, status)
        status = torch.where(settled & ~diverged, SolveStatus.NOISE_FLOOR, status)
        stopped = converged | diverged | settled
        if value is not None:
            value = torch.where(active.unsqueeze(1), fz, value)
        iterations = torch.where(stopped, k, iterations)
        active = active & ~stopped
        if k == max_iter or (early_stop and not bool(active.any())):
            break
        z_next = strategy.step(state, z, fz)
        z = torch.where(active.unsqueeze(1), z_next, z) if early_stop else z_next

    if return_best:
        z_out, res_out, rel_out = best_z, best_res, best_rel
    else:
        z_out, res_out, rel_out = z if value is None else value, last_res, last_rel
    result = SolveResult(
        z=z_out.reshape(shape),
        status=status,
        iterations=iterations,
        abs_residual=res_out,
        rel_residual=rel_out,
        trace=torch.stack(traces, dim=1) if trace else None,
        solver=strategy.name,
    )
    if raise_on_failure and not result.all_converged:
        raise ConvergenceError(f"fixed-point solve did not converge: {result.summary()}")
    return result


def residuals(z: torch.Tensor, fz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sample of z, f(z) [B, D]: ||f(z) - z||, ||f(z)|| and their ratio (the relative residual)."""
    res = torch.linalg.vector_norm(fz - z, dim=1)
    fnorm = torch.linalg.vector_norm(fz, dim=1)
    return res, fnorm, res / fnorm.clamp_min(torch.finfo(z.dtype).tiny)


def verdicts(res: torch.Tensor, fnorm: torch.Tensor, first_res: torch.Tensor, atol: torch.Tensor, rtol: torch.Tensor,
             divergence_ratio: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sample (finite, diverging, within tolerance) of an iteration's residuals (`residuals`): a
    residual that is not finite or has grown beyond divergence_ratio times the sample's first one
    (`first_res`) diverges; one at most atol + rtol ||f(z)|| has converged."""
    finite = torch.isfinite(res)
    diverging = ~finite | (res > divergence_ratio * first_res.clamp_min(atol))
    return finite, diverging, finite & (res <= atol + rtol * fnorm)


def _fixed_count(fn: Callable[[torch.Tensor], torch.Tensor], z0: torch.Tensor, strategy: Any, max_iter: int
                 ) -> SolveResult:
    """`max_iter` updates, no residual checks (the device loop's `iterate`)."""
    if isinstance(fn, NoisyMap) and getattr(strategy, "damping", None) == 1.0:
        z = fn.advance(z0, max_iter)
    else:
        z, state = z0, strategy.init(z0.reshape(z0.shape[0], -1))
        for _ in range(max_iter):
            fz = fn(z)
            _check_map_output(fz, z)
            z = strategy.step(state, z.reshape(z.shape[0], -1), fz.reshape(z.shape[0], -1)).reshape(z0.shape)
    batch = z0.shape[0]
    nan = torch.full((batch,), float("nan"), dtype=z0.dtype, device=z0.device)
    iterations = torch.full((batch,), max_iter, dtype=torch.int64, device=z0.device)
    return SolveResult(z=z, status=torch.full((batch,), SolveStatus.MAX_ITER, dtype=torch.int64, device=z0.device),
                       iterations=iterations, abs_residual=nan, rel_residual=nan.clone(), trace=None,
                       solver=strategy.name)
