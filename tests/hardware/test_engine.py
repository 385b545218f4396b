"""The device engine: one definition run eagerly and compiled, keyed randomness, the loop as a
solver, the four faults the engine issue listed, dark current, trainable gains."""

from __future__ import annotations

import math

import pytest
import torch

from aocsim import OpticalLoop, SolveStatus, load_device, load_model
from aocsim.errors import InputError
from aocsim.hardware.engine import keys, step
from aocsim.hardware.engine.budget import noise_budget
from aocsim.hardware.physics.noise import ELECTRON_CHARGE_C
from aocsim.hardware.engine.programming import programming_error_std
from aocsim.tasks.digits import load_split
from aocsim.hardware.physics.sources import without_noise
from _toolchain import NO_TOOLCHAIN

NEEDS_COMPILER = pytest.mark.skipif(NO_TOOLCHAIN, reason="needs a C++ compiler and Python headers")


def _noisy_setup(gen: torch.Generator, batch: int, dtype: torch.dtype = torch.float64):
    w = torch.randn(48, 48, generator=gen).to(dtype)
    x = torch.rand(batch, 48, generator=gen).to(dtype)
    return w, x, torch.zeros(batch, 48, dtype=dtype)


def _loop(w: torch.Tensor, *, compile: bool = False, device: str = "aoc48", **overrides: object) -> OpticalLoop:
    dev = load_device(device, {"loop.bandwidth_hz": 20e6, **overrides})
    return OpticalLoop(dev, w, alpha=0.5, beta=18.6, gamma=0.1, compile=compile, generator=3).drifted(4)


# -- one definition, keyed randomness ------------------------------------------------------------

@pytest.mark.slow
@NEEDS_COMPILER
@pytest.mark.parametrize(("dtype", "bound"), [(torch.float64, 1e-12), (torch.float32, 5e-6)])
def test_same_seed_same_trajectory_with_and_without_compile(dtype: torch.dtype, bound: float,
                                                            gen: torch.Generator) -> None:
    # Every noise source on (aoc48 + loop bandwidth), a drifted loop, momentum: the compiled step is the
    # eager step compiled, draws included. Bound: float rounding (measured 9e-16 / 5e-7 over 40 steps).
    w, x, z0 = _noisy_setup(gen, 64, dtype)
    with torch.no_grad():
        eager = _loop(w).iterate(z0, x, 40, generator=5, trajectory=True)
        compiled = _loop(w, compile=True).iterate(z0, x, 40, generator=5, trajectory=True)
        blocks = _loop(w, compile=True).iterate(z0, x, 40, generator=5)
    assert (eager - compiled).abs().max() < bound
    assert (eager[-1] - blocks).abs().max() < bound
    assert not torch.equal(eager, _loop(w).iterate(z0, x, 40, generator=6, trajectory=True))


@pytest.mark.slow
@NEEDS_COMPILER
def test_compiled_path_applies_the_drift(gen: torch.Generator) -> None:
    # Fault guarded: the compiled path ignoring the drift gain. A large drift makes it visible.
    w, x, z0 = _noisy_setup(gen, 16)
    dev = load_device("aoc48-twin", {"drift.enabled": True, "drift.gain_std_per_inference": 0.05,
                                     "drift.offset_std_v_per_inference": 0.0})
    loops = [OpticalLoop(dev, w, alpha=0.5, beta=18.6, compile=flag).drifted(1) for flag in (False, True)]
    with torch.no_grad():
        eager, compiled = (loop.iterate(z0, x, 12) for loop in loops)
        undrifted = OpticalLoop(dev, w, alpha=0.5, beta=18.6).iterate(z0, x, 12)
    assert (eager - undrifted).abs().max() > 1e-3
    assert (eager - compiled).abs().max() < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=NEEDS_COMPILER)])
def test_a_samples_noise_does_not_depend_on_its_batch(compile: bool, gen: torch.Generator) -> None:
    w, x, z0 = _noisy_setup(gen, 1024)
    loop = _loop(w, compile=compile)
    with torch.no_grad():
        whole = loop.iterate(z0, x, 30, generator=7)
        parts = torch.cat([loop.iterate(z0[i:i + 256], x[i:i + 256], 30, generator=7, samples=i)
                           for i in range(0, 1024, 256)])
        shuffled = torch.randperm(1024, generator=gen)
        moved = loop.iterate(z0[shuffled], x[shuffled], 30, generator=7, samples=shuffled)
    assert torch.equal(whole, parts)
    assert torch.equal(whole[shuffled], moved)
    assert not torch.equal(whole[0], whole[1])  # two samples: two streams


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_cpu_numbers(gen: torch.Generator) -> None:
    w, x, z0 = _noisy_setup(gen, 256)
    with torch.no_grad():
        cpu = _loop(w).iterate(z0, x, 30, generator=7)
        cuda = _loop(w.cuda()).iterate(z0.cuda(), x.cuda(), 30, generator=7)
        parts = torch.cat([_loop(w.cuda()).iterate(z0[i:i + 64].cuda(), x[i:i + 64].cuda(), 30, generator=7,
                                                   samples=i) for i in range(0, 256, 64)])
    assert cuda.device.type == "cuda"
    assert (cuda.cpu() - cpu).abs().max() < 1e-12
    assert (parts - cuda).abs().max() < 1e-12


def test_keys_are_reproducible_and_derived_by_coordinates() -> None:
    k = keys.as_key(5)
    assert k == keys.as_key(5) and k != keys.as_key(6)
    assert k.fold(1, 2) == k.fold(1, 2) and k.fold(1, 2) != k.fold(2, 1)
    a = keys.as_key(torch.Generator().manual_seed(1))
    assert a == keys.as_key(torch.Generator().manual_seed(1))
    d = keys.normals(k, (100_000,), dtype=torch.float64, device="cpu")
    assert abs(float(d.mean())) < 5 / math.sqrt(1e5) and abs(float(d.var()) - 1) < 5 * math.sqrt(2 / 1e5)
    for bad in (-1, "3", 2.5, True):
        with pytest.raises(InputError, match="expected an integer seed >= 0"):
            keys.as_key(bad)


def test_a_block_of_keys_is_each_key_folded_alone() -> None:
    """`keys.fold_block` (a loop's iteration keys, many at once) gives each key `Key.fold` gives alone."""
    k = keys.as_key(11).fold(keys.Stream.RUN)
    block = keys.fold_block(k, keys.Stream.ITERATION, 29, 40)
    assert [int(v) for v in block] == [int(k.fold(keys.Stream.ITERATION, 29 + i).tensor()) for i in range(40)]


def test_a_noisy_run_draws_each_iteration_from_its_own_key(gen: torch.Generator) -> None:
    """`iterate` (keys derived in blocks of `KEY_BLOCK`) against one `step` per iteration (each key alone),
    past two blocks: the same bits."""
    from aocsim.hardware.engine.dynamics import KEY_BLOCK

    dev = load_device("aoc48", {"noise.multiplier": 20.0})
    w, x, z0 = _noisy_setup(gen, 3)
    loop = OpticalLoop(dev, w, alpha=0.5, beta=18.6, gamma=0.1, generator=1)
    key, steps = keys.as_key(4), 2 * KEY_BLOCK + 5
    z, z_prev = z0, None
    for k in range(steps):
        z, z_prev = loop.step(z, x, z_prev=z_prev, generator=key, iteration=k), z
    assert torch.equal(loop.iterate(z0, x, steps, generator=key), z)


def test_a_scheduled_run_takes_each_iteration_s_own_gain(gen: torch.Generator) -> None:
    """`iterate` with schedules (beta and alpha per iteration) against one `step` per iteration: a run keeps
    the node's values across iterations only where every schedule is constant."""
    w, x, z0 = _noisy_setup(gen, 3)
    loop = OpticalLoop(load_device("aoc48"), w, alpha=lambda k: 0.5 - 0.01 * k, beta=lambda k: 18.6 + k,
                       generator=1)
    z = z0
    for k in range(6):
        z = loop.step(z, x, generator=2, iteration=k)
    assert torch.equal(loop.iterate(z0, x, 6, generator=2), z)


def test_a_trainable_gain_takes_each_iteration_s_own_gradient(gen: torch.Generator) -> None:
    """With autograd, `iterate` computes the node's drive at every iteration, as one `step` per iteration
    does: beta's gradient is the same bit for bit (a drive kept across iterations sums the iterations'
    terms before its product with node_lam, another rounding), and so is a run's after a run without
    autograd (a drive kept there has no graph)."""
    w, x, z0 = _noisy_setup(gen, 4)
    grads = []
    for per_step in (True, False, False):
        beta = torch.tensor(18.6, requires_grad=True)
        loop = OpticalLoop(load_device("aoc48"), w, alpha=0.5, beta=beta, generator=1)
        z = z0
        if per_step:
            for k in range(12):
                z = loop.step(z, x, generator=2, iteration=k)
        else:
            with torch.no_grad():
                loop.iterate(z0, x, 12, generator=2)
            z = loop.iterate(z0, x, 12, generator=2)
        z.square().sum().backward()
        grads.append(beta.grad)
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[1], grads[2])


def test_a_run_in_inference_mode_leaves_training_possible(gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The step's kept constants (`engine/scalars.py`) first made inside `torch.inference_mode()` are still
    ordinary tensors: a later run with autograd can save them for its backward pass."""
    from aocsim.hardware.engine import scalars

    monkeypatch.setattr(scalars, "_KEPT", {})
    w, x, z0 = _noisy_setup(gen, 4)
    loop = OpticalLoop(load_device("aoc48"), w, alpha=0.5, beta=18.6, generator=1)
    with torch.inference_mode():
        loop.iterate(z0, x, 3, generator=2)
    trained = w.clone().requires_grad_()
    loop = OpticalLoop(load_device("aoc48"), trained, alpha=0.5, beta=18.6, generator=1)
    loop.iterate(z0, x, 3, generator=2).sum().backward()
    assert trained.grad is not None and bool(torch.isfinite(trained.grad).all())


# -- faults the engine issue listed --------------------------------------------------------------

def test_readout_samples_every_interval(gen: torch.Generator) -> None:
    # Fault guarded: sampling every iteration. Noise makes the state move, and keyed draws make the
    # readout's trajectory the one `iterate` returns with the same seed.
    dev = load_device("aoc48", {"readout.settle_iterations": 6, "readout.sample_interval_iterations": 3,
                                "readout.samples": 5, "noise.multiplier": 50.0})
    w, x, z0 = _noisy_setup(gen, 8)
    loop = OpticalLoop(dev, w, alpha=0.5, beta=18.6, generator=1)
    reading = loop.readout(x, generator=2)
    traj = loop.iterate(z0, x, 6 + 4 * 3 + 1, generator=2, trajectory=True)
    low, high = (float(v) for v in dev["readout.range_v"])
    from aocsim.hardware.physics.components import quantize_range
    expected = torch.stack([quantize_range(traj[6 + 3 * j], low, high, dev["readout.adc_bits"])
                            for j in range(5)]).mean(0)
    assert (reading - expected).abs().max() < 1e-12
    every = torch.stack([quantize_range(traj[k], low, high, dev["readout.adc_bits"]) for k in range(6, 11)]).mean(0)
    assert (reading - every).abs().max() > 1e-4


@pytest.mark.parametrize(("bits", "levels"), [(None, 255), (6, 31), (9, 255)])
def test_programming_error_scale(bits: int | None, levels: int) -> None:
    # Fault guarded: the scale changing when slm.bits is unset (it is one level of the 9-bit grid).
    slm = load_device("aoc48-twin", {"slm.bits": bits, "slm.programming_error_levels": 0.3}).parts.slm
    assert programming_error_std(slm) == 0.3 / levels
    w = torch.full((48, 48), 0.5, dtype=torch.float64)
    w[0, 0] = 1.0  # m = 1: W / m = 0.5 sits on the grid of every bit count tested
    dev = load_device("aoc48-twin", {"slm.bits": bits, "slm.programming_error_levels": 0.3})
    error = OpticalLoop(dev, w, beta=18.6, generator=1).programming_error
    n = error.numel()
    assert abs(float(error.std()) / (0.3 / levels) - 1) < 5 / math.sqrt(2 * n)


def test_rin_and_detector_noise_draw_independently(gen: torch.Generator) -> None:
    # Fault guarded: RIN and the detector sharing one draw. The node noise of each source alone
    # (same key, same state) must be uncorrelated, channel by channel.
    n_samples = 20_000
    w = torch.randn(48, 48, generator=gen, dtype=torch.float64)
    z = (0.3 * torch.randn(1, 48, generator=gen, dtype=torch.float64)).expand(n_samples, 48).contiguous()
    quiet = without_noise(load_device("aoc48"))
    ref = OpticalLoop(quiet, w, beta=18.6, generator=1).optical(z[:1])
    parts = {}
    for name, ov in (("rin", {"noise.shot.enabled": False, "noise.thermal.enabled": False,
                              "noise.dark.enabled": False, "noise.rin.rin_db_per_hz": -115.0}),
                     ("det", {"noise.rin.enabled": False})):
        loop = OpticalLoop(load_device("aoc48", ov), w, beta=18.6, generator=1)
        parts[name] = loop.optical(z, generator=9) - ref
    a, b = parts["rin"], parts["det"]
    corr = ((a - a.mean(0)) * (b - b.mean(0))).mean(0) / (a.std(0) * b.std(0))
    assert corr.abs().max() < 5 / math.sqrt(n_samples), corr.abs().max()


# -- the loop as a solver --------------------------------------------------------------------------

def _digits_on(device: str, overrides: dict):
    model = load_model("digits-deq48")
    with torch.no_grad():
        u = model.injection(load_split().x_test)
        w = model.operator()
        dev = load_device(device, overrides)
        a, _, _, d = (float(v) for v in dev["nonlinearity.coeffs"][:4])
        # By hand: the calibrated sigmoid's slope a d at 0 stands in for tanh's 1, and the normalized
        # convention's beta / (N max|W|) for the model's own scale.
        loop = OpticalLoop(dev, w, alpha=0.5, beta=48 * float(w.abs().max()) / (a * d), generator=0)
        return loop.solve(u, generator=1, max_iter=500)


@pytest.mark.parametrize("multiplier", [1.0, 2.0, 4.0])
def test_noisy_digits_deq_settles_at_the_noise_floor(multiplier: float) -> None:
    result = _digits_on("aoc48", {"noise.multiplier": multiplier})
    # two 12-bit samples can agree to the bit where the noise is weak (converged at the ADC)
    settled = (result.status == SolveStatus.NOISE_FLOOR) | (result.status == SolveStatus.CONVERGED)
    assert float(settled.double().mean()) >= 0.99, result.summary()
    # the machine judges its ADC samples, one every 8 round trips of 20 ns: whole samples, at least 3 read
    assert bool((result.iterations % 8 == 0).all() & (result.iterations >= 8 * 3).all()), result.iterations
    assert torch.allclose(result.hardware_time_s, result.iterations.double() * 20e-9)


def test_deterministic_digits_deq_converges_on_the_twin() -> None:
    result = _digits_on("aoc48-twin", {})
    assert result.all_converged, result.summary()


def test_statuses_diverged_and_out_of_budget(gen: torch.Generator) -> None:
    w = torch.eye(12, dtype=torch.float64)
    x = torch.full((2, 12), 0.5, dtype=torch.float64)
    ideal = load_device("ideal")
    blowup = OpticalLoop(ideal, w, alpha=3.0, gain="absolute").solve(x, max_iter=400)
    assert (blowup.status == SolveStatus.DIVERGED).all()
    slow = OpticalLoop(ideal, 0.1 * w, alpha=0.999, gain="absolute").solve(x, max_iter=20)
    assert (slow.status == SolveStatus.MAX_ITER).all()
    noisy = OpticalLoop(load_device("ideal", {"noise.thermal.enabled": True, "noise.power_per_unit_w": 1e-7}),
                        0.1 * w, alpha=0.5, gain="absolute")
    with pytest.raises(InputError, match="generator is required"):
        noisy.solve(x)


# -- noise sources ---------------------------------------------------------------------------------

def test_without_noise_silences_per_iteration_sources_and_keeps_static_ones(gen: torch.Generator) -> None:
    noisy = load_device("aoc48")
    quiet = without_noise(noisy)
    assert quiet["slm.bits"] == 9 and quiet["variation.enabled"] and quiet["noise.dark.enabled"]
    w, x, z0 = _noisy_setup(gen, 4)
    loop = OpticalLoop(quiet, w, beta=18.6, generator=1)
    assert not loop.needs_generator and OpticalLoop(noisy, w, beta=18.6, generator=1).needs_generator
    assert noise_budget(quiet)[-1].std_v == 0
    frozen = without_noise(noisy, static=True)
    assert not frozen["variation.enabled"] and frozen["slm.programming_error_levels"] == 0
    assert torch.equal(OpticalLoop(frozen, w, beta=18.6).step(z0, x), OpticalLoop(frozen, w, beta=18.6).step(z0, x))


def test_dark_current_offset_and_its_shot_noise(gen: torch.Generator) -> None:
    draws, n = 6000, 16
    current = 2e-6  # large, so that its shot noise shows next to nothing else
    base = {"noise.dark.current_a": current, "noise.dark.relative_spread": 0.0}
    w = torch.randn(n, n, generator=gen, dtype=torch.float64)
    z = (0.3 * torch.randn(1, n, generator=gen, dtype=torch.float64)).expand(draws, n).contiguous()
    dark = OpticalLoop(load_device("aoc16-twin", {**base, "noise.dark.enabled": True, "noise.multiplier": 0.0}),
                       w, beta=18.6)
    clean = OpticalLoop(load_device("aoc16-twin"), w, beta=18.6)
    v = dark.device.values
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    gain = 18.6 * float(dark.optics.gain_scale)
    for with_dark, without in zip(dark.detectors(z[:1]), clean.detectors(z[:1])):
        assert torch.allclose(with_dark - without, torch.full_like(without, gain * current / unit), atol=1e-12)
    noisy = OpticalLoop(load_device("aoc16-twin", {**base, "noise.dark.enabled": True}), w, beta=18.6)
    p, q = noisy.detectors(z, generator=3)
    expected = gain * math.sqrt(2 * ELECTRON_CHARGE_C * current * v["noise.bandwidth_hz"]) / unit
    p0, q0 = dark.detectors(z[:1])
    for sample, mean in ((p, p0), (q, q0)):
        diff = sample - mean
        assert (diff.mean(0).abs() <= 5 * expected / math.sqrt(draws)).all()
        assert ((diff.var(0) / expected**2 - 1).abs() <= 5 * math.sqrt(2 / draws)).all()
    rows = {r.source: r for r in noise_budget(load_device("aoc48"))}
    assert {"dark-current shot noise (in the shot noise)", "dark-current offset"} <= set(rows)
    alone = {"noise.shot.enabled": False}  # its own row only without shot noise, which otherwise counts it
    rows = {r.source: r for r in noise_budget(load_device("aoc48", alone))}
    bigger = {r.source: r for r in noise_budget(load_device("aoc48", {**alone, "noise.dark.current_a": 4e-9}))}
    assert bigger["dark-current shot noise"].std_v == pytest.approx(2 * rows["dark-current shot noise"].std_v,
                                                                    rel=1e-6)


def test_dark_current_shot_noise_is_counted_once(gen: torch.Generator) -> None:
    # Each path's photocurrent is the light's plus the dark current; its shot noise is 2 q B times their sum, once
    # (the detector signal D the loop draws at carries the dark current as an offset).
    n, dark_a = 16, 4e-5  # as much dark current as the bias light's photocurrent, so that a second count would show
    w = torch.randn(n, n, generator=gen, dtype=torch.float64)
    z = 0.3 * torch.randn(4, n, generator=gen, dtype=torch.float64)
    on = {"noise.shot.enabled": True, "noise.dark.enabled": True, "noise.dark.current_a": dark_a,
          "noise.dark.relative_spread": 0.0}
    loop = OpticalLoop(load_device("aoc16-twin", on), w, beta=18.6)
    light = OpticalLoop(load_device("aoc16-twin"), w, beta=18.6)  # the same light, no dark current
    v = loop.device.values
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    c, g = loop.constants(), 18.6 * float(loop.optics.gain_scale)
    t = step.nonlinearity(z, c.sigmoid, False)
    d_pos, d_neg = step.detector_signals(step.led_signals(t, c.led_coefficients, constant=True), c.det_t, c.det_offset)
    var = step.difference_std(d_pos, d_neg, c.noise) ** 2  # detector units, both paths
    current = sum(unit * (d / g + v["noise.bias_units"]) + dark_a for d in light.detectors(z))
    assert torch.allclose(var, 2 * ELECTRON_CHARGE_C * v["noise.bandwidth_hz"] * current / unit**2, rtol=1e-9)


def test_noise_multiplier_scales_every_per_iteration_source() -> None:
    one = {r.source: r.std_v for r in noise_budget(load_device("aoc48")) if r.when == "per iteration"}
    four = {r.source: r.std_v for r in noise_budget(load_device("aoc48", {"noise.multiplier": 4.0}))
            if r.when == "per iteration"}
    for source, std in one.items():
        assert four[source] == pytest.approx(4 * std, rel=1e-9)


# -- trainable loop parameters ---------------------------------------------------------------------

def test_alpha_and_beta_train_through_the_device(gen: torch.Generator) -> None:
    w = torch.randn(48, 48, generator=gen, dtype=torch.float64)
    x = torch.rand(4, 48, generator=gen, dtype=torch.float64)
    z0 = torch.zeros(4, 48, dtype=torch.float64)
    dev = load_device("aoc48", {"noise.multiplier": 0.0})

    def loss(alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        loop = OpticalLoop(dev, w, alpha=alpha, beta=beta, generator=1)
        return loop.iterate(z0, x, 8).pow(2).sum()

    alpha = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    beta = torch.tensor(18.6, dtype=torch.float64, requires_grad=True)
    loss(alpha, beta).backward()
    eps = 1e-6
    for param, grad in ((alpha, alpha.grad), (beta, beta.grad)):
        with torch.no_grad():
            up, down = param + eps, param - eps
            plus = loss(up, beta) if param is alpha else loss(alpha, up)
            minus = loss(down, beta) if param is alpha else loss(alpha, down)
        assert float(grad) == pytest.approx(float(plus - minus) / (2 * eps), rel=1e-5)
    with pytest.raises(InputError, match="beta = tensor of shape"):
        OpticalLoop(dev, w, beta=torch.ones(3), generator=1)


def test_gradients_pass_every_stage_of_a_noisy_iteration(gen: torch.Generator) -> None:
    """The step's passes run in place on their own temporaries (`step.led_signals`): autograd must still get
    the gradient of the same function, through the sigmoid, both LED cubics, RIN, the detectors and their
    noise, momentum and the response (finite differences in float64, the noise keyed so it is fixed)."""
    w, x, _ = _noisy_setup(gen, 3)
    loop = _loop(w)
    assert loop.layout() == step.Layout(tanh=False, rin=True, detector_noise=True, momentum=True, saturate=True,
                                        respond=True)
    z = (0.2 * torch.randn(3, 48, generator=gen, dtype=torch.float64)).requires_grad_()
    z_prev = (0.2 * torch.randn(3, 48, generator=gen, dtype=torch.float64)).requires_grad_()

    def one_step(z: torch.Tensor, z_prev: torch.Tensor) -> torch.Tensor:
        return loop.step(z, x, z_prev=z_prev, generator=7, iteration=2)

    assert torch.autograd.gradcheck(one_step, (z, z_prev), eps=1e-6, atol=1e-6, rtol=1e-4)


# -- nothing silently wrong (the reliability issue's loop cases) -----------------------------------

@pytest.mark.parametrize("alpha", [-3.0, 1e6])
def test_a_diverging_loop_is_reported_not_returned(alpha: float, gen: torch.Generator) -> None:
    from aocsim.errors import ConvergenceError

    w, x, z0 = _noisy_setup(gen, 2)
    loop = OpticalLoop("aoc48-twin", w, alpha=alpha, beta=18.6)
    with pytest.raises(ConvergenceError, match=rf"the loop diverged: 2 of 2 samples .* \(alpha {alpha}, beta 18.6\)"):
        loop.iterate(z0, x, 200)
    assert (loop.solve(x).status == SolveStatus.DIVERGED).all()


@pytest.mark.parametrize("bad", [-5, 2.5, "10", None, True])
def test_iteration_counts_are_checked(bad: object, gen: torch.Generator) -> None:
    w, x, z0 = _noisy_setup(gen, 2)
    loop = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6)
    with pytest.raises(InputError, match=rf"iterations = {bad!r}; expected an integer >= 0"):
        loop.iterate(z0, x, bad)
    with pytest.raises(InputError, match="iterations = 0; expected an integer >= 1"):
        loop.iterate(z0, x, 0, trajectory=True)
    with pytest.raises(InputError, match="x has batch size 2 but z has 1"):
        loop.iterate(z0[:1], x, 3)


def test_precision_is_never_silently_demoted(gen: torch.Generator) -> None:
    w, x, z0 = _noisy_setup(gen, 2, torch.float32)
    loop = OpticalLoop("aoc48-twin", w, alpha=0.5, beta=18.6)
    with pytest.raises(InputError, match="z is torch.float64 but the loop computes in torch.float32"):
        loop.step(z0.double(), x)
    assert loop.step(z0.half(), x).dtype == torch.float32  # promotion is fine


def test_overrides_take_numpy_scalars_and_the_cli_reads_numbers_like_profile_files() -> None:
    import numpy as np
    from click.testing import CliRunner

    from aocsim.cli import main

    dev = load_device("aoc48", {"slm.bits": np.int64(6), "noise.bandwidth_hz": np.float32(5e7),
                                "noise.shot.enabled": np.bool_(False)})
    assert dev["slm.bits"] == 6 and type(dev["slm.bits"]) is int and dev["noise.shot.enabled"] is False
    out = CliRunner().invoke(main, ["devices", "show", "aoc48", "--set", "noise.bandwidth_hz=5e7"])
    assert out.exit_code == 0 and "'noise.bandwidth_hz': 50000000.0" in out.output


def test_absurd_noise_settings_are_flagged_in_the_budget() -> None:
    from aocsim.hardware.engine.budget import format_budget

    text = format_budget(noise_budget(load_device("aoc48", {"noise.power_per_unit_w": 1e-18})))
    assert "note: shot noise" in text and "SNR < 0 dB" in text
    assert max(len(line) for line in text.splitlines()[:-1]) < 90  # 4 significant digits, no 31-digit numbers
    assert "note:" not in format_budget(noise_budget(load_device("aoc48")))


@pytest.mark.parametrize("overrides", [{"noise.rin.rin_db_per_hz": -120.0},
                                       {"noise.rin.rin_db_per_hz": -110.0, "noise.shot.enabled": False,
                                        "noise.thermal.enabled": False, "noise.dark.enabled": False}],
                         ids=["all", "rin"])
def test_predicted_node_noise_matches_the_drawn_noise(overrides: dict, gen: torch.Generator) -> None:
    # The noise budget and the noise-floor status read step.node_noise_variance; the iteration draws
    # the noise. Per channel, the drawn variance must match the prediction (RIN boosted to show).
    from aocsim.hardware.engine.step import node_noise_variance, nonlinearity

    draws = 4000
    dev = load_device("aoc48", overrides)
    w = torch.randn(48, 48, generator=gen, dtype=torch.float64)
    z = (0.3 * torch.randn(1, 48, generator=gen, dtype=torch.float64)).expand(draws, 48).contiguous()
    loop = OpticalLoop(dev, w, beta=18.6, generator=1)
    quiet = OpticalLoop(without_noise(dev), w, beta=18.6, generator=1)
    noise = loop.optical(z, generator=4) - quiet.optical(z[:1])
    c = loop.constants()
    predicted = node_noise_variance(nonlinearity(z[:1], c.sigmoid, False), c, 18.6, float(c.noise[1]),
                                    float(c.noise[2]), float(c.noise[0]))[0]
    ratio = noise.var(0) / predicted
    assert ((ratio - 1).abs() <= 5 * math.sqrt(2 / (draws - 1))).all(), ratio
