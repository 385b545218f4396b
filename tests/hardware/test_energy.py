"""Time and energy per inference and TOPS/W (aocsim.hardware.physics.energy, docs/PHYSICS.md section 6).

The expected numbers are computed here by hand from the profile's figures (the equations of
docs/PHYSICS.md section 6 written out again), not by calling the module's helpers.
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch
import pytest
from click.testing import CliRunner

from aocsim import load_device
from aocsim.cli import main
from aocsim.errors import InputError, ProfileError
from aocsim.hardware.engine.dynamics import loop_activity
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.physics.energy import COMPONENTS, Activity, at_precision, energy_j, tops_per_watt
from aocsim.hardware.profiles.schema import FIELDS
from aocsim.paths import devices_dir
from _light import emitter_w_by_hand

ENERGY_KEYS = {f.key.split(".", 1)[1] for f in FIELDS if f.key.startswith("energy.")}


def _hand_power(dev, n: int) -> float:
    """Static power, W: N (2 N P_unit d / (eta_link eta_wpe) + P_det_tia) + P_slm."""
    v = dev.values
    emitter = emitter_w_by_hand(v, n) / v["energy.emitter_wall_plug_efficiency"]
    return n * (emitter + v["energy.detector_tia_power_w"]) + v["energy.slm_power_w"]


def test_projected_profile_tops_per_watt() -> None:
    dev = load_device("aoc-projected")
    n, t = dev.channels, dev["loop.round_trip_s"]
    assert n == 2048 and t == 2e-8 and dev["energy.precision_bits"] == 8
    tops = tops_per_watt(dev)
    # by hand: 2 N^2 operations per round trip over the static power times the round trip
    hand = 2 * n * n / t / _hand_power(dev, n) / 1e12
    assert tops == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(11.18, abs=0.01)  # docs/PHYSICS.md section 6
    assert tops_per_watt(dev, bits=8) == tops


def test_projected_tops_per_watt_is_within_the_lights_bound() -> None:
    """2 N^2 operations per round trip for N emitters' 2 N P_unit / (eta wpe) of power (one unit of drive): at most
    eta wpe / (t_rt P_unit) <= wpe / (t_rt P_unit) (docs/PHYSICS.md section 6), whatever the rest costs."""
    from aocsim.hardware.physics.light import light_bound_tops_per_watt

    dev = load_device("aoc-projected")
    v, tops = dev.values, tops_per_watt(dev)
    wpe, eta = v["energy.emitter_wall_plug_efficiency"], v["energy.optical_link_efficiency"]
    bound = wpe / (v["loop.round_trip_s"] * v["noise.power_per_unit_w"]) / 1e12
    assert bound == pytest.approx(22.73, abs=0.01)  # the audit's bound for a lossless link
    assert tops <= eta * bound <= bound
    assert light_bound_tops_per_watt(dev.parts) == pytest.approx(eta * bound, rel=1e-12)
    # free electronics and SLMs: the module is its light, and reaches the bound
    lit_only = dev.with_overrides({"energy.detector_tia_power_w": 0.0, "energy.slm_power_w": 0.0})
    assert tops_per_watt(lit_only) == pytest.approx(eta * bound, rel=1e-12)


def test_the_light_per_emitter_scales_with_the_channels() -> None:
    """Each emitter lights 2N pixels: its light grows as N and the emitters' power as N^2."""
    from aocsim.hardware.physics.energy import emitter_optical_power_w, static_power_w

    for name in ("aoc-projected", "aoc48"):
        dev = load_device(name)
        n = dev.channels
        assert emitter_optical_power_w(dev, n // 2) == pytest.approx(emitter_optical_power_w(dev) / 2, rel=1e-12)
        assert emitter_optical_power_w(dev) == pytest.approx(emitter_w_by_hand(dev.values, n), rel=1e-12)
        assert static_power_w(dev, n // 2)["emitters"] == pytest.approx(static_power_w(dev)["emitters"] / 4)


def test_converting_every_round_trip_adds_the_conversions() -> None:
    dev = load_device("aoc-projected")
    n, t, v = dev.channels, dev["loop.round_trip_s"], dev.values
    per_trip = _hand_power(dev, n) * t + n * (v["energy.dac_energy_j"] + v["energy.adc_energy_j"]
                                              + v["energy.digital_energy_per_op_j"])
    assert tops_per_watt(dev, converting=True) == pytest.approx(2 * n * n / per_trip / 1e12, rel=1e-12)
    flagged = dev.with_overrides({"energy.converts_every_round_trip": True})
    assert tops_per_watt(flagged) == tops_per_watt(dev, converting=True) < tops_per_watt(dev)


def test_aoc48_today() -> None:
    dev = load_device("aoc48")
    assert tops_per_watt(dev) == pytest.approx(2 * 48 ** 2 / 2e-8 / _hand_power(dev, 48) / 1e12, rel=1e-12)
    assert tops_per_watt(dev) == pytest.approx(0.0251, abs=1e-4)
    # the digits DEQ: 48 states, 20 iterations, inside the 125-iteration settle window; 40 samples every 8
    act = loop_activity(dev.parts, 48, 20, readout=True)
    window = (125 + 39 * 8 + 1) * 2e-8
    assert act.time_s == pytest.approx(window) and act.dac_conversions == 48 and act.adc_conversions == 48 * 40
    e = energy_j(dev, act)
    # 12-bit converters priced at 10 pJ per conversion at the 9 bits the energies are quoted at, 2x per bit
    # (a constant Walden figure of merit), at 6.25 MS/s (below the 100 MS/s knee)
    hand = _hand_power(dev, 48) * window + 48 * 8e-11 + 1920 * 8e-11 + 1920 * 1e-12
    assert e["total"] == pytest.approx(hand, rel=1e-12)
    assert e["total"] == pytest.approx(80.4e-6, rel=1e-3)


def test_components_sum_to_the_total_in_joules() -> None:
    dev = load_device("aoc48")
    e = energy_j(dev, loop_activity(dev.parts, 48, 20, readout=True))
    assert set(e) == {*COMPONENTS, "total"}
    assert e["total"] == pytest.approx(sum(e[c] for c in COMPONENTS))
    # units: the static parts over the time are watts of a lab machine; a conversion costs pJ, not J or fJ
    assert 1.0 < (e["emitters"] + e["slm"] + e["detectors_tia"]) / 8.76e-6 < 100.0
    assert 1e-12 < e["adc"] / 1920 < 1e-9
    # TOPS/W is operations per joule over 1e12
    ops_per_joule = 2 * 48 ** 2 / (_hand_power(dev, 48) * 2e-8)
    assert tops_per_watt(dev) * 1e12 == pytest.approx(ops_per_joule)


def test_static_energy_is_linear_in_time_and_converter_energy_in_conversions() -> None:
    dev = load_device("aoc48")
    one = energy_j(dev, Activity(1e-6, 100, 300, 50))
    two_t = energy_j(dev, Activity(2e-6, 100, 300, 50))
    two_c = energy_j(dev, Activity(1e-6, 200, 600, 100))
    for c in ("emitters", "slm", "detectors_tia"):
        assert two_t[c] == pytest.approx(2 * one[c]) and two_c[c] == pytest.approx(one[c])
    for c in ("dac", "adc", "digital"):
        assert two_c[c] == pytest.approx(2 * one[c]) and two_t[c] == pytest.approx(one[c])
    # aoc48's 12-bit converters at 10 pJ per conversion quoted at 9 bits: 2^3 x (a constant Walden figure of merit)
    assert one["dac"] == pytest.approx(100 * 8e-11) and one["adc"] == pytest.approx(300 * 8e-11)


def test_tops_per_watt_scales_with_channels_and_round_trip() -> None:
    base = load_device("aoc-projected")
    free_slm = base.with_overrides({"energy.slm_power_w": 0.0, "energy.detector_tia_power_w": 0.0})
    # the emitters alone: N emitters of 2 N pixels each for 2 N^2 ops, TOPS/W the same at any N
    assert tops_per_watt(free_slm, channels=1024) == pytest.approx(tops_per_watt(free_slm), rel=1e-12)
    free_light = base.with_overrides({"energy.slm_power_w": 0.0, "noise.power_per_unit_w": 1e-18})
    # power per channel fixed (the electronics), no shared SLM power: 2 N^2 ops for N channels' power, TOPS/W ~ N
    assert tops_per_watt(free_light, channels=1024) == pytest.approx(tops_per_watt(free_light) / 2, rel=1e-9)
    slow = base.with_overrides({"loop.round_trip_s": 4e-8})
    assert tops_per_watt(slow) == pytest.approx(tops_per_watt(base) / 2, rel=1e-12)


def test_sensitivities_are_the_power_shares() -> None:
    dev = load_device("aoc-projected")
    v, n = dev.values, dev.channels
    total = _hand_power(dev, n)
    shares = {"energy.detector_tia_power_w": n * v["energy.detector_tia_power_w"] / total,
              "energy.slm_power_w": v["energy.slm_power_w"] / total}
    shares["noise.power_per_unit_w"] = 1 - sum(shares.values())  # the emitters

    def elasticity(key: str) -> float:
        h = 1e-3
        up = dev.with_overrides({key: v[key] * math.exp(h)})
        down = dev.with_overrides({key: v[key] * math.exp(-h)})
        return (math.log(tops_per_watt(up)) - math.log(tops_per_watt(down))) / (2 * h)

    for key, share in shares.items():
        assert elasticity(key) == pytest.approx(-share, abs=1e-5)
    assert elasticity("energy.emitter_wall_plug_efficiency") == pytest.approx(shares["noise.power_per_unit_w"],
                                                                              abs=1e-5)
    assert elasticity("loop.round_trip_s") == pytest.approx(-1.0, abs=1e-9)
    assert shares["energy.detector_tia_power_w"] == pytest.approx(0.0136, abs=1e-4)


def test_precision_scaling_laws() -> None:
    dev = load_device("aoc-projected")
    nine = at_precision(dev, 9)
    assert nine["energy.precision_bits"] == 9
    # shot-noise-limited light: 4x per bit, a little less where thermal noise takes a share (`light_scale`)
    assert 3.9 * dev["noise.power_per_unit_w"] < nine["noise.power_per_unit_w"] < 4 * dev["noise.power_per_unit_w"]
    assert nine["energy.adc_energy_j"] == pytest.approx(2 * dev["energy.adc_energy_j"])
    assert nine["energy.detector_tia_power_w"] == dev["energy.detector_tia_power_w"]
    assert at_precision(dev, 8) is dev
    assert tops_per_watt(dev, bits=9) == pytest.approx(tops_per_watt(nine))
    assert tops_per_watt(dev, bits=10) < tops_per_watt(dev, bits=9) < tops_per_watt(dev) < tops_per_watt(dev, bits=7)


def test_loop_and_tile_activities_broadcast_add_and_scale() -> None:
    dev = load_device("aoc48")
    window = (125 + 39 * 8 + 1) * 2e-8  # the readout window whatever the solve's iterations
    act = loop_activity(dev.parts, 48, np.array([10, 125, 200]), readout=True)
    np.testing.assert_allclose(act.time_s, [window] * 3)
    stop = loop_activity(dev.parts, 48, np.array([10, 125, 200]), readout=False)  # sampled every 8
    np.testing.assert_allclose(stop.time_s, [16 * 2e-8, 128 * 2e-8, 200 * 2e-8])
    np.testing.assert_allclose(stop.adc_conversions, [48 * 2, 48 * 16, 48 * 25])
    assert act.adc_conversions == 48 * 40 and act.digital_ops == 48 * 40
    e = energy_j(dev, stop)
    assert e["total"].shape == (3,) and e["total"][0] < e["total"][1] < e["total"][2]
    one = TiledMatrix(dev, torch.ones(48, 40, dtype=torch.float64), generator=0).activity("analog")
    tiled = one * np.array([1, 6])  # 1 and 6 products
    # a pass waits for its conversions (one ADC per channel, one conversion per 8 round trips: 160 ns; the
    # 50 MS/s DAC keeps up), and a product adds a DAC and an ADC interval and 100 ns of digital stage: 440 ns
    product = 8 * 2e-8 + (1 + 8) * 2e-8 + 1e-7
    np.testing.assert_allclose(tiled.time_s, [product, 6 * product])
    np.testing.assert_allclose(tiled.round_trips, [1, 6])
    np.testing.assert_allclose(tiled.dac_conversions, [40, 240])
    np.testing.assert_allclose(tiled.adc_conversions, [48, 288])
    both = stop + one  # both happened: counts add, the channels lit are the larger
    np.testing.assert_allclose(both.dac_conversions, 48 + 40)
    assert both.channels == 48


def test_every_energy_figure_cites_a_source_or_says_assumed() -> None:
    year = re.compile(r"\b(19|20)\d\d\b")
    for path in sorted(devices_dir().glob("*.yaml")):
        found, in_block = set(), False
        for no, line in enumerate(path.read_text().splitlines(), 1):
            code, _, comment = line.partition("#")
            if re.match(r"^energy:\s*$", code):
                in_block = True
                continue
            if code.strip() and not code.startswith(" "):
                in_block = False
            key = (re.match(r"^\s+(\w+):", code) if in_block else None) or re.match(r"^\s+energy\.(\w+):", code)
            if not key:
                continue
            found.add(key.group(1))
            where = f"{path.name}:{no}: {line.strip()}"
            assert comment.strip(), f"{where}: no comment"
            assert "assum" in comment.lower() or year.search(comment), f"{where}: no source (year) nor 'assumption'"
        if "base:" not in path.read_text():
            assert found == ENERGY_KEYS, f"{path.name}: energy keys {sorted(ENERGY_KEYS - found)} missing"
        else:
            assert found <= ENERGY_KEYS


@pytest.mark.parametrize(("key", "value", "message"), [
    ("energy.emitter_wall_plug_efficiency", 1.5, "energy.emitter_wall_plug_efficiency = 1.5; expected values <= 1"),
    ("energy.emitter_wall_plug_efficiency", 0.0,
     "energy.emitter_wall_plug_efficiency = 0.0; expected values >= 0.0001"),
    ("energy.optical_link_efficiency", -0.5, "energy.optical_link_efficiency = -0.5; expected values >= 1e-06"),
    ("energy.detector_tia_power_w", -1e-3, "energy.detector_tia_power_w = -0.001; expected values >= 0"),
    ("energy.slm_power_w", 5e3, "energy.slm_power_w = 5000.0; expected values <= 1000"),
    ("energy.adc_energy_j", 1.0, "energy.adc_energy_j = 1.0; expected values <= 1e-06"),
    ("energy.dac_energy_j", "1 pJ", "energy.dac_energy_j = '1 pJ'; expected a finite number"),
    ("energy.precision_bits", 0, "energy.precision_bits = 0; expected values >= 1"),
    ("energy.converts_every_round_trip", "yes", "energy.converts_every_round_trip = 'yes'; expected true or false"),
])
def test_bad_energy_values_are_rejected_in_one_line(key: str, value: object, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_device("aoc48", {key: value})
    assert str(err.value) == f"overrides: {message}"


def test_bad_arguments_are_one_line_errors() -> None:
    dev = load_device("aoc48")
    with pytest.raises(InputError, match=r"^Activity.time_s = -1.0; expected finite numbers >= 0$"):
        Activity(-1.0, 0, 0)
    with pytest.raises(InputError, match=r"^Activity.adc_conversions = nan; expected finite numbers >= 0$"):
        Activity(1e-6, 0, float("nan"))
    with pytest.raises(InputError, match=r"^repetitions = -3; expected finite numbers >= 0$"):
        Activity(1e-6) * -3
    with pytest.raises(InputError, match=r"^tops_per_watt: profile 'ideal' has no fixed channel count"):
        tops_per_watt(load_device("ideal"))
    with pytest.raises(InputError, match=r"^bits = 0; expected an integer >= 1$"):
        tops_per_watt(dev, bits=0)
    with pytest.raises(InputError, match=r"^activity = 3; expected an aocsim.hardware.physics.energy.Activity$"):
        energy_j(dev, 3)  # type: ignore[arg-type]
    ideal = load_device("ideal")
    # the lossless ideal loop: only the light costs, 2 N P_unit per emitter at one unit of drive
    assert tops_per_watt(ideal, channels=48) == pytest.approx(2 * 48 ** 2 / (48 * 2 * 48 * 1e-4 * 2e-8) / 1e12)


def test_devices_show_prints_energy_and_tops_per_watt() -> None:
    out = CliRunner().invoke(main, ["devices", "show", "aoc48"])
    assert out.exit_code == 0, out.output
    assert "efficiency   25.14 GOPS/W at 9 bits" in out.output
    assert "8.76 us, 80.4 uJ" in out.output and "static power emitters 4.76 W, SLM 2 W" in out.output
    ideal = CliRunner().invoke(main, ["devices", "show", "ideal"])
    assert ideal.exit_code == 0 and "channels: null, so no TOPS/W" in ideal.output


def test_a_run_with_nothing_on_the_optics_powers_none_of_the_static_components() -> None:
    """`STATIC` names what `static_power_w` prices; a run with no time on the optics and no channel count
    (every map digital, on a profile of any size) gets 0 J from each of them."""
    from aocsim.hardware.physics.energy import STATIC, Activity, energy_j, static_power_w
    from aocsim.hardware.profiles.profile import load_device

    assert tuple(static_power_w(load_device("aoc48"))) == STATIC
    out = energy_j(load_device("ideal"), Activity(0.0))
    assert all(out[name] == 0.0 for name in STATIC) and out["total"] == 0.0
