"""Each emitter's LED cubic (`emitter.cubic_spread`, docs/PHYSICS.md section 3) and predistortion from what
the chip measures of it (aocsim/hardware/engine/emitter_calibration.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aocsim.hardware.engine import emitter_calibration, keys
from aocsim.hardware.engine.emitter_calibration import drive_shapes
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.engine.programming import emitter_cubics
from aocsim.experiments.reference_loop import PerStageLoop
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.profiles.profile import load_device
from _streams import fresh_recording

F64 = torch.float64


def _cubics(profile, chip: int = 0, tile: int = 0, n: int = 48) -> torch.Tensor:
    parts = profile.with_overrides({"variation.chip_seed": chip}).parts
    return emitter_cubics(parts, n, dtype=F64, device="cpu", tile=tile)


def test_spread_zero_reproduces_the_shared_cubic_bit_for_bit() -> None:
    """With the spread 0, noisy aoc48's tiles (with and without predistortion, two passes, a padded tile)
    and loop (drifted, noisy; and noise-free) give the numbers the shared cubic gave (recorded before the
    spread existed, one thread), and no emitter stream is drawn."""
    # the partial-sum holds off too: they came after these numbers were recorded (tests/hardware/test_hold.py)
    dev = load_device("aoc48", {"emitter.cubic_spread": 0.0, "readout.hold_capacitance_f": None,
                                "readout.hold_leakage_a": 0.0, "readout.hold_injection_c": 0.0,
                                "readout.hold_injection_c_per_v": 0.0})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(40, 72, generator=gen, dtype=F64)
        t = torch.rand(8, 72, generator=gen, dtype=F64) * 2 - 1
        out = []
        with fresh_recording() as drawn:
            for pre in (False, True):
                y = TiledMatrix(dev, w, generator=0, predistort=pre)(t, passes=2).y
                out += [y[3, 5].item().hex(), y[7, 39].item().hex()]
        w48 = torch.rand(48, 48, generator=gen, dtype=F64) * 0.2 - 0.1
        x = torch.rand(4, 48, generator=gen, dtype=F64) - 0.5
        z0 = torch.zeros(4, 48, dtype=F64)
        z = OpticalLoop(dev, w48, alpha=0.5, beta=18.6, generator=1).drifted(3).iterate(z0, x, 20, generator=2)
        out += [z[1, 2].item().hex(), z[3, 47].item().hex()]
        quiet = dev.with_overrides({"noise.multiplier": 0.0})
        z = OpticalLoop(quiet, w48, alpha=0.5, beta=18.6, generator=1).iterate(z0, x, 20)
        out += [z[1, 2].item().hex(), z[3, 47].item().hex()]
    finally:
        torch.set_num_threads(threads)
    recorded = ['0x1.6285cf4b7eff4p-1', '0x1.348343a5a997bp-1', '0x1.76dd399d77985p-1', '0x1.31b8850fe44b1p-1',
                '0x1.f61565fbd8ac1p-1', '0x1.c2e3d80da5eb4p-1', '0x1.f5f3be3ba5295p-1', '0x1.c2cc7eb571c7ep-1']
    # to the last few bits: BLAS picks its kernels by CPU (on an AVX-512 CPU the noise-free loop's value
    # ends 3 units in the last place away); a spread of 0.001 moves them by 1e10 units or more
    ulps = [abs(float.fromhex(a) - float.fromhex(b)) / math.ulp(float.fromhex(b)) for a, b in zip(out, recorded)]
    assert max(ulps) <= 16, (out, ulps)
    assert not any(keys.Stream.EMITTER in k.path or keys.Stream.EMITTER_CALIBRATION in k.path for k in drawn)


def test_spread_statistics_per_emitter_chip_and_load() -> None:
    """The t^3 and t^2 coefficients of each emitter and path scatter about the profile's with relative std
    s (1920 draws: 10 modules x 2 paths x 2 powers x 48 emitters; 4 sigma of the sample std), the linear and
    constant terms stay; two chips differ, and a chip is the same for every weight load; the loop's
    light follows each emitter's own cubic (the per-stage yardstick agrees with the folded step)."""
    s = 0.05
    dev = load_device("aoc48-twin", {"emitter.cubic_spread": s})
    nominal = torch.tensor(np.array([dev["emitter.poly_pos"], dev["emitter.poly_neg"]]), dtype=F64)[:, :, None]
    rel = torch.cat([(_cubics(dev, tile=m) / nominal - 1.0)[:, :2].reshape(-1) for m in range(10)])
    assert abs(float(rel.std()) / s - 1.0) < 4 / (2 * rel.numel()) ** 0.5, float(rel.std())
    assert abs(float(rel.mean())) < 4 * s / rel.numel() ** 0.5
    assert torch.equal(_cubics(dev)[:, 2:], nominal[:, 2:].expand(2, 2, 48))
    assert not torch.equal(_cubics(dev, chip=0), _cubics(dev, chip=1))
    w = torch.rand(48, 48, generator=torch.Generator().manual_seed(0), dtype=F64) - 0.5
    loads = [OpticalLoop(dev, w * k, alpha=0.5, beta=18.6, generator=g) for k, g in ((1.0, 1), (0.5, 2))]
    assert torch.equal(torch.stack([loads[0].poly_pos, loads[0].poly_neg]), _cubics(dev))
    assert torch.equal(loads[0].poly_pos, loads[1].poly_pos)
    z = torch.rand(3, 48, generator=torch.Generator().manual_seed(1), dtype=F64) - 0.5
    x = torch.rand(3, 48, generator=torch.Generator().manual_seed(2), dtype=F64) - 0.5
    folded, staged = loads[0].step(z, x), PerStageLoop(loads[0]).step(z, x)
    assert float((folded - staged).abs().max()) < 1e-12
    shared = OpticalLoop(load_device("aoc48-twin"), w, alpha=0.5, beta=18.6, generator=1).step(z, x)
    assert float((folded - shared).abs().max()) > 1e-5  # the spread reaches the node


def _even_order(profile, predistort: bool) -> float:
    """The yardstick of tests/hardware/test_tiles.py (test_predistorted_tiles_respond_linearly):
    ||y(t) + y(-t) - 2 y(0)|| / ||y(t) - y(-t)|| on a 40 x 40 product at full drive."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 40, generator=gen, dtype=F64)
    t = torch.rand(64, 40, generator=gen, dtype=F64) * 2 - 1
    t[:, 0] = 1.0
    tiles = TiledMatrix(profile, w, generator=0, predistort=predistort)
    y = {s: tiles(s * t).y / tiles(s * t).input_scale[:, None] for s in (1.0, -1.0)}
    zero = tiles(torch.zeros(1, 40, dtype=F64)).y
    return float((y[1.0] + y[-1.0] - 2 * zero).norm() / (y[1.0] - y[-1.0]).norm())


def test_measured_predistortion_leaves_a_residual_that_grows_with_the_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even-order distortion after predistortion, rms over 12 chips of the noise-free aoc48-twin: 1.67 %
    with one shared cubic (the ideal: the profile's cubic inverted), worse with a 30 % spread and each
    emitter measured (2.6 %; 1.3-5.1 % by chip), while predistortion still removes most of it (6.2 %
    driven as is); inverting the profile's cubic instead of the measured ones leaves more."""
    ideal = _even_order(load_device("aoc48-twin"), True)
    spread = [load_device("aoc48-twin", {"emitter.cubic_spread": 0.3, "variation.chip_seed": c}) for c in range(12)]
    pre = torch.tensor([_even_order(p, True) for p in spread])
    rms = float(pre.pow(2).mean().sqrt())
    assert 0.016 < ideal < 0.017, ideal
    assert rms > 1.2 * ideal and float(pre.max()) > 1.5 * ideal, (ideal, pre)
    as_is = torch.tensor([_even_order(p, False) for p in spread])
    assert rms < 0.5 * float(as_is.pow(2).mean().sqrt()), (pre, as_is)

    def profile_cubic(profile, *args):  # the shared cubic of the profile, whatever the chip's emitters are
        return drive_shapes(profile.with_overrides({"emitter.cubic_spread": 0.0}), *args)

    monkeypatch.setattr(emitter_calibration, "drive_shapes", profile_cubic)
    shared = torch.tensor([_even_order(p, True) for p in spread])
    assert float(shared.pow(2).mean().sqrt()) > 1.1 * rms, (shared, pre)


def test_the_emitters_cubics_drift_as_a_relative_random_walk_and_stay_put_by_default() -> None:
    """drift.cubic_std_per_inference = c: after k inferences each emitter's t^3 and t^2 coefficients have moved
    by a relative std of c sqrt(k) (192 coefficients on 48 channels; 25 % covers 4 sigma of their sample std),
    the linear and constant terms not at all; c = 0 (the lab profiles' default) draws nothing."""
    w = torch.rand(48, 48, generator=torch.Generator().manual_seed(3), dtype=F64) * 0.2 - 0.1
    still = OpticalLoop(load_device("aoc48"), w, alpha=0.5, beta=18.6, generator=1)
    with fresh_recording() as drawn:
        moved = still.drifted(7)
    assert torch.equal(moved.poly_pos, still.poly_pos) and torch.equal(moved.poly_neg, still.poly_neg)
    assert not any(k.path[-2:] == (keys.Stream.DRIFT, 1) for k in drawn)
    c, steps = 0.01, 16
    loop = OpticalLoop(load_device("aoc48", {"drift.cubic_std_per_inference": c}), w, alpha=0.5, beta=18.6, generator=1)
    start = torch.stack([loop.poly_pos, loop.poly_neg])
    for k in range(steps):
        loop = loop.drifted(100 + k)
    end = torch.stack([loop.poly_pos, loop.poly_neg])
    ratio = (end[:, :2] / start[:, :2] - 1).flatten()
    assert abs(float(ratio.std()) / (c * steps ** 0.5) - 1) < 0.25, float(ratio.std())
    assert torch.equal(end[:, 2:], start[:, 2:])


def test_drifted_emitters_undo_part_of_the_predistortion() -> None:
    """The chip measures its emitters once; a weight load's emitters have drifted one step since, so the
    predistortion, calibrated on the cubics as they were, leaves more even-order distortion (aoc48-twin with
    a 5 % spread, 3 chips; a 20 % step makes it plain)."""
    def residual(chip: int, c: float) -> float:
        return _even_order(load_device("aoc48-twin", {"emitter.cubic_spread": 0.05, "variation.chip_seed": chip,
                                                      "drift.enabled": True, "drift.cubic_std_per_inference": c}), True)
    for chip in range(3):
        assert residual(chip, 0.2) > 1.2 * residual(chip, 0.0), chip



@pytest.mark.slow
@pytest.mark.parametrize("spread", [0.0, 0.3])
def test_all_tiles_predistorted_in_one_call_are_each_tile_on_its_own(spread: float) -> None:
    """The stacked predistortion (one call over [T, B, N], `tile_shapes`) against a yardstick that drives
    tile by tile through its module's `drive_shapes`: the same bits; a narrow last column keeps its
    padded channels at exactly 0."""
    from aocsim.hardware.engine.emitter_calibration import predistorted_tiles, tile_shapes
    from aocsim.hardware.physics import components as C

    profile = load_device("aoc48", {"emitter.cubic_spread": spread, "variation.chip_seed": 2})
    loop = OpticalLoop(profile, torch.zeros(48, 48, dtype=F64), gain="absolute", generator=0)
    drive = (torch.rand(5, 70, generator=torch.Generator().manual_seed(1), dtype=F64) * 2 - 1) * 0.2
    cols, size, n, modules = 2, 40, 48, [0, 3, 1, 4]
    shapes = tile_shapes(profile, n, modules, 0.2, F64, "cpu")
    stacked = predistorted_tiles(drive, cols, size, n, len(modules), loop.injection, shapes)
    padded = torch.nn.functional.pad(drive, (0, n))
    for i, module in enumerate(modules):
        start = (i % cols) * size
        width = min(size, drive.shape[1] - start)
        shapes = drive_shapes(profile, n, module, 0.2, F64, "cpu")
        one = loop.injection(C.predistort_drive(padded[:, start:start + n], *shapes))[:, :width]
        assert torch.equal(stacked[i, :, :width], one), i
        assert bool((stacked[i, :, width:] == 0).all()), i


def _whole_stage_shapes(profile, sign: float, module: int, r: float, offset: int) -> torch.Tensor:
    """[2, N]: (k3, k2) measured by reading the whole optical stage (`step.optical`, every LED's RIN and every
    detector drawn) at each drive's one output: the yardstick of the measurement's one Gaussian per reading.
    `offset` moves the counters: independent draws."""
    from aocsim._numerics import least_squares
    from aocsim.hardware.engine.step import node_drive, optical
    from aocsim.hardware.physics import components as C

    n, levels, repeats = 48, emitter_calibration.LEVELS, emitter_calibration.REPEATS
    key = keys.chip_root(profile.values["variation.chip_seed"]).fold(keys.Stream.EMITTER_CALIBRATION, module)
    loop = OpticalLoop(profile, sign * torch.eye(n, dtype=F64), gain="absolute", generator=key.fold(0), module=module)
    drive = loop.injection(torch.linspace(-r, r, levels, dtype=F64))
    x = torch.diag_embed(drive[:, None].expand(levels, n)).reshape(-1, n)
    low, high = (float(b) for b in profile.values["readout.range_v"])
    total = torch.zeros(levels, n, dtype=F64)
    for rep in range(repeats):
        ids = offset + torch.arange(rep * x.shape[0], (rep + 1) * x.shape[0])
        c, layout = loop.constants(), loop.layout()
        node = optical(x, c, node_drive(loop.k0(), c, loop.node(0, x)[0], layout), layout, key.tensor(),
                       keys.sample_counters(ids, n))
        codes = C.quantize_range(node, low, high, profile.values["readout.adc_bits"]).reshape(levels, n, n)
        total += codes.diagonal(dim1=1, dim2=2)
    a = least_squares(torch.stack([drive ** p for p in range(4)], dim=1), total / repeats)
    seen = a[1].abs() > emitter_calibration.DEAD * a[1].abs().median()
    assert int((~seen).sum()) == 1  # aoc48's dead fan-in channel
    return torch.where(seen, torch.stack([a[3] / a[1], a[2] / a[1]]), 0.0)


@pytest.mark.parametrize("overrides", [{}, {"noise.rin.enabled": False}])  # RIN and detector noise; detector only
def test_the_emitter_measurement_has_the_whole_optical_stages_statistics(
        overrides: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement draws one Gaussian per reading (the node's mean and `step.node_noise_variance`); reading
    the whole optical stage instead gives each emitter's shape the same mean and spread: over 8 independent
    measurements each, 94 (emitter, power) pairs with a seen emitter, the mean |difference of means| / its
    standard error is about 0.80 (E|Z|; its own std about 0.06 here: bound 1.1) and the median ratio of the
    two spreads is near 1 (bound [0.7, 1.4])."""
    from aocsim.hardware.engine import counter_rng

    monkeypatch.setattr(emitter_calibration, "REPEATS", 64)  # both measurements, to keep the test short
    profile = load_device("aoc48", overrides)
    module, r, runs = 2, 0.2, 8
    fast, whole = [], []
    for run in range(runs):
        monkeypatch.setattr(emitter_calibration, "normal",
                            lambda base, counters, dtype, run=run: counter_rng.normal(base, counters + 10 ** 8 * run, dtype))
        fast.append(emitter_calibration._fitted_shape(profile, 48, 1.0, module, r)[:2])
        whole.append(_whole_stage_shapes(profile, 1.0, module, r, 10 ** 9 * (run + 1)))
    f, w = torch.stack(fast), torch.stack(whole)  # [runs, 2, N]
    seen = w[0] != 0
    error = ((f.var(0) + w.var(0)) / runs).sqrt()
    z = ((f.mean(0) - w.mean(0)) / error)[seen].abs()
    assert float(z.mean()) < 1.1, float(z.mean())
    ratio = float((f.std(0) / w.std(0))[seen].median())
    assert 0.7 < ratio < 1.4, ratio


def test_a_populations_fit_measures_each_points_emitters_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fitting 8 design points' programs together on 9 tiles (72 modules' emitters, both paths) measures each
    module of each point once: at 64 remembered measurements the LRU memo forgot them between the fit's
    measurements and re-measured 2 x 72 emitters for each of them (a population's fits took 1.9x its points')."""
    from aocsim.execute.tile_program import fit_tile_programs
    from aocsim.hardware.engine.memo import forget_all

    forget_all()
    measured = []
    original = emitter_calibration._fitted_shape
    monkeypatch.setattr(emitter_calibration, "_fitted_shape",
                        lambda *args: measured.append(args[1:4]) or original(*args))
    base = load_device("aoc48")
    points = [base.with_overrides({"slm.bits": 5 + i % 4, "noise.power_per_unit_w": 1e-4 * (1 + i)}) for i in range(8)]
    weight = torch.randn(130, 130, generator=torch.Generator().manual_seed(0), dtype=F64) / 12
    fit_tile_programs(points, weight, tile_size=48, input_range=0.2, key=keys.as_key(3), predistort=True, rounds=1)
    assert len(measured) == 2 * 8 * 9
