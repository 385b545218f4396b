"""The converters set a tile pass's pace and have a price (docs/PHYSICS.md section 6): recomputed here from
the profiles' figures with this file's own arithmetic, not by calling the pricing code."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from aocsim import compare
from aocsim.cli.app import main
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.physics.converters import conversion_energy_j, pass_time_s
from aocsim.hardware.profiles.profile import load_device
from aocsim import load_model

AOC48 = load_device("aoc48")
V = AOC48.values
RT = float(V["loop.round_trip_s"])
ADC_INTERVAL_S = V["readout.sample_interval_iterations"] * RT  # one conversion of one ADC


def test_a_bit_more_costs_twice_the_energy_per_conversion_at_the_same_rate() -> None:
    # Fault guarded (seen failing with the bits left out of the price: 80 pJ both): bits for free.
    eight, twelve = (load_device("aoc48", {"readout.adc_bits": b}).parts for b in (8, 12))
    assert conversion_energy_j(twelve, "adc") > conversion_energy_j(eight, "adc")
    assert conversion_energy_j(twelve, "adc") == pytest.approx(16 * conversion_energy_j(eight, "adc"), rel=1e-12)
    # priced from the figure quoted at energy.precision_bits = 9: 10 pJ x 2^(12 - 9)
    assert conversion_energy_j(twelve, "adc") == pytest.approx(V["energy.adc_energy_j"] * 8, rel=1e-12)
    ideal_bits = load_device("aoc48", {"injection.dac_bits": None}).parts
    assert conversion_energy_j(ideal_bits, "dac") == pytest.approx(V["energy.dac_energy_j"], rel=1e-12)


@pytest.mark.parametrize("interval", [1, 2, 4])
def test_above_the_knee_a_conversion_costs_in_proportion_to_the_rate(interval: int) -> None:
    # 20 ns round trips: a conversion every 1, 2, 4 of them is 50, 25, 12.5 MS/s; a 10 MS/s knee
    parts = load_device("aoc48", {"readout.sample_interval_iterations": interval,
                                  "energy.converter_knee_hz": 1e7}).parts
    rate = 1.0 / (interval * RT)
    assert conversion_energy_j(parts, "adc") == pytest.approx(V["energy.adc_energy_j"] * 8 * rate / 1e7, rel=1e-12)
    below = load_device("aoc48", {"readout.sample_interval_iterations": interval}).parts  # 100 MS/s knee
    assert conversion_energy_j(below, "adc") == pytest.approx(V["energy.adc_energy_j"] * 8, rel=1e-12)


@pytest.mark.parametrize(("adcs", "dac_interval", "expected_trips"), [(1, 8, 8), (2, 8, 8), (2, 4, 4), (8, 1, 1), (8, 2, 2),
                                                                        (16, 1, 1)])
def test_a_pass_waits_for_the_slowest_converters(adcs: int, dac_interval: int, expected_trips: int) -> None:
    parts = load_device("aoc48", {"readout.adcs_per_channel": adcs,
                                  "injection.dac_interval_iterations": dac_interval}).parts
    assert pass_time_s(parts) == pytest.approx(expected_trips * RT, rel=1e-12)


@pytest.fixture(scope="module")
def parity():
    return default_workload(load_model("parity-implicit"))


@pytest.mark.parametrize(("modules", "averaging"), [(None, 1), (None, 16), (1, 1), (2, 16), (4, 16)])
def test_a_tiled_sequence_models_time_per_token_covers_its_adc_conversions(parity, modules: int | None,
                                                                           averaging: int) -> None:
    """Acceptance: time per token >= ADC conversions / (modules x channels x ADCs per channel) x the ADC's
    interval (each ADC converts once per interval), 16 passes averaged per product (A5's placement) and not.
    Fault guarded (seen failing with main's pace, a pass of one round trip and no latency: 0.59 of the floor)."""
    ds = compare("parity-implicit", "aoc48", parity.inputs[:4, :8],
                 placement={"modules": modules, "averaging": averaging}, calibration=parity.calibration)
    time = ds.hardware_time_s.sel(path="device").values
    adc = ds.adc_conversions.values
    count = ds.attrs["modules"]
    floor = adc / (count * 48 * V["readout.adcs_per_channel"]) * ADC_INTERVAL_S
    assert (time >= floor * (1 - 1e-12)).all(), float((time / floor).min())


def test_devices_show_prints_the_converter_budget() -> None:
    out = CliRunner().invoke(main, ["devices", "show", "aoc48"])
    assert out.exit_code == 0, out.output
    assert "DAC 12 bits at 50 MS/s x 1 per channel, 80 pJ per conversion" in out.output
    assert "ADC 12 bits at 6.25 MS/s x 1 per channel, 80 pJ per conversion" in out.output
    assert "a tile pass 160 ns (a round trip 20 ns); 280 ns latency per product" in out.output
