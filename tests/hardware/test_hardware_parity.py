"""The calibrated loop against the published twin's golden vectors, the per-stage
implementation and the exact DEQ path."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from aocsim import DEQ, DEQConfig, OpticalLoop, load_device, loop_step, solve
from aocsim.experiments.reference_loop import PerStageLoop
from _toolchain import NO_TOOLCHAIN

GOLDEN = sorted((Path(__file__).parents[1] / "data" / "golden").glob("*.npz"))


def _none_if_nan(value: np.ndarray) -> float | None:
    return None if math.isnan(float(value)) else float(value)


def _golden_loop(path: Path, compile: bool = False) -> tuple[OpticalLoop, dict]:
    d = dict(np.load(path))
    dev = load_device(f"aoc{int(d['n'])}-twin", {"crosstalk.pbs.enabled": bool(d["pbs_crosstalk"])})
    loop = OpticalLoop(dev, torch.as_tensor(d["weight"]), bias=torch.as_tensor(d["bias"]),
                       alpha=_none_if_nan(d["alpha"]), beta=_none_if_nan(d["beta"]),
                       gamma=_none_if_nan(d["gamma"]), gain=str(d["gain"]), compile=compile)
    return loop, {k: torch.as_tensor(v) if v.dtype != object and v.ndim else v for k, v in d.items()}


def test_all_golden_cases_present() -> None:
    names = {p.stem for p in GOLDEN}
    assert names == {"aoc16_absolute", "aoc16_normalized", "aoc16_pbs", "aoc48_absolute", "aoc48_momentum",
                     "aoc48_normalized", "aoc48_pbs"}


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_twin_profiles_reproduce_golden_vectors(path: Path) -> None:
    loop, d = _golden_loop(path)
    assert loop.weight.dtype == torch.float32
    nxt = loop.step(d["z"], d["x"])
    p, q = loop.detectors(d["z"])
    traj = loop.iterate(d["z"], d["x"], 30, trajectory=True)
    assert (nxt - d["next_z"]).abs().max() < 1e-5
    assert (p - d["detector_pos"]).abs().max() < 1e-5
    assert (q - d["detector_neg"]).abs().max() < 1e-5
    assert (traj - d["trajectory"]).abs().max() < 1e-5


@pytest.mark.slow
@pytest.mark.skipif(NO_TOOLCHAIN, reason="needs a C++ compiler and Python headers")
@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_compiled_loop_reproduces_the_golden_trajectories(path: Path) -> None:
    loop, d = _golden_loop(path, compile=True)
    steps = d["trajectory"].shape[0]
    with torch.no_grad():  # per-step graphs for the trajectory, blocks of steps for the final state
        traj = loop.iterate(d["z"], d["x"], steps, trajectory=True)
        final = loop.iterate(d["z"], d["x"], steps)
    assert (traj - d["trajectory"]).abs().max() < 1e-5
    assert (final - d["trajectory"][-1]).abs().max() < 1e-5


@pytest.mark.parametrize("path", GOLDEN[:2], ids=[p.stem for p in GOLDEN[:2]])
def test_loop_step_function_matches_the_loop_object(path: Path) -> None:
    loop, d = _golden_loop(path)
    one = loop_step(loop.device, d["weight"], d["z"], d["x"], bias=d["bias"],
                    alpha=loop.alpha.value if loop.alpha else None,
                    beta=loop.beta.value if loop.beta else None, gain=loop.gain)
    assert torch.equal(one, loop.step(d["z"], d["x"]))


CASES = [("aoc48-twin", {}), ("aoc48-twin", {"crosstalk.pbs.enabled": True}), ("aoc16-twin", {}),
         ("aoc16-twin", {"crosstalk.pbs.enabled": True}),
         ("aoc48", {"noise.multiplier": 0.0, "loop.bandwidth_hz": 20e6}),
         ("ideal", {})]


@pytest.mark.parametrize(("name", "overrides"), CASES)
@pytest.mark.parametrize("gain", ["normalized", "absolute"])
def test_folded_loop_equals_per_stage_pipeline(name: str, overrides: dict, gain: str, gen: torch.Generator) -> None:
    dev = load_device(name, overrides)
    n = dev.channels or 12
    w = torch.randn(n, n, generator=gen, dtype=torch.float64)
    z = 0.4 * torch.randn(6, n, generator=gen, dtype=torch.float64)
    x = torch.rand(6, n, generator=gen, dtype=torch.float64)
    loop = OpticalLoop(dev, w, bias=0.1 * torch.ones(n, dtype=torch.float64), alpha=0.5,
                       beta=18.6 if gain == "normalized" else None, gamma=0.2, gain=gain,
                       generator=torch.Generator().manual_seed(7)).drifted(torch.Generator().manual_seed(8))
    ref = PerStageLoop(loop)
    torch.testing.assert_close(loop.step(z, x, z_prev=0.9 * z), ref.step(z, x, z_prev=0.9 * z), atol=1e-12, rtol=0)


def test_ideal_profile_equals_exact_deq_path(gen: torch.Generator) -> None:
    model = DEQ(DEQConfig(24, 10, 3, alpha=0.5), beta=0.4, generator=gen)
    with torch.no_grad():
        model.weight.copy_(torch.randn(24, 24, generator=gen, dtype=torch.float64) / 24)
        x = torch.randn(16, 10, generator=gen, dtype=torch.float64)
        u = model.injection(x)
        z = torch.randn(16, 24, generator=gen, dtype=torch.float64)
        w = model.operator()
        ideal = load_device("ideal")
        absolute = OpticalLoop(ideal, w, alpha=0.5, gain="absolute")
        # The normalized convention scales by beta / N times W / max|W|: the same operator.
        n, m = 24, float(w.abs().max())
        normalized = OpticalLoop(ideal, w, alpha=0.5, beta=n * m)
        exact = model.step(z, u)
        assert (absolute.step(z, u) - exact).abs().max() < 1e-12
        assert (normalized.step(z, u) - exact).abs().max() < 1e-12
        # And the fixed points agree: the exact path is just another loop.
        loop_fp = solve(lambda s: absolute.step(s, u), torch.zeros_like(u), atol=1e-13, rtol=0)
        deq_fp = model(x, atol=1e-13, rtol=0).z
    assert (loop_fp.z - deq_fp).abs().max() < 1e-12
