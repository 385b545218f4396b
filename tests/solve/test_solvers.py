"""Fixed-point solvers against closed forms and edge cases."""

from __future__ import annotations

import pytest
import torch
from conftest import contractive_linear

from aocsim import solve
from aocsim.errors import ConvergenceError, InputError, UnknownNameError
from aocsim.solve import Anderson, Picard, SolveStatus, available_solvers

SOLVERS = available_solvers()


def linear_problem(gen: torch.Generator, n: int = 12, batch: int = 5, lipschitz: float = 0.8, cond: float = 1.0,
                   symmetric: bool = False):
    a = contractive_linear(n, lipschitz, gen, cond=cond, symmetric=symmetric)
    b = torch.randn(batch, n, generator=gen, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(n, dtype=torch.float64) - a, b.T).T
    return (lambda z: z @ a.T + b), torch.zeros(batch, n, dtype=torch.float64), exact


@pytest.mark.parametrize("solver", SOLVERS)
def test_linear_fixed_point_matches_closed_form(solver: str, gen: torch.Generator) -> None:
    fn, z0, exact = linear_problem(gen)
    res = solve(fn, z0, solver=solver, atol=1e-13, rtol=0.0, max_iter=2000)
    assert res.all_converged
    assert (res.z - exact).abs().max().item() < 1e-10


@pytest.mark.parametrize("solver", SOLVERS)
def test_damped_and_last_iterate_also_reach_closed_form(solver: str, gen: torch.Generator) -> None:
    fn, z0, exact = linear_problem(gen)
    opts = {"damping": 0.7} if solver == "picard" else {"mixing": 0.7}
    res = solve(fn, z0, solver=solver, atol=1e-13, rtol=0.0, max_iter=2000, return_best=False, **opts)
    assert res.all_converged
    assert (res.z - exact).abs().max().item() < 1e-10


def test_anderson_beats_picard_on_ill_conditioned_map(gen: torch.Generator) -> None:
    # Symmetric, eigenvalues 0.99 ... 0.99e-3: Picard needs about log(1e-11)/log(0.99) ~ 2500 steps.
    fn, z0, exact = linear_problem(gen, n=32, batch=4, lipschitz=0.99, cond=1e3, symmetric=True)
    picard = solve(fn, z0, solver="picard", atol=1e-11, rtol=0.0, max_iter=20000)
    anderson = solve(fn, z0, solver="anderson", atol=1e-11, rtol=0.0, max_iter=20000, memory=8)
    assert picard.all_converged and anderson.all_converged
    assert (anderson.z - exact).abs().max() < 1e-8
    print(f"ill-conditioned: picard {picard.iterations.tolist()} anderson {anderson.iterations.tolist()}")
    assert anderson.iterations.max() * 5 < picard.iterations.min()


@pytest.mark.parametrize("solver", SOLVERS)
def test_non_contractive_map_reports_instead_of_raising(solver: str) -> None:
    # Lipschitz 1.5 and f(z) - z >= 0.5 everywhere: no fixed point exists.
    def fn(z: torch.Tensor) -> torch.Tensor:
        return z + 1.0 + 0.5 * torch.sin(z)

    z0 = torch.zeros(3, 4, dtype=torch.float64)
    res = solve(fn, z0, solver=solver, max_iter=50)
    assert not res.converged.any()
    assert set(res.status.tolist()) <= {SolveStatus.MAX_ITER, SolveStatus.DIVERGED}
    assert torch.isfinite(res.z).all()  # best iterate, not a blown-up one
    with pytest.raises(ConvergenceError, match="did not converge"):
        solve(fn, z0, solver=solver, max_iter=50, raise_on_failure=True)


def test_expanding_picard_is_reported_diverged() -> None:
    res = solve(lambda z: 2.0 * z + 1.0, torch.zeros(2, 3, dtype=torch.float64), solver="picard",
                max_iter=1000)
    assert (res.status == SolveStatus.DIVERGED).all()
    assert (res.iterations < 40).all()  # residual 2^k passes 1e8 times the first after ~27 steps


def test_rotation_map_stays_at_cap_without_hanging() -> None:
    # An isometry (rotation by 90 degrees plus shift): residual never shrinks, never blows up.
    rot = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    res = solve(lambda z: z @ rot.T + 1.0, torch.zeros(2, 2, dtype=torch.float64), solver="picard", max_iter=40)
    assert (res.status == SolveStatus.MAX_ITER).all()
    assert (res.iterations == 40).all()


def test_non_finite_map_is_diverged_status() -> None:
    def fn(z: torch.Tensor) -> torch.Tensor:
        out = 0.5 * z + 1.0
        out[1] = float("nan")
        return out

    res = solve(fn, torch.zeros(3, 2, dtype=torch.float64), max_iter=100)
    assert res.status.tolist() == [SolveStatus.CONVERGED, SolveStatus.DIVERGED, SolveStatus.CONVERGED]
    assert res.iterations[1] == 0


def test_per_sample_tolerance_and_traces(gen: torch.Generator) -> None:
    fn, z0, _ = linear_problem(gen, batch=3, lipschitz=0.5)
    atol = torch.tensor([1e-2, 1e-6, 1e-12], dtype=torch.float64)
    res = solve(fn, z0, solver="picard", atol=atol, rtol=0.0, max_iter=500, trace=True)
    assert res.all_converged
    assert res.iterations[0] < res.iterations[1] < res.iterations[2]
    assert (res.abs_residual <= atol).all()
    assert res.trace is not None and res.trace.shape[0] == 3
    for i in range(3):  # the trace stops (NaN) once a sample has converged
        k = int(res.iterations[i])
        assert torch.isfinite(res.trace[i, : k + 1]).all()
        assert torch.isnan(res.trace[i, k + 1:]).all()
        assert res.trace[i, k] <= atol[i]


def test_best_iterate_has_the_lowest_residual() -> None:
    # Residual oscillates: best and last iterates differ.
    rot = 1.1 * torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    fn = lambda z: z @ rot.T + 1.0  # noqa: E731
    z0 = torch.zeros(1, 2, dtype=torch.float64)
    best = solve(fn, z0, solver="picard", max_iter=7, trace=True)
    last = solve(fn, z0, solver="picard", max_iter=7, return_best=False)
    assert best.abs_residual.item() == pytest.approx(torch.nanquantile(best.trace, 0.0).item())
    assert best.abs_residual.item() < last.abs_residual.item()


@pytest.mark.parametrize("solver", SOLVERS)
def test_samples_are_independent_of_batch_mates(solver: str, gen: torch.Generator) -> None:
    a = contractive_linear(6, 0.9, gen)
    b = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    fn = lambda z: torch.tanh(z @ a.T) + b  # noqa: E731
    full = solve(fn, torch.zeros(4, 6, dtype=torch.float64), solver=solver, atol=1e-12, rtol=0)
    b_one = b[2:3]
    alone = solve(lambda z: torch.tanh(z @ a.T) + b_one, torch.zeros(1, 6, dtype=torch.float64),
                  solver=solver, atol=1e-12, rtol=0)
    assert full.iterations[2] == alone.iterations[0]
    torch.testing.assert_close(full.z[2:3], alone.z, atol=1e-14, rtol=0)


def test_same_inputs_same_bits(gen: torch.Generator) -> None:
    fn, z0, _ = linear_problem(gen)
    r1 = solve(fn, z0, atol=1e-12)
    r2 = solve(fn, z0, atol=1e-12)
    assert torch.equal(r1.z, r2.z) and torch.equal(r1.iterations, r2.iterations)


def test_unknown_solver_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match="unknown solver 'newton'; known: anderson, picard"):
        solve(lambda z: z, torch.zeros(1, 2), solver="newton")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"solver": "picard", "damping": 1.5}, r"picard.damping = 1.5; expected a finite number in \(0, 1\]"),
        ({"solver": "anderson", "memory": 0}, "anderson.memory = 0"),
        ({"solver": "picard", "memory": 3}, r"solver 'picard' got options \['memory'\]"),
        ({"max_iter": -1}, "max_iter = -1"),
        ({"atol": -1.0}, "atol = -1.0"),
        ({"solver": Picard(), "damping": 0.5}, "given with a solver object"),
    ],
)
def test_bad_solver_settings_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        solve(lambda z: 0.5 * z, torch.zeros(2, 3), **kwargs)


def test_bad_map_or_start_gives_one_line_errors() -> None:
    with pytest.raises(InputError, match=r"returned \(2, 4\); expected a tensor of shape \(2, 3\)"):
        solve(lambda z: torch.zeros(2, 4), torch.zeros(2, 3))
    with pytest.raises(InputError, match="z0 contains NaN"):
        solve(lambda z: z, torch.full((2, 3), float("nan")))
    with pytest.raises(InputError, match="z0 has dtype int64; expected float32 or float64"):
        solve(lambda z: z, torch.zeros(2, 3, dtype=torch.int64))


def test_solver_objects_are_accepted() -> None:
    res = solve(lambda z: 0.5 * z + 1.0, torch.zeros(2, 3, dtype=torch.float64), solver=Anderson(memory=2),
                atol=1e-12)
    assert res.solver == "anderson" and torch.allclose(res.z, torch.full_like(res.z, 2.0))


def test_return_value_gives_the_map_value_of_each_samples_last_check() -> None:
    # z -> z / 2 + 1 from 0: z_k = 2 - 2^(1-k), residual 2^-k; with atol 2^-3 - eps a sample stops at k = 3
    # and returns f(z_3) = z_4 = 2 - 2^-3 (a reading, as the machine's sampled loop gives), not z_3
    fn = lambda z: z / 2 + 1  # noqa: E731
    z0 = torch.zeros(2, 1, dtype=torch.float64)
    atol = torch.tensor([0.125, 0.5], dtype=torch.float64)
    out = solve(fn, z0, solver="picard", atol=atol, rtol=0.0, return_best=False, return_value=True)
    assert out.iterations.tolist() == [3, 1]
    assert out.z.flatten().tolist() == [2 - 2 ** -3, 2 - 2 ** -1]
    plain = solve(fn, z0, solver="picard", atol=atol, rtol=0.0, return_best=False)
    assert plain.z.flatten().tolist() == [2 - 2 ** -2, 2 - 2 ** 0]
    with pytest.raises(InputError, match="return_value"):
        solve(fn, z0, return_value=True)
