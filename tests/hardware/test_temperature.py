"""The chip's temperature since calibration (`environment.*`; aocsim/hardware/physics/temperature.py,
docs/PHYSICS.md section 3): the analog functions' gains, the LEDs' cubic shapes and the hold's leakage move
by the documented laws; at dT = 0, or with every coefficient 0 (every bundled profile), nothing moves."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from aocsim.execute.elementwise import AnalogElementwise
from aocsim.hardware.engine.emitter_calibration import measured_shapes
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.programming import emitter_cubics
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.physics.hold import Hold
from aocsim.hardware.profiles.profile import load_device

F64 = torch.float64
COEFFS = {"environment.function_gain_per_k": 0.002, "environment.led_cubic_per_k": 0.005,
          "environment.hold_leakage_per_k": math.log(2) / 10}  # leakage doubling every 10 K


@pytest.mark.parametrize("name", ["ideal", "aoc48-twin", "aoc16-twin", "aoc48", "aoc16", "aoc-projected"])
def test_every_bundled_profile_is_at_its_calibration_temperature_with_no_coefficient(name: str) -> None:
    v = load_device(name).values
    assert all(v[k] == 0.0 for k in ("environment.temperature_delta_k", *COEFFS))


def test_the_hold_leakage_grows_by_exp_c_dt() -> None:
    for dt, factor in [(0.0, 1.0), (10.0, 2.0), (20.0, 4.0), (-10.0, 0.5)]:
        dev = load_device("aoc48", {**COEFFS, "environment.temperature_delta_k": dt})
        assert Hold.of(dev.parts).leakage_a == pytest.approx(1e-14 * factor, rel=1e-12, abs=0)


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
    x = torch.linspace(-3, 3, 50, dtype=F64)[None]
    assert torch.equal(_functions({}).silu(x, "gate"), _functions(COEFFS).silu(x, "gate"))
