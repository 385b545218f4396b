"""Optical tiles (aocsim.hardware.engine.tiles): exactness with every effect off, per-tile static draws,
analog vs digital partial sums, batch independence of the noise, conversion and time counts, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from aocsim import load_device
from aocsim.errors import InputError
from aocsim.hardware.physics import components as C
from aocsim.hardware.engine.tiles import TiledMatrix, tiled_matvec
from aocsim.hardware.physics.sources import without_noise

F64 = torch.float64


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


# -- exactness with every effect off ----------------------------------------------------------------

@pytest.mark.parametrize("m, k", [(1, 1), (47, 48), (48, 49), (148, 32), (296, 64), (1000, 7)])
@pytest.mark.parametrize("partial_sums", ["analog", "digital"])
def test_ideal_tiles_compute_w_t_exactly(m: int, k: int, partial_sums: str, gen: torch.Generator) -> None:
    w, t = _rand(gen, m, k), _rand(gen, 5, k)
    out = tiled_matvec("ideal", w, t, tile_size=48, partial_sums=partial_sums)
    grid = (math.ceil(m / 48), math.ceil(k / 48))
    assert out.grid == grid and out.tiles == grid[0] * grid[1] and out.y.shape == (5, m)
    assert out.y.dtype == F64
    torch.testing.assert_close(out.y, t @ w.T, rtol=0, atol=1e-12)


def test_a_tile_smaller_than_the_chip_is_padded_into_it(gen: torch.Generator) -> None:
    dev = load_device("ideal", {"channels": 20})
    w, t = _rand(gen, 30, 25), _rand(gen, 3, 25)
    out = tiled_matvec(dev, w, t, tile_size=8)
    assert out.grid == (4, 4) and out.channels == 20 and out.tile_size == 8
    torch.testing.assert_close(out.y, t @ w.T, rtol=0, atol=1e-12)


def test_input_dac_quantises_the_scaled_input_over_the_clip(gen: torch.Generator) -> None:
    dev = load_device("ideal", {"injection.clip": [-2.0, 2.0], "injection.dac_bits": 4})
    w, t = _rand(gen, 60, 50), _rand(gen, 6, 50)
    out = tiled_matvec(dev, w, t, tile_size=16)
    s = t.abs().amax(1) / 1.0  # default range: tanh's swing 1 inside the clip's half-range 2
    u = C.quantize_range(t / s[:, None], -2.0, 2.0, 4)
    torch.testing.assert_close(out.input_scale, s, rtol=0, atol=0)
    torch.testing.assert_close(out.y, (u @ w.T) * s[:, None], rtol=0, atol=1e-12)
    assert not torch.allclose(out.y, t @ w.T, atol=1e-3)  # 4 bits are visible
    wide = tiled_matvec(dev, w, t, tile_size=16, input_range=2.0)  # the whole clip range
    torch.testing.assert_close(wide.input_scale, s / 2.0, rtol=0, atol=0)


def test_default_input_range_is_the_emitters_range() -> None:
    w = torch.ones(48, 48, dtype=F64)
    assert TiledMatrix("ideal", w, tile_size=48).input_range == 1.0
    d = float(load_device("aoc48-twin").values["nonlinearity.coeffs"][3])
    assert TiledMatrix("aoc48-twin", w).input_range == pytest.approx(d)  # the sigmoid's swing, not 1.3 V


# -- static draws per tile ------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [{"slm.programming_error_levels": 2.0},
                                       {"variation.enabled": True, "variation.relative_std": 0.05}])
def test_each_tile_has_its_own_static_draws(overrides: dict, gen: torch.Generator) -> None:
    block, t = _rand(gen, 16, 16), _rand(gen, 4, 16)
    w = torch.cat([block, block])  # the same block in tiles 0 and 1
    exact = tiled_matvec(load_device("ideal"), w, t, tile_size=16)
    torch.testing.assert_close(exact.y[:, :16], exact.y[:, 16:], rtol=0, atol=0)
    dev = load_device("ideal", overrides)
    y = tiled_matvec(dev, w, t, tile_size=16, generator=7).y
    assert (y[:, :16] - y[:, 16:]).abs().max() > 1e-6  # tiles differ
    assert torch.equal(y, tiled_matvec(dev, w, t, tile_size=16, generator=7).y)  # same seed, same bits
    other = tiled_matvec(dev, w, t, tile_size=16, generator=8).y
    if "slm.programming_error_levels" in overrides:
        assert (other - y).abs().max() > 1e-6  # another weight load, other programming errors
    else:
        assert torch.equal(other, y)  # variation belongs to the chip (variation.chip_seed), not the load
        chip = load_device("ideal", {**overrides, "variation.chip_seed": 1})
        assert (tiled_matvec(chip, w, t, tile_size=16, generator=7).y - y).abs().max() > 1e-6


def test_noisy_profile_same_seed_same_bits_other_seed_other_draws(gen: torch.Generator) -> None:
    w, t = 0.05 * _rand(gen, 100, 70), _rand(gen, 8, 70)
    a = tiled_matvec("aoc48", w, t, generator=3).y
    assert torch.equal(a, tiled_matvec("aoc48", w, t, generator=3).y)
    assert (tiled_matvec("aoc48", w, t, generator=4).y - a).abs().max() > 0
    b = tiled_matvec("aoc48", w, t, generator=torch.Generator().manual_seed(0)).y  # one key drawn from it
    assert torch.equal(b, tiled_matvec("aoc48", w, t, generator=torch.Generator().manual_seed(0)).y)


def test_each_tile_draws_its_own_per_call_noise(gen: torch.Generator) -> None:
    dev = load_device("ideal", {"noise.rin.enabled": True, "noise.thermal.enabled": True})
    block, t = _rand(gen, 16, 16), _rand(gen, 4, 16)
    y = tiled_matvec(dev, torch.cat([block, block]), t, tile_size=16, generator=1).y
    assert (y[:, :16] - y[:, 16:]).abs().max() > 0  # same block, same input, other tile: other draws
    assert float((y[:, :16] - t @ block.T).norm() / (t @ block.T).norm()) < 1e-2  # small noise about W t


def test_each_call_draws_new_noise_on_the_same_programmed_tiles(gen: torch.Generator) -> None:
    w, t = 0.05 * _rand(gen, 60, 60), _rand(gen, 4, 60)
    tiles = TiledMatrix("aoc48", w, generator=11)
    first = tiles(t, call=0).y
    assert torch.equal(first, tiles(t, call=0).y)
    assert (tiles(t, call=1).y - first).abs().max() > 0
    quiet = TiledMatrix(without_noise(load_device("aoc48")), w, generator=11)
    assert torch.equal(quiet(t, call=0).y, quiet(t, call=1).y)  # only the per-call noise changed


# -- partial sums ---------------------------------------------------------------------------------------

def test_analog_and_digital_partial_sums_agree_without_an_adc(gen: torch.Generator) -> None:
    w, t = _rand(gen, 100, 150), _rand(gen, 5, 150)
    dev = load_device("ideal", {"slm.programming_error_levels": 1.0})
    a = tiled_matvec(dev, w, t, tile_size=48, generator=2, partial_sums="analog")
    d = tiled_matvec(dev, w, t, tile_size=48, generator=2, partial_sums="digital")
    torch.testing.assert_close(a.y, d.y, rtol=0, atol=1e-12)
    assert (a.adc_conversions_per_sample, d.adc_conversions_per_sample) == (100, 4 * 100)


HOLD_OFF = {"readout.hold_capacitance_f": None, "readout.hold_leakage_a": 0.0, "readout.hold_injection_c": 0.0,
            "readout.hold_injection_c_per_v": 0.0}  # the analog sum's hold: tests/hardware/test_hold.py


@pytest.mark.parametrize("name, overrides", [("ideal", {"readout.adc_bits": 6}),
                                             ("aoc48", {"readout.adc_bits": 6, **HOLD_OFF})])
def test_partial_sums_differ_by_exactly_the_adc(name: str, overrides: dict, gen: torch.Generator) -> None:
    dev = load_device(name, overrides)
    w, t = _rand(gen, 70, 130), _rand(gen, 6, 130)
    w = w * (0.15 if name == "ideal" else 0.01)  # node volts inside range_v
    tiles = TiledMatrix(dev, w, tile_size=48, generator=5)
    a = tiles(t, partial_sums="analog", keep_partials=True)
    d = tiles(t, partial_sums="digital", keep_partials=True)
    assert torch.equal(a.partials, d.partials) and a.partials.shape == (3, 6, 70)
    assert a.adc_clipped == 0 and d.adc_clipped == 0
    low, high = (float(v) for v in dev.values["readout.range_v"])
    quantise = lambda v: C.quantize_range(v, low, high, 6)  # noqa: E731
    s = a.input_scale[:, None]
    torch.testing.assert_close(d.y, quantise(d.partials).sum(0) * s, rtol=0, atol=1e-12)
    torch.testing.assert_close(a.y, quantise(a.partials.sum(0)) * s, rtol=0, atol=1e-12)
    assert (a.y - d.y).abs().max() > 1e-6
    exact = a.partials.sum(0) * s  # each differs from the unquantised sum by at most its ADC steps
    step = (high - low) / 63
    assert ((a.y - exact).abs() <= 0.5 * step * s + 1e-12).all()
    assert ((d.y - exact).abs() <= 3 * 0.5 * step * s + 1e-12).all()


def test_adc_clipping_is_counted(gen: torch.Generator) -> None:
    dev = load_device("ideal", {"readout.adc_bits": 8, "readout.range_v": [-1.0, 1.0]})
    out = tiled_matvec(dev, 10 * _rand(gen, 20, 20), _rand(gen, 3, 20), tile_size=8)
    assert out.adc_clipped > 0 and out.y.abs().max() <= (out.input_scale.max() + 1e-12)


# -- noise per sample, not per batch -------------------------------------------------------------------

def test_a_samples_noise_does_not_depend_on_its_batch(gen: torch.Generator) -> None:
    dev = load_device("aoc48", {"readout.adc_bits": None})  # an ADC code could flip on a 1e-16 matmul difference
    w, t = 0.05 * _rand(gen, 100, 60), _rand(gen, 64, 60)
    tiles = TiledMatrix(dev, w, generator=9)
    whole = tiles(t).y
    halves = torch.cat([tiles(t[:32], samples=0).y, tiles(t[32:], samples=32).y])
    torch.testing.assert_close(halves, whole, rtol=0, atol=1e-12)
    same = t[:1].expand(2, -1)  # two copies of one sample get different noise
    twins = tiles(same).y
    assert (twins[0] - twins[1]).abs().max() > 0
    quiet = TiledMatrix(without_noise(dev), w, generator=9)(same).y
    torch.testing.assert_close(quiet[0], quiet[1], rtol=0, atol=0)


# -- counts for an energy model -------------------------------------------------------------------------

def test_conversion_counts(gen: torch.Generator) -> None:
    w, t = _rand(gen, 100, 70), _rand(gen, 3, 70)
    out = tiled_matvec("ideal", w, t, tile_size=48, partial_sums="digital")
    assert out.grid == (3, 2) and out.tiles == 6 and out.batch == 3
    assert out.dac_conversions_per_sample == 3 * 70 and out.dac_conversions == 3 * 3 * 70
    assert out.adc_conversions_per_sample == 2 * 100 and out.adc_conversions == 3 * 2 * 100
    assert out.partials is None


# -- bad input ----------------------------------------------------------------------------------------

W8 = torch.ones(8, 8, dtype=F64)
T8 = torch.ones(2, 8, dtype=F64)


@pytest.mark.parametrize("call, pattern", [
    (lambda: tiled_matvec("ideal", W8, T8), r"tile_size = None; profile 'ideal' has any size"),
    (lambda: tiled_matvec("ideal", W8, T8, tile_size=0), r"tile_size = 0; expected an integer >= 1"),
    (lambda: tiled_matvec("ideal", W8, T8, tile_size=2.5), r"tile_size = 2.5; expected an integer"),
    (lambda: tiled_matvec("aoc48-twin", W8, T8, tile_size=64), r"tile_size = 64; .* 48 channels.*\[1, 48\]"),
    (lambda: tiled_matvec("ideal", W8, T8, tile_size=4, partial_sums="both"),
     r"partial_sums = 'both'; expected one of \['analog', 'digital'\]"),
    (lambda: tiled_matvec("ideal", W8, torch.ones(2, 7, dtype=F64), tile_size=4),
     r"t has shape \(2, 7\); expected \[B, 8\]"),
    (lambda: tiled_matvec("ideal", W8, torch.ones(8, dtype=F64), tile_size=4),
     r"t has shape \(8,\); expected \[B, 8\]"),
    (lambda: tiled_matvec("ideal", W8, torch.full((2, 8), math.nan, dtype=F64), tile_size=4), r"t contains NaN"),
    (lambda: tiled_matvec("ideal", torch.ones(8, dtype=F64), T8, tile_size=4),
     r"weight must be a floating-point tensor \[M, K\]"),
    (lambda: tiled_matvec("ideal", torch.ones(0, 8, dtype=F64), T8, tile_size=4), r"weight has shape \(0, 8\)"),
    (lambda: tiled_matvec("ideal", W8 * math.inf, T8, tile_size=4), r"weight contains NaN or infinite"),
    (lambda: tiled_matvec("ideal", W8, T8, tile_size=4, call=-1), r"call = -1; expected an integer >= 0"),
    (lambda: tiled_matvec("ideal", W8, T8, tile_size=4, samples=-3), r"samples = -3"),
    (lambda: tiled_matvec("ideal", W8, T8, tile_size=4, input_range=0.0), r"input_range = 0.0; expected a number > 0"),
    (lambda: tiled_matvec(3, W8, T8), r"device = 3; expected a DeviceProfile or a profile name"),
    (lambda: tiled_matvec(load_device("aoc48").with_overrides({"slm.programming_error_levels": 0.0}), W8, T8,
                          tile_size=8), r"generator = None; the profile draws noise"),
])
def test_bad_input_is_a_one_line_error_naming_the_argument(call, pattern: str) -> None:
    with pytest.raises(InputError, match=pattern) as info:
        call()
    assert "\n" not in str(info.value)


def test_predistortion_inverts_the_mean_led_cubic() -> None:
    """The drive q solves P(q) - P(0) = P'(0) d for the mean of the two LED cubics over the whole drive
    range (Newton converged), and is the identity for linear emitters."""
    from aocsim.hardware.physics.components import predistort_drive

    v = load_device("aoc48-twin").values
    pos, neg = tuple(v["emitter.poly_pos"]), tuple(v["emitter.poly_neg"])
    d = torch.linspace(-0.215, 0.215, 101, dtype=torch.float64)
    q = predistort_drive(d, pos, neg)
    mean = [(a + b) / 2 for a, b in zip(pos, neg)]
    response = ((mean[0] * q + mean[1]) * q + mean[2]) * q
    assert float((response - mean[2] * d).abs().max()) < 1e-14
    assert float((q - d).abs().max()) > 0.02  # the cubic is far from linear at full drive
    assert torch.equal(predistort_drive(d, (0.0, 0.0, 1.0, 0.0), (0.0, 0.0, 1.0, 0.0)), d)


def test_predistortion_with_a_gradient_has_the_same_value_and_the_inverses_derivative() -> None:
    """With a gradient on the drive: the same value bit for bit as without, and dq/dd the inverse's,
    c1 / P'(q), checked against central differences of the gradient-free function (per-emitter cubics)."""
    from aocsim.hardware.physics.components import predistort_drive

    v = load_device("aoc48-twin").values
    pos, neg = tuple(v["emitter.poly_pos"]), tuple(v["emitter.poly_neg"])
    gen = torch.Generator().manual_seed(0)
    scale = 1.0 + 0.1 * torch.rand(4, 1, dtype=torch.float64, generator=gen)  # 4 emitters' own cubics
    pos, neg = tuple(c * scale for c in pos), tuple(c * scale for c in neg)
    d = torch.linspace(-0.215, 0.215, 24, dtype=torch.float64).view(4, 6).requires_grad_(True)
    q = predistort_drive(d, pos, neg)
    q.sum().backward()
    plain = predistort_drive(d.detach(), pos, neg)
    assert torch.equal(q.detach(), plain)
    h = 1e-6
    numeric = (predistort_drive(d.detach() + h, pos, neg) - predistort_drive(d.detach() - h, pos, neg)) / (2 * h)
    assert torch.allclose(d.grad, numeric, rtol=1e-7, atol=0)
    assert float((d.grad - 1).abs().max()) > 0.05  # far from a straight-through gradient at full drive


def test_predistorted_tiles_respond_linearly() -> None:
    """Even-order distortion on the noise-free twin: ||y(t) + y(-t) - 2 y(0)|| / ||y(t) - y(-t)|| is
    5.8 % with the LEDs driven as is (their t^2 terms) and 1.7 % predistorted (what remains: the two
    paths' different cubics and the rest of the optics)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 40, generator=gen, dtype=torch.float64)
    t = torch.rand(64, 40, generator=gen, dtype=torch.float64) * 2 - 1
    t[:, 0] = 1.0  # every row spans the full drive (input_scale), so +t and -t share it
    even = {}
    for pre in (False, True):
        tiles = TiledMatrix(load_device("aoc48-twin"), w, generator=0, predistort=pre)
        y = {s: tiles(s * t).y / tiles(s * t).input_scale[:, None] for s in (1.0, -1.0)}
        zero = tiles(torch.zeros(1, 40, dtype=torch.float64)).y
        even[pre] = float((y[1.0] + y[-1.0] - 2 * zero).norm() / (y[1.0] - y[-1.0]).norm())
    assert even[False] > 0.04 and even[True] < even[False] / 3, even
    with pytest.raises(InputError, match="predistort = 'yes'; expected True or False"):
        TiledMatrix(load_device("aoc48-twin"), w, generator=0, predistort="yes")
