"""The chip's temperature since calibration (`environment.*`; aocsim/hardware/physics/temperature.py,
docs/PHYSICS.md section 3): the analog functions' gains, the LEDs' cubic shapes and the hold's leakage move
by the documented laws; at dT = 0, or with every coefficient 0 (every bundled profile), nothing moves."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from aocsim.errors import ProfileError
from aocsim.execute.deq_compile import fit_profile
from aocsim.execute.elementwise import AnalogElementwise
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.engine.step import nonlinearity
from aocsim.hardware.engine.emitter_calibration import measured_shapes
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.programming import emitter_cubics
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.physics.hold import Hold
from aocsim.hardware.physics.noise import BOLTZMANN_J_PER_K
from aocsim.hardware.profiles.profile import load_device

F64 = torch.float64
COEFFS = {"environment.function_gain_per_k": 0.002, "environment.led_cubic_per_k": 0.005,
          "environment.hold_leakage_per_k": math.log(2) / 10,  # leakage doubling every 10 K
          "environment.loop_gain_per_k": -0.003}


@pytest.mark.parametrize("name", ["ideal", "aoc48-twin", "aoc16-twin", "aoc48", "aoc16", "aoc-projected"])
def test_every_bundled_profile_is_at_its_calibration_temperature_with_no_coefficient(name: str) -> None:
    v = load_device(name).values
    assert all(v[k] == 0.0 for k in ("environment.temperature_delta_k", *COEFFS))


def test_the_hold_leakage_grows_by_exp_c_dt() -> None:
    for dt, factor in [(0.0, 1.0), (10.0, 2.0), (20.0, 4.0), (-10.0, 0.5)]:
        dev = load_device("aoc48", {**COEFFS, "environment.temperature_delta_k": dt})
        assert Hold.of(dev.parts).leakage_a == pytest.approx(1e-14 * factor, rel=1e-12, abs=0)


def test_the_holds_kt_over_c_is_drawn_at_the_chips_temperature() -> None:
    """std = sqrt(k (T + dT) / C) times the noise multiplier, T the profile's calibration temperature."""
    for dt in (0.0, 30.0, -50.0):
        dev = load_device("aoc48", {"environment.temperature_delta_k": dt})
        v = dev.parts
        expected = math.sqrt(BOLTZMANN_J_PER_K * (v.noise.thermal.temperature_k + dt)
                             / v.readout.hold_capacitance_f) * v.noise.multiplier
        assert Hold.of(v).noise_std_v == pytest.approx(expected, rel=1e-12, abs=0)
    assert v.noise.thermal.temperature_k == 300.0 and expected == pytest.approx(
        math.sqrt(250 / 300) * Hold.of(load_device("aoc48").parts).noise_std_v, rel=1e-12)


def test_a_warmer_chip_moves_the_loop_sigmoids_swing_by_1_plus_c_dt_and_not_what_the_compiler_knows() -> None:
    """t = d u (1 + |u|^c)^(-1/c) + f + g z: at dT the loop's d is d (1 + c_n dT), so t - f - g z scales by it
    at every z; the DEQ compiler's profile is the chip at its calibration temperature."""
    w = torch.randn(48, 48, generator=torch.Generator().manual_seed(0), dtype=F64) / 48
    z = torch.linspace(-2, 2, 5 * 48, dtype=F64).view(5, 48)
    cold_dev = load_device("aoc48", COEFFS)
    warm_dev = load_device("aoc48", {**COEFFS, "environment.temperature_delta_k": 12.0})
    cold, warm = (OpticalLoop(d, w, alpha=0.5, beta=18.6, generator=1) for d in (cold_dev, warm_dev))
    factor = 1 - 0.003 * 12.0
    torch.testing.assert_close(warm.coeffs[3], cold.coeffs[3] * factor, rtol=1e-15, atol=0)
    assert torch.equal(warm.coeffs[[0, 1, 2, 4, 5]], cold.coeffs[[0, 1, 2, 4, 5]])
    f, g = float(cold.coeffs[4]), float(cold.coeffs[5])
    t_cold, t_warm = (nonlinearity(z, loop.constants().sigmoid, False) - f - g * z for loop in (cold, warm))
    torch.testing.assert_close(t_warm, t_cold * factor, rtol=1e-12, atol=1e-15)
    assert float((t_warm - t_cold).abs().max()) > 0.005  # 3.6 % of the 0.215 V swing
    known = fit_profile(warm_dev)
    assert known.parts.environment.temperature_delta_k == 0.0
    assert torch.equal(OpticalLoop(known, w, alpha=0.5, beta=18.6, generator=1).coeffs, cold.coeffs)


def test_the_exact_tanh_stage_takes_no_temperature_gain() -> None:
    with pytest.raises(ProfileError, match="environment.loop_gain_per_k = 0.01; expected 0 on a tanh"):
        load_device("ideal", {"environment.loop_gain_per_k": 0.01})


def _functions(overrides: dict) -> AnalogElementwise:
    quiet = {"injection.dac_bits": None, "readout.adc_bits": None, "elementwise.gain_std": 0.01,
             "elementwise.offset_std": 0.002, "elementwise.shape_std": 0.0, "elementwise.noise_std": 0.0}
    device = load_device("aoc48", {**quiet, **overrides})
    scales = {site: (-4.0, 4.0, 2.0) for site in ("conv", "dt", "gate")}
    return AnalogElementwise(device, 0, scales, dict.fromkeys(scales, 50), F64, calibrate=True)


def test_a_warmer_chip_moves_the_calibrated_functions_by_c_dt_times_their_gain() -> None:
    """Calibrated at dT = 0, read at dT: ((1 + g)(1 + c dT) f + o - o_fit) / g_fit, so the corrected reading
    moves by c dT (1 + g) f / g_fit from the cold chip's; the fit itself does not see dT."""
    x = torch.linspace(-3, 3, 50, dtype=F64).repeat(4, 1)
    cold = _functions(COEFFS)
    warm = _functions({**COEFFS, "environment.temperature_delta_k": 10.0})
    for site, f in (("gate", F.silu), ("dt", F.softplus)):
        assert torch.equal(warm.fitted_gain[site], cold.fitted_gain[site])
        moved = getattr(warm, "silu" if f is F.silu else "softplus")(x, site) - getattr(
            cold, "silu" if f is F.silu else "softplus")(x, site)
        expected = 0.002 * 10.0 * cold.gain[site] * f(x) / cold.fitted_gain[site]
        torch.testing.assert_close(moved, expected, rtol=1e-9, atol=1e-12)
        assert float(moved.abs().max()) > 0.05  # 2 % of a full scale of about 2.5


def test_a_warmer_chip_moves_the_leds_t3_and_t2_by_1_plus_c_dt_not_what_the_chip_measured() -> None:
    cold = load_device("aoc48", COEFFS)
    warm = load_device("aoc48", {**COEFFS, "environment.temperature_delta_k": -8.0})
    a = emitter_cubics(cold.parts, 48, dtype=F64, device="cpu", tile=1)
    b = emitter_cubics(warm.parts, 48, dtype=F64, device="cpu", tile=1)
    torch.testing.assert_close(b[:, :2], a[:, :2] * (1 - 0.005 * 8.0), rtol=1e-14, atol=0)
    assert torch.equal(b[:, 2:], a[:, 2:])
    assert all(torch.equal(p, q) for p, q in zip(measured_shapes(warm, 48, 0, 1.0, F64, "cpu"),
                                                  measured_shapes(cold, 48, 0, 1.0, F64, "cpu")))


def test_at_the_calibration_temperature_the_coefficients_change_no_bit() -> None:
    """dT = 0 with every coefficient set: the tiles (noisy aoc48, a spread of LED cubics, a held analog sum)
    and the analog functions give the bits of the profile without coefficients."""
    w = torch.randn(40, 72, generator=torch.Generator().manual_seed(0), dtype=F64)
    t = torch.rand(6, 72, generator=torch.Generator().manual_seed(1), dtype=F64) * 2 - 1
    outs = []
    for overrides in ({}, COEFFS):
        dev = load_device("aoc48", overrides)
        tiles = TiledMatrix(dev, w, tile_size=24, generator=3, mount=Mount(count=2, multiplexed=True))
        outs.append(tiles(t, passes=2, call=1).y)
    assert torch.equal(outs[0], outs[1])
    square = torch.randn(48, 48, generator=torch.Generator().manual_seed(4), dtype=F64) / 48
    loops = [OpticalLoop(load_device("aoc48", o), square, alpha=0.5, beta=18.6, generator=2)
             for o in ({}, COEFFS)]
    z = torch.rand(4, 48, generator=torch.Generator().manual_seed(5), dtype=F64)
    assert torch.equal(*(loop.step(z, z, generator=torch.Generator().manual_seed(7)) for loop in loops))
    x = torch.linspace(-3, 3, 50, dtype=F64)[None]
    assert torch.equal(_functions({}).silu(x, "gate"), _functions(COEFFS).silu(x, "gate"))


def test_the_drive_range_a_loads_bias_is_sized_for_follows_the_warm_sigmoid() -> None:
    # The bias a load needs reads the emitters' drive over the sigmoid the loop runs: at dT its swing d (1 + c dT)
    from aocsim.hardware.physics.light import full_scale_drive

    cold = load_device("aoc48", COEFFS).parts
    warm = load_device("aoc48", {**COEFFS, "environment.temperature_delta_k": 12.0}).parts
    a, b, c, d, f, *g = cold.nonlinearity.coeffs
    z = torch.linspace(cold.saturation.low_v, cold.saturation.high_v, 257, dtype=torch.float64)
    offset = f + (g[0] if g else 0.0) * z
    factor = 1 + COEFFS["environment.loop_gain_per_k"] * 12.0
    torch.testing.assert_close(full_scale_drive(warm) - offset, (full_scale_drive(cold) - offset) * factor,
                               rtol=1e-12, atol=1e-15)
