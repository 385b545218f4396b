"""Numbers a person can read (issue 41, finding 2): one SI prefix per value, so that no summary, table or
`aocsim devices show` line prints 1,000 or more before a prefixed unit, or below 0.01 after one."""

from __future__ import annotations

import re

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.units import PREFIXES, ops_per_watt, si

SCALE = {prefix: 10.0 ** exponent for exponent, prefix in PREFIXES if prefix}
# a number, then a prefixed unit of time, energy, power or efficiency ("296 ns", "38.5 TOPS/W", "1.9e+07 uJ")
PREFIXED = re.compile(r"(-?\d[\d.,]*(?:e[+-]?\d+)?) ?([PTGMkmunpf])(s|J|W|OPS/W)\b")


def unreadable(text: str) -> list[str]:
    """Every number before a prefixed unit that is 1,000 or more, or below 0.01."""
    bad = []
    for match in PREFIXED.finditer(text):
        value = abs(float(match.group(1).replace(",", "")))
        if value >= 1000 or 0 < value < 0.01:
            bad.append(match.group(0))
    return bad


@pytest.mark.parametrize("exponent", np.linspace(-14.9, 17.9, 67))
def test_si_puts_every_value_between_1_and_1000_with_its_prefix(exponent: float) -> None:
    value = 10.0 ** exponent * 1.2345
    text = si(value, "J")
    number, unit = text.split(" ")
    assert 1 <= float(number) < 1000 and unit.endswith("J")
    prefix = unit[:-1]
    back = float(number) * SCALE.get(prefix, 1.0)
    assert back == pytest.approx(value, rel=5e-3)  # three significant digits
    assert si(-value, "J") == "-" + text


def test_si_rounds_before_it_picks_the_prefix() -> None:
    assert si(9.997e-7, "s") == "1 us" and si(999.4e-9, "s") == "999 ns"
    assert si(0.2506, "s") == "251 ms" and si(250626e-6, "s") == "251 ms"
    assert si(0.0, "J") == "0 J" and si(float("nan"), "J") == "nan J"
    assert ops_per_watt(38.53) == "38.53 TOPS/W" and ops_per_watt(0.001664) == "1.664 GOPS/W"


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["aoc-projected", "aoc16", "aoc16-twin", "aoc48", "aoc48-twin", "ideal"])
def test_devices_show_prints_readable_numbers(profile: str) -> None:
    out = CliRunner().invoke(main, ["devices", "show", profile])
    assert out.exit_code == 0, out.output
    assert unreadable(out.output) == []
    if profile == "aoc48":  # 0.02514 TOPS/W passes the rule's 0.01 floor: the prefix is checked by name
        assert "25.14 GOPS/W with the loop running" in out.output


def test_the_sweep_table_gives_each_cost_its_own_prefix() -> None:
    """Times from 250 ms to 300 ns and energies from 19 J to 3 uJ in one column: no '250626.00 us'."""
    from aocsim.experiments.sweep.table import point_table, show

    dims = ("model", "slm.bits", "chip", "seed")
    time_s = np.array([0.2506, 2.96e-7, 1.2e-5])[None, :, None, None]
    energy = np.array([19.43, 3.04e-6, 5.5e-4])[None, :, None, None]
    ds = xr.Dataset({"time_per_inference_s": (dims, time_s), "energy_per_inference_j": (dims, energy),
                     "accuracy": (dims, np.full((1, 3, 1, 1), 0.5))},
                    coords={"model": ["m"], "slm.bits": [4, 6, 9], "chip": [0], "seed": [0]})
    ds["time_per_inference_s"].attrs["units"] = "s"
    ds["energy_per_inference_j"].attrs["units"] = "J"
    table = point_table(ds)
    assert unreadable(table) == [] and "251 ms" in table and "296 ns" in table and "19.4 J" in table
    assert "3.04 uJ" in table and "accuracy (%)" in table
    shown = show(ds, "energy_j", "slm.bits")  # the search's alias for the energy metric
    assert unreadable(shown) == [] and "19.4 J +- 0 J" in shown


def test_a_compare_summary_prints_readable_costs(capsys: pytest.CaptureFixture) -> None:
    from aocsim.cli.compare import _print_compare

    summary = {"model": "m", "device": "aoc48", "runs": 1, "samples": 4, "unit": "token", "mode": "sequential",
               "agreement": (1.0, 0.0, 1.0), "iterations": {"exact": 3.0, "device": 3.0}, "accuracy": None,
               "hardware_time_s": 0.2506, "energy_j": 19.43, "modules": 34, "weight_loads": 2.0,
               "status": {"converged": 4}, "timing": "t", "terms": {}, "warnings": []}
    _print_compare(summary)
    text = capsys.readouterr().out
    assert "251 ms per token" in text and "19.4 J per token" in text and unreadable(text) == []
