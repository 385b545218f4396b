"""The optical loop: bad input, determinism, static vs per-iteration effects, converters,
schedules, bandwidth, saturation, differentiability."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aocsim import OpticalLoop, load_device, loop_step
from aocsim.errors import InputError
from aocsim.hardware.physics import components as C
from aocsim.hardware.engine.schedules import Exponential, Function, Linear
from aocsim.hardware.physics.sources import without_noise
from _toolchain import NO_TOOLCHAIN



def _setup(gen: torch.Generator, n: int = 48, batch: int = 4, dtype=torch.float64):
    w = torch.randn(n, n, generator=gen, dtype=dtype)
    z = 0.3 * torch.randn(batch, n, generator=gen, dtype=dtype)
    x = torch.rand(batch, n, generator=gen, dtype=dtype)
    return w, z, x


# -- bad input -----------------------------------------------------------------------------

def test_weight_that_does_not_fit_the_profile(gen: torch.Generator) -> None:
    with pytest.raises(InputError, match=r"weight has shape \(47, 47\); profile 'aoc48' has 48 channels"):
        OpticalLoop(load_device("aoc48"), torch.zeros(47, 47), beta=18.6)
    with pytest.raises(InputError, match=r"weight has shape \(48, 16\); expected a square"):
        OpticalLoop(load_device("aoc48"), torch.zeros(48, 16), beta=18.6)
    with pytest.raises(InputError, match="weight contains NaN"):
        OpticalLoop("aoc48-twin", torch.full((48, 48), float("nan")), beta=18.6)


def test_nan_state_and_bad_shapes(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    loop = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6)
    z_bad = z.clone()
    z_bad[1, 3] = float("nan")
    with pytest.raises(InputError, match="z contains NaN or infinite values"):
        loop.step(z_bad, x)
    with pytest.raises(InputError, match=r"x has shape \(4, 47\); expected \[B, 48\] or \[48\]"):
        loop.step(z, x[:, :47])
    with pytest.raises(InputError, match=r"z has shape \(48,\); expected \[B, 48\]"):
        loop.step(z[0], x)


def test_bad_gain_settings() -> None:
    w = torch.eye(16)
    with pytest.raises(InputError, match=r"gain = 'relative'; expected one of \['normalized', 'absolute'\]"):
        OpticalLoop("aoc16-twin", w, beta=1.0, gain="relative")
    with pytest.raises(InputError, match="beta is required with gain='normalized'"):
        OpticalLoop("aoc16-twin", w)
    with pytest.raises(InputError, match="beta must be None with gain='absolute'"):
        OpticalLoop("aoc16-twin", w, beta=2.0, gain="absolute")
    with pytest.raises(InputError, match="alpha = 'half'"):
        OpticalLoop("aoc16-twin", w, beta=2.0, alpha="half")


def test_noise_without_a_generator_is_an_error(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    with pytest.raises(InputError, match="generator is required: the profile draws a static SLM programming"):
        OpticalLoop("aoc48", w, beta=18.6)
    loop = OpticalLoop("aoc48", w, beta=18.6, generator=gen)
    with pytest.raises(InputError, match="generator is required: the profile draws noise every iteration"):
        loop.step(z, x)


# -- randomness: explicit, reproducible, drawn at the documented times -----------------------

def test_same_seed_same_bits_different_seed_different_draws(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)

    def run(static_seed: int, noise_seed: int) -> torch.Tensor:
        loop = OpticalLoop("aoc48", w, alpha=0.5, beta=18.6, generator=torch.Generator().manual_seed(static_seed))
        return loop.iterate(z, x, 5, generator=torch.Generator().manual_seed(noise_seed))

    assert torch.equal(run(1, 2), run(1, 2))
    assert not torch.equal(run(1, 2), run(1, 3))  # per-iteration draws differ
    assert not torch.equal(run(1, 2), run(4, 2))  # static programming error differs


def test_static_effects_stay_fixed_and_per_iteration_effects_do_not(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    static_only = OpticalLoop(without_noise(load_device("aoc48")), w, alpha=0.5, beta=18.6, generator=gen)
    assert torch.equal(static_only.step(z, x), static_only.step(z, x))  # chip, SLM error: drawn once
    noisy = OpticalLoop("aoc48", w, alpha=0.5, beta=18.6, generator=gen)
    g = torch.Generator().manual_seed(0)
    assert not torch.equal(noisy.step(z, x, generator=g), noisy.step(z, x, generator=g))


def test_chip_seed_selects_the_chip(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    quiet = without_noise(load_device("aoc48", {"slm.programming_error_levels": 0.0}))
    a = OpticalLoop(quiet, w, beta=18.6).step(z, x)
    b = OpticalLoop(quiet, w, beta=18.6).step(z, x)
    c = OpticalLoop(quiet.with_overrides({"variation.chip_seed": 1}), w, beta=18.6).step(z, x)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_drift_is_a_random_walk_across_inferences(gen: torch.Generator) -> None:
    w, z, x = _setup(gen, batch=1)
    sigma = 1e-3
    dev = without_noise(load_device("aoc48", {"drift.gain_std_per_inference": sigma}))
    loop = OpticalLoop(dev, w, beta=18.6, generator=gen)
    walk = loop
    g = torch.Generator().manual_seed(5)
    for _ in range(100):
        walk = walk.drifted(g)
    gains = walk.drift_state[0]
    # after 100 steps each channel's gain offset ~ N(0, 100 sigma^2): variance within chi-square bounds
    var = float(gains.pow(2).mean())
    assert 0.5 * 100 * sigma**2 < var < 1.6 * 100 * sigma**2
    assert torch.equal(loop.drift_state[0], torch.zeros(48, dtype=torch.float64))  # original untouched
    assert not torch.equal(walk.step(z, x), loop.step(z, x))


# -- precision: quantisation and converters ---------------------------------------------------

def test_weight_quantisation_error_falls_as_two_to_the_minus_bits(gen: torch.Generator) -> None:
    w = torch.rand(200, 200, generator=gen, dtype=torch.float64) * 2 - 1
    bits = np.arange(4, 14)
    errs = [float((C.quantize_signed(w, int(b)) - w).pow(2).mean().sqrt()) for b in bits]
    slope, _ = np.polyfit(bits, np.log2(errs), 1)
    assert slope == pytest.approx(-1.0, abs=0.05)
    # uniform rounding: rms error = step / sqrt(12), step = 1 / (2^(b-1) - 1)
    for b, e in zip(bits, errs):
        assert e == pytest.approx(1 / (2 ** (b - 1) - 1) / math.sqrt(12), rel=0.05)


def test_nine_bit_slm_levels_and_range(gen: torch.Generator) -> None:
    w = torch.rand(50, 50, generator=gen, dtype=torch.float64) * 2 - 1
    q = C.quantize_signed(w, 9) * 255
    assert torch.allclose(q, q.round(), atol=1e-9) and q.min() >= -256 and q.max() <= 255


def test_injection_dac_lands_on_its_grid(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    dev = load_device("aoc48-twin", {"injection.dac_bits": 6})
    loop = OpticalLoop(dev, w, beta=18.6)
    inj = loop.injection(3 * x - 1.5)
    step = 2.6 / 63
    codes = (inj + 1.3) / step
    assert torch.allclose(codes, codes.round(), atol=1e-9)
    assert inj.min() >= -1.3 - 1e-12 and inj.max() <= 1.3 + 1e-12


def test_readout_adc_averages_quantised_samples_of_the_settled_state(gen: torch.Generator) -> None:
    n = 12
    w = 0.1 * torch.randn(n, n, generator=gen, dtype=torch.float64)
    x = 0.3 * torch.randn(3, n, generator=gen, dtype=torch.float64)
    dev = load_device("ideal", {"readout.adc_bits": 8, "readout.range_v": [-2.0, 2.0]})
    loop = OpticalLoop(dev, w, alpha=0.5, gain="absolute")
    fixed = loop.iterate(torch.zeros_like(x), x, 400)
    assert fixed.abs().max() < 2.0  # inside the ADC range
    reading = loop.readout(x)
    lsb = 4.0 / 255
    assert (reading - fixed).abs().max() <= lsb / 2 + 1e-9  # settled state, quantised
    exact = OpticalLoop(load_device("ideal"), w, alpha=0.5, gain="absolute").readout(x)
    assert (exact - fixed).abs().max() < 1e-9


# -- dynamics: schedules, momentum, bandwidth, saturation ------------------------------------

def test_annealing_schedules_feed_alpha_and_beta_per_iteration(gen: torch.Generator) -> None:
    w, z, x = _setup(gen, dtype=torch.float64)
    sched = OpticalLoop("aoc48-twin", w, alpha=Linear(0.1, 0.5, 10), beta=Exponential(5.0, 18.6, 0.2))
    for k in (0, 3, 10, 25):
        fixed = OpticalLoop("aoc48-twin", w, alpha=0.1 + 0.4 * min(k / 10, 1),
                            beta=18.6 + (5.0 - 18.6) * math.exp(-0.2 * k))
        torch.testing.assert_close(sched.step(z, x, iteration=k), fixed.step(z, x), atol=1e-12, rtol=0)
    user = OpticalLoop("aoc48-twin", w, alpha=lambda k: 0.3, beta=Function(lambda k: 10.0))
    torch.testing.assert_close(user.step(z, x), OpticalLoop("aoc48-twin", w, alpha=0.3, beta=10.0).step(z, x))


def test_momentum_uses_the_previous_state(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    plain = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6)
    mom = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6, gamma=0.3)
    z_prev = 0.5 * z
    torch.testing.assert_close(mom.step(z, x, z_prev=z_prev), plain.step(z, x) + 0.3 * (z - z_prev))
    torch.testing.assert_close(mom.step(z, x), plain.step(z, x) + 0.3 * z)  # z_prev = 0 at the start


def test_first_order_bandwidth_moves_part_way(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    fast = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6)
    bw = 10e6
    slow = OpticalLoop(load_device("aoc48-twin", {"loop.bandwidth_hz": bw}), w, alpha=0.5, beta=18.6)
    r = 1 - math.exp(-2 * math.pi * bw * 20e-9)
    torch.testing.assert_close(slow.step(z, x), z + r * (fast.step(z, x) - z))


def test_saturation_rails_bound_the_state(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    dev = load_device("aoc48-twin", {"saturation.enabled": True})
    out = OpticalLoop(dev, w, alpha=0.99, beta=200.0).iterate(z * 20, x, 20)
    assert out.min() >= dev["saturation.low_v"] and out.max() <= dev["saturation.high_v"]
    assert (out == dev["saturation.high_v"]).any() or (out == dev["saturation.low_v"]).any()


def test_loop_runs_in_float32_and_float64(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    a = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6).step(z, x)
    b = OpticalLoop("aoc48-twin", w.float(), alpha=0.5, beta=18.6).step(z.float(), x.float())
    assert b.dtype == torch.float32 and (a - b.double()).abs().max() < 1e-5


# -- differentiability --------------------------------------------------------------------------

def test_gradients_flow_through_the_calibrated_pipeline(gen: torch.Generator) -> None:
    dev = load_device("aoc16-twin", {"crosstalk.pbs.enabled": True})
    w = torch.randn(16, 16, generator=gen, dtype=torch.float64, requires_grad=True)
    z = (0.3 * torch.randn(3, 16, generator=gen, dtype=torch.float64)).requires_grad_()
    x = torch.rand(3, 16, generator=gen, dtype=torch.float64)

    def fn(w_in: torch.Tensor, z_in: torch.Tensor) -> torch.Tensor:
        return OpticalLoop(dev, w_in, alpha=0.5, beta=18.6).step(z_in, x)

    assert torch.autograd.gradcheck(fn, (w, z), eps=1e-6, atol=1e-6)


def test_quantisation_passes_gradients_straight_through(gen: torch.Generator) -> None:
    w = (torch.randn(48, 48, generator=gen, dtype=torch.float64) * 0.2).requires_grad_()
    _, z, x = _setup(gen)
    grads = []
    for bits in (None, 9):
        dev = load_device("aoc48-twin", {"slm.bits": bits})
        loss = OpticalLoop(dev, w, alpha=0.5, beta=18.6).step(z, x).pow(2).sum()
        (g,) = torch.autograd.grad(loss, w)
        grads.append(g)
    assert grads[1].abs().sum() > 0
    cos = torch.nn.functional.cosine_similarity(grads[0].flatten(), grads[1].flatten(), dim=0)
    assert cos > 0.99  # the straight-through gradient is the unquantised one at a nearby point
    v = torch.linspace(-1, 1, 101, dtype=torch.float64, requires_grad=True)
    (dv,) = torch.autograd.grad(C.quantize_signed(v, 4).sum(), v)
    assert torch.equal(dv, torch.ones_like(dv))  # identity Jacobian through the rounding


def test_noisy_loop_is_differentiable(gen: torch.Generator) -> None:
    w = (torch.randn(48, 48, generator=gen, dtype=torch.float64) * 0.2).requires_grad_()
    _, z, x = _setup(gen)
    loop = OpticalLoop("aoc48", w, alpha=0.5, beta=18.6, generator=torch.Generator().manual_seed(0))
    out = loop.iterate(z, x, 3, generator=torch.Generator().manual_seed(1))
    (g,) = torch.autograd.grad(out.sum(), w)
    assert torch.isfinite(g).all() and g.abs().sum() > 0


def test_loop_step_is_the_loop_object(gen: torch.Generator) -> None:
    w, z, x = _setup(gen)
    a = loop_step("aoc48", w, z, x, alpha=0.5, beta=18.6, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    b = OpticalLoop("aoc48", w, alpha=0.5, beta=18.6, generator=g).step(z, x, generator=g)
    assert torch.equal(a, b)


@pytest.mark.skipif(NO_TOOLCHAIN, reason="needs a C++ compiler and Python headers")
@pytest.mark.parametrize(("name", "overrides", "dtype", "tol"), [
    ("aoc48", {"noise.multiplier": 0.0, "loop.bandwidth_hz": 20e6}, torch.float64, 1e-12),
    ("ideal", {}, torch.float64, 1e-12),
    ("aoc16-twin", {}, torch.float32, 1e-5),
])
@pytest.mark.slow
def test_compiled_iterations_equal_the_eager_ones(name: str, overrides: dict, dtype: torch.dtype, tol: float,
                                                   gen: torch.Generator) -> None:
    dev = load_device(name, overrides)
    n = dev.channels or 12
    w = torch.randn(n, n, generator=gen, dtype=dtype)
    x = torch.rand(8, n, generator=gen, dtype=dtype)
    z0 = 0.3 * torch.randn(8, n, generator=gen, dtype=dtype)
    for beta in (Linear(10.0, 18.6, 20), 18.6):  # per-step graphs; blocks of steps (constant schedules)
        loops = [OpticalLoop(dev, w, alpha=0.5, beta=beta, gamma=0.1, compile=flag,
                             generator=torch.Generator().manual_seed(3)) for flag in (False, True)]
        with torch.no_grad():
            eager, fused = (loop.iterate(z0, x, 27, trajectory=True) for loop in loops)
            finals = [loop.iterate(z0, x, 27) for loop in loops]
            readings = [loop.readout(x[:2]) for loop in loops]
        assert (eager - fused).abs().max() < tol
        assert (finals[0] - finals[1]).abs().max() < tol and (finals[1] - fused[-1]).abs().max() < tol
        assert (readings[0] - readings[1]).abs().max() < tol


def test_compile_flag_must_be_a_bool(gen: torch.Generator) -> None:
    with pytest.raises(InputError, match="compile = 'yes'"):
        OpticalLoop(load_device("aoc16-twin"), torch.randn(16, 16, generator=gen), beta=18.6, compile="yes")
