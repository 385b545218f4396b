"""The machine a placement declares (docs/PHYSICS.md section 6): weight-stationary, one module per tile
(every module's static power paid), or time-multiplexed on fewer modules (each product writes every
tile again: a weight load with its reload time and energy, and a new programming error). Prices are
recomputed here from the profiles' figures with this file's own arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aocsim import compare, load_model
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.physics.energy import energy_j
from aocsim.hardware.physics.sources import without_noise
from aocsim.hardware.profiles.profile import load_device
from aocsim.errors import InputError
from _light import emitter_w_by_hand

AOC48 = load_device("aoc48")
V = AOC48.values
RT, RELOAD = float(V["loop.round_trip_s"]), float(V["slm.reload_time_s"])
# A pass waits for its conversions: each channel's ADC and DAC convert once per 8 round trips (one of each
# per channel); a product adds one DAC and one ADC interval and the digital stage (docs/PHYSICS.md section 6).
PASS = RT * max(1, V["readout.sample_interval_iterations"] / V["readout.adcs_per_channel"],
                V["injection.dac_interval_iterations"] / V["injection.dacs_per_channel"])
LATENCY = (V["readout.sample_interval_iterations"] + V["injection.dac_interval_iterations"]) * RT + V[
    "readout.digital_latency_s"]
# 12-bit converters priced at a constant Walden figure of merit from their energy at the quoted 9 bits
E_DAC = V["energy.dac_energy_j"] * 2.0 ** (V["injection.dac_bits"] - V["energy.precision_bits"])
E_ADC = V["energy.adc_energy_j"] * 2.0 ** (V["readout.adc_bits"] - V["energy.precision_bits"])


def lit_power_w(v, n: int) -> float:
    """One module's emitters and electronics from the figures: N emitters at 2 N P_unit d / eta_link optical
    power over their wall-plug efficiency, N channels of detection electronics (idle: a fraction of it)."""
    emit = emitter_w_by_hand(v, n)
    return n * (emit / v["energy.emitter_wall_plug_efficiency"] + v["energy.detector_tia_power_w"])


def module_power_w(v, n: int) -> float:
    """One module's static power at work: its emitters and electronics lit, the SLMs."""
    return lit_power_w(v, n) + v["energy.slm_power_w"]


def static_j(v, modules: int, time_s: float, busy_s: float) -> float:
    """Every module's SLMs all along; emitters and electronics lit while busy, at the idle fraction otherwise."""
    idle = modules * time_s - busy_s
    return (lit_power_w(v, 48) * (busy_s + v["energy.idle_power_fraction"] * idle)
            + modules * v["energy.slm_power_w"] * time_s)


def _weight(m: int, k: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.1


def test_weight_stationary_pays_every_modules_static_power_for_its_passes_at_the_converters_pace() -> None:
    tiles = TiledMatrix(AOC48, _weight(100, 70), generator=1)  # a 3 x 2 grid: six modules
    act = tiles.activity("analog", passes=2)
    assert act.modules == 6 and act.weight_loads == 0
    assert act.time_s == pytest.approx(2 * PASS + LATENCY)  # all tiles at once, two passes
    e = energy_j(AOC48, act)
    assert act.busy_s == pytest.approx(6 * 2 * PASS)  # each module lit for its tile's two passes, idle otherwise
    static = static_j(V, 6, 2 * PASS + LATENCY, 6 * 2 * PASS)
    converted = act.dac_conversions * E_DAC + act.adc_conversions * E_ADC
    assert float(e["total"]) == pytest.approx(static + converted + act.digital_ops * V["energy.digital_energy_per_op_j"])


@pytest.mark.parametrize("count", [1, 4])
def test_time_multiplexing_pays_a_reload_per_tile_and_a_write_per_wave(count: int) -> None:
    tiles = TiledMatrix(AOC48, _weight(100, 70), generator=1, mount=Mount(count=count, multiplexed=True))
    act = tiles.activity("digital")
    waves = math.ceil(6 / count)
    assert act.modules == count and act.weight_loads == 6
    # a wave's tiles written onto their modules at once (one reload time), then its pass
    assert act.time_s == pytest.approx(waves * (PASS + RELOAD) + LATENCY)
    e = energy_j(AOC48, act)
    slm = count * V["energy.slm_power_w"] * act.time_s + 6 * V["energy.slm_reload_energy_j"]
    assert float(e["slm"]) == pytest.approx(slm)
    # the modules idle through the reloads: their emitters and electronics at the idle fraction
    lit = float(e["emitters"] + e["detectors_tia"])
    assert lit == pytest.approx(static_j(V, count, act.time_s, 6 * PASS) - count * V["energy.slm_power_w"] * act.time_s)
    assert lit < count * lit_power_w(V, 48) * act.time_s * 0.2


def test_tiles_on_one_module_share_its_fixed_pattern_and_each_reload_draws_a_new_programming_error() -> None:
    w = _weight(96, 48, seed=3)  # two tiles
    held = TiledMatrix(AOC48, w, generator=2)
    shared = TiledMatrix(AOC48, w, generator=2, mount=Mount(count=1, multiplexed=True))

    held_slms, shared_slms = [[loop.arrays.slm for loop in m.loops] for m in (held, shared)]
    assert not torch.equal(held_slms[0].distortion_pos, held_slms[1].distortion_pos)  # two modules
    assert torch.equal(shared_slms[0].distortion_pos, shared_slms[1].distortion_pos)  # one module
    # programming error alone (no per-pass noise, no variation): the product changes from reload to reload
    quiet = without_noise(AOC48).with_overrides({"variation.enabled": False})
    t = torch.rand(3, 48, generator=torch.Generator().manual_seed(4), dtype=torch.float64) - 0.5
    stationary = TiledMatrix(quiet, w, generator=5)
    multiplexed = TiledMatrix(quiet, w, generator=5, mount=Mount(count=1, multiplexed=True))
    torch.testing.assert_close(stationary(t, call=0).y, stationary(t, call=1).y, rtol=0, atol=0)
    first, again, second, back = (multiplexed(t, call=c).y for c in (0, 0, 1, 0))
    torch.testing.assert_close(first, again, rtol=0, atol=0)  # a reload is keyed: same call, same bits
    torch.testing.assert_close(back, first, rtol=0, atol=0)  # and kept: a call's reload found again
    assert (first - second).abs().max() > 1e-6


def test_a_mount_and_a_module_count_refuse_bad_values() -> None:
    with pytest.raises(InputError, match=r"Mount.count = 0; expected an integer >= 1"):
        Mount(count=0)
    with pytest.raises(InputError, match=r"modules = 0; expected an integer >= 1"):
        compare("parity-implicit", "aoc48", torch.zeros(1, 4, dtype=torch.long), placement={"modules": 0})


@pytest.fixture(scope="module")
def parity():
    return default_workload(load_model("parity-implicit"), sequences=2, length_factor=1)


def test_compare_reports_the_machine_time_multiplexed_on_one_module(parity) -> None:
    """parity-implicit on one module: every tile product writes its tiles first, so a token takes at
    least its weight loads x the reload time; the Dataset names the machine."""
    ds = compare("parity-implicit", "aoc48", parity.inputs[:, :8], placement={"modules": 1},
                 calibration=parity.calibration)
    loads, time = ds.weight_loads.values, ds.hardware_time_s.sel(path="device").values
    assert ds.attrs["modules"] == 1 and (loads > 0).all()
    assert (time >= loads * RELOAD).all()
    products = 3 + 2 * ds.iterations.sel(path="device").values  # the injection, both projections per evaluation
    # one module: every tile written in turn (a wave of one) and its pass, and each product's latency
    assert np.allclose(time, loads * RELOAD + ds.round_trips.values * PASS + products * LATENCY)
    assert "time-multiplexed" in ds.hardware_time_s.attrs["description"]


def test_compare_counts_one_module_per_tile_when_weight_stationary(parity) -> None:
    ds = compare("parity-implicit", "aoc48", parity.inputs[:, :8], calibration=parity.calibration)
    # parity on 48 channels: inject 4 x 1, in_proj 4 x 1, out_proj 1 x 2 tiles, each on a module of its own
    assert ds.attrs["modules"] == 10 and float(ds.weight_loads.max()) == 0
    its = ds.iterations.sel(path="device").values
    assert np.allclose(ds.hardware_time_s.sel(path="device").values, (3 + 2 * its) * (PASS + LATENCY))
    assert "weight-stationary" in ds.hardware_time_s.attrs["description"]


def test_weight_stationary_maps_hold_every_tile_on_a_module_of_its_own(parity) -> None:
    """The maps of a model take consecutive modules (each its own fixed pattern); time-multiplexed on two
    modules, every tile of every map is written onto one of the two."""
    from aocsim.execute import Placement, place

    model = load_model("parity-implicit")
    for modules, expected in ((None, None), (2, {0, 1})):
        placed = place(model, AOC48, Placement(modules=modules), calibration=parity.calibration)
        used = [p.mount.module(i) for p in placed.programs.values() for i in range(p.tiles)]
        if expected is None:
            assert sorted(used) == list(range(len(used))) and len(used) == 10
        else:
            assert set(used) == expected and all(p.mount.multiplexed for p in placed.programs.values())


@pytest.mark.slow
def test_a_sweep_reports_the_machine_beside_time_and_energy(tmp_path) -> None:
    """Every point names its machine: modules and weight loads per token next to time and energy."""
    from aocsim.experiments.sweep import sweep

    spec = {"model": "parity-implicit", "device": "aoc48", "data": {"sequences": 1, "length_factor": 1},
            "axes": {"placement.modules": [1, 100]}, "seeds": 1, "chips": 1,
            "metrics": ["modules", "weight_loads_per_inference", "time_per_inference_s"]}
    ds = sweep(spec, tmp_path / "s", workers=1)
    one, many = (ds.sel({"placement.modules": m}).squeeze() for m in (1, 100))
    assert float(one.modules) == 1 and float(many.modules) == 10  # 100 modules asked: one per tile is enough
    assert float(one.weight_loads_per_inference) > 0 and float(many.weight_loads_per_inference) == 0
    assert float(one.time_per_inference_s) >= float(one.weight_loads_per_inference) * RELOAD
