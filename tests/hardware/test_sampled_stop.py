"""The early stop reads the machine: it is decided on the ADC's converted samples, one every m round trips,
its noise floor is the sampled one, and a slow collective mode does not fool it (docs/PHYSICS.md
sections 3 and 6; aocsim.hardware.engine.sampling).

Yardsticks independent of the code under test: AR(2) recurrences simulated directly, the loop iterated
with `iterate` and converted by hand, the exact fixed point of the noise-free loop, the stationary spread
of a long noisy run, and the eigenvalues of the loop's Jacobian from `torch.linalg`.
"""

from __future__ import annotations

import pytest
import torch

from aocsim import OpticalLoop, SolveStatus, load_device
from aocsim.hardware.engine import keys, settling
from aocsim.hardware.engine.dynamics import PATIENCE, LoopMap
from aocsim.hardware.engine.sampling import SampledLoop
from aocsim.hardware.physics import components as C
from aocsim.hardware.physics.sources import without_noise
from aocsim.solve.core import FLOOR_SPREADS, solve

A = torch.tensor([[0.9, 0.5, -0.5, 0.95, 0.5]], dtype=torch.float64)  # slow, medium, negative, slower, complex (b)


@pytest.mark.parametrize("b", [0.0, -0.2, -0.5])
def test_sampled_residual_reduces_to_the_per_iteration_one(b: float) -> None:
    ch = settling.Channels(torch.full_like(A, 1e-4), A, b)
    one = settling.residual_at(ch, FLOOR_SPREADS)
    assert torch.allclose(settling.residual_at(ch, FLOOR_SPREADS, interval=1, quantum_var=0.0), one, rtol=1e-12)
    assert torch.allclose(ch.residual_sq(1), 2 * 1e-4 / ((1 + b) * (1 - b + A)), rtol=1e-12)
    if b == 0.0:  # c(m) = a^m s^2, |1 - mu^m|^2 = (1 - a^m)^2
        for m in (2, 8):
            assert torch.allclose(ch.residual_sq(m), 2 * ch.spread_sq() * (1 - A ** m), rtol=1e-12)
            assert torch.allclose(settling.gap_sq(A, b, m), (1 - A ** m) ** 2, rtol=1e-12)
    # m = 1 gap: (1 - mu)^2 for real roots, 1 - a - b for a complex pair (the per-iteration formula)
    disc = A * A + 4 * b
    root = (A + torch.where(A < 0, -1.0, 1.0) * disc.clamp_min(0).sqrt()) / 2
    assert torch.allclose(settling.gap_sq(A, b, 1), torch.where(disc >= 0, (1 - root) ** 2, 1 - A - b), rtol=1e-12)


@pytest.mark.parametrize("b", [0.0, -0.2, -0.5])
def test_sampled_floor_matches_a_simulated_ar2_read_by_an_adc(b: float) -> None:
    # 400 replicas x 5 channels of d[k+1] = a d[k] + b d[k-1] + e[k], std(e) = 3e-2, read every m = 8
    # through a 5-bit converter over [-1, 1] (LSB 0.065: spreads >= 0.035 dither it, the rounding error is
    # uniform to exp(-2 pi^2 (0.035 / 0.065)^2) = 0.3 % and independent between samples)
    m, bits, reps = 8, 5, 400
    gen = torch.Generator().manual_seed(1)
    a = A.expand(reps, -1)
    d = prev = torch.zeros_like(a)
    samples = []
    for k in range(400 + 8 * 250):
        d, prev = a * d + b * prev + 3e-2 * torch.randn(a.shape, generator=gen, dtype=torch.float64), d
        if k >= 400 and k % m == 0:
            samples.append(C.quantize_range(d, -1.0, 1.0, bits))
    s = torch.stack(samples)
    measured = ((s[1:] - s[:-1]) ** 2).mean((0, 1))  # per channel, 249 x 400 differences
    ch = settling.Channels(torch.full_like(A, 9e-4), A, b)
    lsb_var = C.code_step(-1.0, 1.0, bits) ** 2 / 12
    predicted = ch.residual_sq(m)[0] + 2 * lsb_var
    # 1e5 differences per channel, nearly independent 8 steps apart: mean square to ~0.5 % (1 sigma)
    assert torch.allclose(measured, predicted, rtol=0.03), (measured, predicted)
    total = settling.residual_at(ch, 1.0, interval=m, quantum_var=lsb_var) ** 2
    assert float(total) == pytest.approx(float(measured.sum()), rel=0.03)
    assert float(2 * lsb_var / predicted.max()) > 0.1  # the converter's share is well above the tolerance


def _small_loop(adc_bits: int | None) -> tuple[OpticalLoop, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    w = 0.3 * torch.randn(16, 16, generator=gen, dtype=torch.float64) / 4
    dev = load_device("ideal", {"readout.adc_bits": adc_bits, "readout.range_v": [-1.0, 1.0]})
    return OpticalLoop(dev, w, alpha=0.5, gain="absolute"), 0.2 * torch.rand(6, 16, generator=gen, dtype=torch.float64)


def test_the_early_stop_returns_the_converted_sample_it_read() -> None:
    loop, x = _small_loop(8)
    m, r = 8, loop.parts.readout
    result = loop.solve(x, atol=1e-3, rtol=0.0)
    assert bool((result.status == SolveStatus.CONVERGED).all()), result.summary()
    its = result.iterations
    assert bool((its % m == 0).all() & (its >= m).all()), its
    # by hand: the analog state after k round trips, and after k - m, each through the ADC
    low, high = (float(v) for v in r.range_v)
    for i in range(x.shape[0]):
        k = int(its[i])
        z = loop.iterate(torch.zeros(1, 16, dtype=torch.float64), x[i:i + 1], k)
        read, before = (C.quantize_range(v, low, high, 8) for v in (z, loop.iterate(
            torch.zeros(1, 16, dtype=torch.float64), x[i:i + 1], k - m)))
        assert torch.equal(result.z[i:i + 1], read)
        assert float((read - before).norm()) == pytest.approx(float(result.abs_residual[i]), abs=1e-15)
        assert float((read - before).norm()) <= 1e-3
    # priced as read: one conversion of every channel per sample
    assert result.activity.adc_conversions.tolist() == (16 * its // m).tolist()


def test_without_a_converter_the_stop_still_judges_every_mth_state() -> None:
    loop, x = _small_loop(None)
    result = loop.solve(x, atol=1e-9, rtol=0.0)
    k = int(result.iterations[0])
    assert k % 8 == 0
    assert torch.allclose(result.z[:1], loop.iterate(torch.zeros(1, 16, dtype=torch.float64), x[:1], k), rtol=1e-12)


# A slow collective mode: W = 0.47 u u^T of rank one, so the loop's Jacobian alpha + W diag(tanh') has an
# eigenvalue 0.97 along u while every channel's own slope (the diagonal the per-channel reading uses) is
# 0.5 + 0.47 u_j^2 ~ 0.51. The input lies along u: the state approaches z* along the slow mode.
N, B = 48, 32


@pytest.fixture(scope="module")
def collective() -> dict:
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(N, generator=gen, dtype=torch.float64)
    u = u / u.norm()
    w = 0.47 * torch.outer(u, u)
    x = 0.004 * u + 0.0003 * torch.randn(B, N, generator=gen, dtype=torch.float64)
    dev = load_device("ideal", {"noise.thermal.enabled": True, "noise.multiplier": 30.0})
    loop = OpticalLoop(dev, w, alpha=0.5, gain="absolute")
    with torch.no_grad():
        z_star = OpticalLoop(without_noise(dev), w, alpha=0.5, gain="absolute").solve(
            x, max_iter=5000, atol=1e-13, rtol=0.0).z
        run = loop.iterate(z_star, x, 3000, generator=11, trajectory=True)[300:]
        spread = float(((run - z_star) ** 2).sum(-1).mean().sqrt())  # 2700 x 32 states: to ~2 %
    jac = 0.5 * torch.eye(N, dtype=torch.float64) + w * (1 - torch.tanh(z_star[0]) ** 2)
    return {"loop": loop, "x": x, "z_star": z_star, "spread": spread,
            "slowest": float(torch.linalg.eigvals(jac).real.max())}


def test_per_channel_status_fires_far_out_along_a_slow_collective_mode(collective: dict) -> None:
    # The yardstick of the problem: the per-iteration, per-channel status fires far (> 3 spreads) from z*.
    c = collective
    m = LoopMap(c["loop"], c["x"], B, keys.as_key(5), torch.arange(B))
    old = solve(m, torch.zeros(B, N, dtype=torch.float64), solver="picard", atol=0.0, rtol=0.0, max_iter=3000,
                return_best=False, patience=10)
    assert bool((old.status == SolveStatus.NOISE_FLOOR).all())
    assert float(((old.z - c["z_star"]).norm(dim=1) / c["spread"]).min()) > 3.0


def test_sampled_status_stays_within_the_stated_spreads_of_a_slow_collective_mode(collective: dict) -> None:
    c = collective
    assert c["slowest"] == pytest.approx(0.97, abs=0.005)
    start = float((c["z_star"].norm(dim=1) / c["spread"]).min())
    assert start > 10 * FLOOR_SPREADS  # the state starts far outside: the status has to judge the approach
    solved = c["loop"].solve(c["x"], generator=5, atol=0.0, rtol=0.0, max_iter=3000)
    fired = solved.status == SolveStatus.NOISE_FLOOR
    assert float(fired.double().mean()) >= 0.9, solved.summary()
    distance = (solved.z[fired] - c["z_star"][fired]).norm(dim=1) / c["spread"]
    assert float(distance.median()) <= FLOOR_SPREADS, distance
    # One mode carries most of the displacement, so 3 samples' mean square has few degrees of freedom: a
    # sample can fire somewhat beyond FLOOR_SPREADS, none beyond 3 spreads (the per-channel status: 15-16)
    assert float(distance.max()) <= 1.5 * FLOOR_SPREADS, distance


def test_power_iteration_finds_the_slow_collective_eigenvalue(collective: dict) -> None:
    c = collective
    sampled = SampledLoop(LoopMap(c["loop"], c["x"], B, keys.as_key(7), torch.arange(B)), 8, (-10.0, 10.0, None))
    z = c["z_star"]
    for _ in range(20):  # 40 power steps from the fixed start
        sampled(z)
        lam = sampled.slowest_eigenvalue(sampled.before)
    assert torch.allclose(lam, torch.full_like(lam, c["slowest"]), atol=0.01), (lam, c["slowest"])
    assert PATIENCE == 3


def test_the_readout_stops_status_keeps_the_solvers_patience_in_round_trips(collective: dict) -> None:
    # The readout stop judges its status on every round trip: the solver's patience (10 round trips), not the
    # early stop's 3 samples. Three round trips' residuals say less than three samples' and fire sooner.
    c = collective
    runs = {p: c["loop"].solve(c["x"], generator=5, stop="readout", atol=0.0, rtol=0.0, patience=p)
            for p in (None, 10, 3)}
    assert torch.equal(runs[None].iterations, runs[10].iterations)
    assert torch.equal(runs[None].status, runs[10].status)
    assert not torch.equal(runs[None].iterations, runs[3].iterations)


@pytest.mark.parametrize("trace", [False, True])
def test_a_fixed_count_runs_and_prices_exactly_its_samples(trace: bool) -> None:
    # atol = rtol = None: max_iter // m whole samples, no stop (with a trace, two equal ADC codes are no stop
    # either); the state returned is the last of them, converted, and the activity prices just those
    loop, x = _small_loop(8)
    m, r = 8, loop.parts.readout
    result = loop.solve(x, atol=None, rtol=None, max_iter=43, trace=trace)
    assert result.iterations.tolist() == [40] * x.shape[0]
    z = loop.iterate(torch.zeros(x.shape[0], 16, dtype=torch.float64), x, 40)
    assert torch.equal(result.z, C.quantize_range(z, *(float(v) for v in r.range_v), 8))
    assert result.activity.adc_conversions.tolist() == [16 * 40 // m] * x.shape[0]
