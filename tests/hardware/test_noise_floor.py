"""The noise-floor status: it fires only when the state is within FLOOR_SPREADS stationary spreads of
the fixed point (docs/PHYSICS.md section 3), for loops whose channels sit at the rails, whose leak is
strongly negative, and that contract slowly.

Yardsticks, independent of the status's own prediction: the exact fixed point z* of the noise-free
loop, and the stationary spread S measured as the rms of |z - z*| over a long noisy run.
"""

from __future__ import annotations

import math

import pytest
import torch

from aocsim import OpticalLoop, SolveStatus, load_device
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.dynamics import LoopMap
from aocsim.hardware.physics.sources import without_noise
from aocsim.solve.core import FLOOR_SPREADS

N, B = 48, 64
# Thermal noise only (a constant variance per channel), gain "absolute": one step is
# y = clamp(alpha z + W tanh(z) + x) plus noise. W is weak (|W| ~ 0.01), so each channel's slope is
# its leak, the one-channel reading of `settling` holds, and the slow and negative cases are set by alpha.
CASES = {  # name: (alpha, rails)
    "clamped": (0.9, 0.5),  # half the channels driven to +-1 V, far beyond the +-0.5 V rails
    "negative_leak": (-0.9, None),
    "slow": (0.9, None),
}


def _loops(case: str) -> tuple[OpticalLoop, OpticalLoop, torch.Tensor]:
    alpha, rail = CASES[case]
    gen = torch.Generator().manual_seed(0)
    overrides: dict = {"noise.thermal.enabled": True, "noise.multiplier": 30.0}
    w = 0.01 * torch.randn(N, N, generator=gen, dtype=torch.float64) / math.sqrt(N)
    x = 0.05 * torch.rand(B, N, generator=gen, dtype=torch.float64) - 0.025
    if rail is not None:
        overrides |= {"saturation.enabled": True, "saturation.low_v": -rail, "saturation.high_v": rail}
        x[:, : N // 2] = torch.where(torch.rand(B, N // 2, generator=gen) < 0.5, -1.0, 1.0).double()
    dev = load_device("ideal", overrides)
    return (OpticalLoop(dev, w, alpha=alpha, gain="absolute"),
            OpticalLoop(without_noise(dev), w, alpha=alpha, gain="absolute"), x)


def spread_of(m: LoopMap, z: torch.Tensor) -> torch.Tensor:
    """[B]: the predicted stationary spread sqrt(sum_j s_j^2) about the fixed point near z (volts)."""
    return m.channels(z).spread_sq().sum(1).sqrt()


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> dict:
    loop, quiet, x = _loops(request.param)
    with torch.no_grad():
        z_star = quiet.solve(x, max_iter=5000, atol=1e-13, rtol=0.0).z
        run = loop.iterate(z_star, x, 600, generator=11, trajectory=True)[100:]
        # 500 iterations x 64 samples x 48 channels; the correlation time (1 + |a|) / (1 - |a|) = 19
        # leaves ~8e4 independent draws: S^2 to 0.5 % (1 sigma)
        spread = float(((run - z_star) ** 2).sum(-1).mean().sqrt())
        solved = loop.solve(x, generator=5, atol=0.0, rtol=0.0, max_iter=3000)  # only the noise floor stops it
    return {"name": request.param, "loop": loop, "x": x, "z_star": z_star, "run": run, "spread": spread,
            "solved": solved}


def test_fires_within_the_stated_multiple_of_the_stationary_spread(case: dict) -> None:
    solved, spread = case["solved"], case["spread"]
    fired = solved.status == SolveStatus.NOISE_FLOOR
    assert float(fired.double().mean()) >= 0.9, solved.summary()
    start = float((case["z_star"].norm(dim=1) / spread).min())
    assert start > 10 * FLOOR_SPREADS  # the state starts far outside: the status has to judge the approach
    distance = (solved.z[fired] - case["z_star"][fired]).norm(dim=1) / spread
    # The window's mean square residual has a sampling error (relative sqrt(2 / (48 x 10)), 0.065, for
    # the slow loop 1.2 spreads^2), so a state can fire a little beyond FLOOR_SPREADS; most fire inside.
    assert float(distance.median()) <= FLOOR_SPREADS, distance
    assert float(distance.max()) <= 1.25 * FLOOR_SPREADS, distance


def test_predicted_floor_and_spread_match_a_long_run(case: dict) -> None:
    # What the status relies on, against the long run: the stationary spread (`spread_of`) and the
    # rms residual of the settled loop (`noise_floor(z, 1)`, a state one spread away). Bound: 0.5 %
    # sampling error of each mean square and the coupling through W left out (about 0.4 % here).
    loop, run = case["loop"], case["run"]
    residual = float(((run[1:] - run[:-1]) ** 2).sum(-1).mean().sqrt())
    m = LoopMap(loop, case["x"], B, keys.as_key(3), torch.arange(B))
    with torch.no_grad():
        m(run[-1])
        spread, floor = float(spread_of(m, run[-1]).mean()), float(m.noise_floor(run[-1], 1.0).mean())
    assert abs(spread / case["spread"] - 1) < 0.02, (spread, case["spread"])
    assert abs(floor / residual - 1) < 0.02, (floor, residual)
    if case["name"] == "clamped":  # the rails hold half the channels (no noise there)
        rail = float(loop.parts.saturation.high_v)
        assert int(((case["z_star"].abs() - rail).abs() < 1e-12).sum()) == B * N // 2


def test_floor_is_finite_where_the_calibrated_sigmoid_crosses_zero() -> None:
    # aoc16's sigmoid has b = 0: at z = 0 (every solve's start) u = 0, where autograd through |u|^c
    # gives NaN; the channel slopes come from a central difference instead (aoc16's slope a d there).
    dev = load_device("aoc16")
    w = 0.1 * torch.randn(16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    loop = OpticalLoop(dev, w, alpha=0.5, beta=5.0, generator=0)
    m = LoopMap(loop, torch.full((2, 16), 0.05, dtype=torch.float64), 2, keys.as_key(1), torch.arange(2))
    z = torch.zeros(2, 16, dtype=torch.float64)
    with torch.no_grad():
        m(z)
        floor, spread = m.noise_floor(z, FLOOR_SPREADS), spread_of(m, z)
    assert bool(torch.isfinite(floor).all() & (floor > 0).all() & torch.isfinite(spread).all()), (floor, spread)
