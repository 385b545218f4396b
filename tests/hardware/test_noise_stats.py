"""Noise sources against their formulas, with tolerances from the sample size."""

from __future__ import annotations

import math

import pytest
import torch

from aocsim import OpticalLoop, load_device
from aocsim.hardware.physics import components as C
from aocsim.hardware.engine.budget import noise_budget
from aocsim.hardware.physics.noise import (BOLTZMANN_J_PER_K, ELECTRON_CHARGE_C, rin_relative_std, shot_current_std_a,
                                   thermal_current_std_a)
from aocsim.hardware.physics.sources import without_noise

DRAWS = 6000


def test_formulas_reproduce_the_published_magnitudes() -> None:
    # docs/PHYSICS.md section 3 (B = 50 MHz, T = 300 K).
    for current, expected in ((1e-6, 4.0e-9), (10e-6, 12.7e-9), (100e-6, 40e-9)):
        assert shot_current_std_a(current, 50e6) == pytest.approx(expected, rel=0.01)
    for r, expected in ((1e3, 28.8e-9), (1e4, 9.1e-9), (1e5, 2.9e-9)):
        assert thermal_current_std_a(300.0, r, 50e6) == pytest.approx(expected, rel=0.01)
    assert rin_relative_std(-140.0, 50e6) == pytest.approx(7.07e-4, rel=0.01)
    assert rin_relative_std(-130.0, 50e6) == pytest.approx(2.24e-3, rel=0.01)


def _samples(overrides: dict, gen: torch.Generator, n: int = 16):
    """Noiseless and noisy detector readings of one state repeated DRAWS times (twin of size 16)."""
    w = torch.randn(n, n, generator=gen, dtype=torch.float64)
    z = (0.3 * torch.randn(1, n, generator=gen, dtype=torch.float64)).expand(DRAWS, n).contiguous()
    quiet = OpticalLoop(load_device("aoc16-twin"), w, alpha=0.5, beta=18.6)
    noisy = OpticalLoop(load_device("aoc16-twin", overrides), w, alpha=0.5, beta=18.6)
    return quiet, noisy, z


def _check_moments(diff: torch.Tensor, expected_std: torch.Tensor) -> None:
    """Per channel: mean within 5 sigma / sqrt(n) of 0, variance within 5 sqrt(2 / n) of expected."""
    n = diff.shape[0]
    assert (diff.mean(0).abs() <= 5 * expected_std / math.sqrt(n)).all()
    ratio = diff.var(0) / expected_std**2
    assert ((ratio - 1).abs() <= 5 * math.sqrt(2 / (n - 1))).all(), ratio


def _gain(loop: OpticalLoop) -> float:
    return 18.6 * float(loop.optics.gain_scale)


def test_shot_noise_matches_2qIB(gen: torch.Generator) -> None:
    quiet, noisy, z = _samples({"noise.shot.enabled": True}, gen)
    p0, q0 = quiet.detectors(z[:1])
    p, q = noisy.detectors(z, generator=torch.Generator().manual_seed(1))
    v = noisy.device.values
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    for signal, sample in ((p0, p), (q0, q)):
        current = unit * (signal / _gain(noisy) + v["noise.bias_units"])
        std = _gain(noisy) * torch.sqrt(2 * ELECTRON_CHARGE_C * current * v["noise.bandwidth_hz"]) / unit
        _check_moments(sample - signal, std.squeeze(0))


def test_thermal_noise_matches_4kTB_over_R(gen: torch.Generator) -> None:
    quiet, noisy, z = _samples({"noise.thermal.enabled": True, "noise.thermal.feedback_resistance_ohm": 2e3}, gen)
    p0, _ = quiet.detectors(z[:1])
    p, _ = noisy.detectors(z, generator=torch.Generator().manual_seed(2))
    v = noisy.device.values
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    current_std = math.sqrt(4 * BOLTZMANN_J_PER_K * 300.0 * v["noise.bandwidth_hz"] / 2e3)
    _check_moments(p - p0, torch.full((16,), _gain(noisy) * current_std / unit, dtype=torch.float64))


def test_rin_is_multiplicative_on_each_led(gen: torch.Generator) -> None:
    quiet, noisy, z = _samples({"noise.rin.enabled": True, "noise.rin.rin_db_per_hz": -120.0}, gen)
    p0, _ = quiet.detectors(z[:1])
    p, _ = noisy.detectors(z, generator=torch.Generator().manual_seed(3))
    cubics = (tuple(map(float, c)) for c in (quiet.parts.emitter.poly_pos, quiet.parts.emitter.poly_neg))  # nominal
    u = C.led_pair(C.nonlinearity(z[:1], "algebraic_sigmoid", quiet.coeffs), *cubics)
    n = 16
    m_p = quiet.optics.m_det[:n]  # rows of D_P acting on u = [p, q]
    per_led = m_p[:, :n] * u[:, :n] + m_p[:, n:] * u[:, n:]  # [N_out, N_in] contributions
    std = _gain(noisy) * rin_relative_std(-120.0, 50e6) * per_led.pow(2).sum(1).sqrt()
    _check_moments(p - p0, std)


def test_loop_step_noise_combines_both_paths(gen: torch.Generator) -> None:
    quiet, noisy, z = _samples({"noise.shot.enabled": True, "noise.thermal.enabled": True}, gen)
    x = torch.zeros_like(z)
    y0 = quiet.step(z[:1], x[:1])
    y = noisy.step(z, x, generator=torch.Generator().manual_seed(4))
    p0, q0 = quiet.detectors(z[:1])
    v = noisy.device.values
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    th = thermal_current_std_a(300.0, 1e4, 50e6) ** 2

    def var_d(sig: torch.Tensor) -> torch.Tensor:  # detector units, before the gain
        cur = unit * (sig / _gain(noisy) + v["noise.bias_units"])
        return (2 * ELECTRON_CHARGE_C * cur * 50e6 + th) / unit**2

    std = _gain(noisy) * torch.sqrt(var_d(p0) + var_d(q0)).squeeze(0)  # 16 machine: no closed loop
    _check_moments(y - y0, std)


def test_per_stage_yardstick_draws_the_same_noise_distribution(gen: torch.Generator) -> None:
    # The bench's per-stage loop draws shot, thermal and RIN separately per path; the folded loop
    # merges the detector noises into one draw. Same noiseless point, same per-channel moments.
    from aocsim.experiments.reference_loop import PerStageLoop
    w = torch.randn(48, 48, generator=gen, dtype=torch.float64)
    z = (0.3 * torch.randn(1, 48, generator=gen, dtype=torch.float64)).expand(DRAWS, 48).contiguous()
    x = torch.zeros_like(z)
    quiet = OpticalLoop(without_noise(load_device("aoc48")), w, alpha=0.5, beta=18.6, generator=torch.Generator().manual_seed(2))
    noisy = OpticalLoop(load_device("aoc48"), w, alpha=0.5, beta=18.6, generator=torch.Generator().manual_seed(2))
    y0 = quiet.step(z[:1], x[:1])
    folded = noisy.step(z, x, generator=torch.Generator().manual_seed(5)) - y0
    per_stage = PerStageLoop(noisy).step(z, x, generator=torch.Generator().manual_seed(6)) - y0
    n = DRAWS
    assert ((folded.mean(0) - per_stage.mean(0)).abs() <= 5 * folded.std(0) * math.sqrt(2 / n)).all()
    ratio = per_stage.var(0) / folded.var(0)
    assert ((ratio - 1).abs() <= 5 * 2 * math.sqrt(1 / (n - 1))).all(), ratio
    # Pooled over the 48 channels the ratio is known to +-2 % (5 sigma), tight enough to miss
    # a dropped thermal term (about 11 % of the detector variance of aoc48).
    assert abs(float(ratio.mean()) - 1) <= 5 * 2 * math.sqrt(1 / ((n - 1) * 48)), float(ratio.mean())


def test_static_draws_have_their_documented_spread(gen: torch.Generator) -> None:
    w = torch.randn(48, 48, generator=gen, dtype=torch.float64)
    loop = OpticalLoop(without_noise(load_device("aoc48", {"slm.programming_error_levels": 0.5})), w, beta=18.6,
                       generator=gen)
    err = loop.programming_error * 255
    n = err.numel()
    assert abs(float(err.mean())) < 5 * 0.5 / math.sqrt(n)
    assert float(err.var()) / 0.25 == pytest.approx(1.0, abs=5 * math.sqrt(2 / n))
    twin = OpticalLoop(load_device("aoc48-twin"), w, beta=18.6).arrays.detector.output_pos
    chip = OpticalLoop(without_noise(load_device("aoc48", {"variation.relative_std": 0.02})), w, beta=18.6,
                       generator=gen).arrays.detector.output_pos
    rel = chip / twin - 1
    assert float(rel.std()) == pytest.approx(0.02, rel=5 * math.sqrt(1 / (2 * 47)))


def test_dac_error_is_uniform_with_lsb_squared_over_twelve(gen: torch.Generator) -> None:
    v = torch.rand(200_000, generator=gen, dtype=torch.float64) * 2.6 - 1.3
    q = C.quantize_range(v, -1.3, 1.3, 8)
    lsb = 2.6 / 255
    err = q - v
    assert err.abs().max() <= lsb / 2 + 1e-12
    assert float(err.var()) == pytest.approx(lsb**2 / 12, rel=0.02)


def test_noise_budget_totals() -> None:
    twin = noise_budget(load_device("aoc48-twin"))
    assert [r.source for r in twin] == ["total (per iteration)"] and twin[0].std_v == 0
    rows = {r.source: r for r in noise_budget(load_device("aoc48"))}
    per_iter = [r.std_v for r in rows.values() if r.when == "per iteration" and r.source != "total (per iteration)"]
    total = rows["total (per iteration)"]
    assert {"shot noise", "thermal (TIA) noise", "LED RIN"} <= set(rows)
    assert total.std_v == pytest.approx(math.sqrt(sum(s**2 for s in per_iter)), rel=0.3)
    assert 1e-5 < total.std_v < 3e-3  # the 0.1-3 mV per iteration range studied on the twin
    assert total.enob == pytest.approx((total.snr_db - 1.76) / 6.02)
    # More light, less relative shot noise: 100x the optical power cuts its std by about 10x.
    bright = {r.source: r for r in noise_budget(load_device("aoc48", {"noise.power_per_unit_w": 1e-2}))}
    assert bright["shot noise"].std_v == pytest.approx(rows["shot noise"].std_v / 10, rel=0.05)


def test_fixed_point_wander_scales_with_the_noise(gen: torch.Generator) -> None:
    n = 16
    w = torch.randn(n, n, generator=gen, dtype=torch.float64)
    w = 0.4 * w / torch.linalg.matrix_norm(w, ord=2)  # contraction |alpha| + ||W|| = 0.9
    x = 0.5 * torch.randn(64, n, generator=gen, dtype=torch.float64)
    exact = OpticalLoop(load_device("ideal"), w, alpha=0.5, gain="absolute").iterate(torch.zeros_like(x), x, 300)
    spread = []
    for r_f in (1e3, 1e3 / 16):  # thermal std grows 4x
        dev = load_device("ideal", {"noise.thermal.enabled": True, "noise.thermal.feedback_resistance_ohm": r_f,
                                    "noise.power_per_unit_w": 1e-6})
        loop = OpticalLoop(dev, w, alpha=0.5, gain="absolute")
        traj = loop.iterate(exact, x, 200, generator=torch.Generator().manual_seed(9), trajectory=True)
        spread.append(float((traj[50:] - exact).pow(2).mean().sqrt()))
    assert spread[1] / spread[0] == pytest.approx(4.0, rel=0.1)
