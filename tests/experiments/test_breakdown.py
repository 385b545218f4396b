"""Where it breaks (aocsim/experiments/breakdown.py): device accuracy against noise and SLM bits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from aocsim import InputError, load_model
from aocsim.experiments.breakdown import Case, _break, breakdown_table, plot_breakdown, where_it_breaks
from aocsim.tasks.groups import group, word_problems


def _synthetic(multiplier_acc: list[float], bits_acc: list[float], exact: float = 1.0) -> xr.Dataset:
    return xr.Dataset(
        {"multiplier_accuracy": (("model", "multiplier", "chip", "seed"), np.array(multiplier_acc)[None, :, None, None]),
         "bits_accuracy": (("model", "bits", "chip", "seed"), np.array(bits_acc)[None, :, None, None]),
         "exact_accuracy": ("model", [exact])},
        coords={"model": ["m"], "multiplier": [1.0, 4.0, 16.0], "bits": [2, 5, 9], "chip": [0], "seed": [0]})


def test_break_is_the_first_setting_toward_worse_hardware_beyond_two_points() -> None:
    ds = _synthetic([0.99, 0.97, 0.60], [0.50, 0.90, 1.0])
    assert _break(ds, "m", "multiplier", ascending=True) == 4.0  # 0.97 is 3 points below 1.0
    assert _break(ds, "m", "bits", ascending=False) == 5.0  # the highest resolution that breaks
    assert _break(_synthetic([1.0] * 3, [0.50, 0.985, 1.0]), "m", "bits", ascending=False) == 2.0  # within 2 points
    assert np.isnan(_break(_synthetic([1.0, 0.99, 0.985], [1.0, 1.0, 1.0]), "m", "multiplier", ascending=True))


def test_a_regression_breaks_where_its_error_exceeds_twice_the_exact_error() -> None:
    ds = _synthetic([np.nan] * 3, [np.nan] * 3, exact=np.nan)
    ds["exact_mse"] = ("model", [1e-5])
    ds["multiplier_mse"] = ds.multiplier_accuracy.copy(data=np.array([1.1e-5, 1.9e-5, 5e-5])[None, :, None, None])
    ds["bits_mse"] = ds.bits_accuracy.copy(data=np.array([9e-4, 2.5e-5, 1.0e-5])[None, :, None, None])
    assert _break(ds, "m", "multiplier", ascending=True) == 16.0  # 1.9x holds, 5x breaks
    assert _break(ds, "m", "bits", ascending=False) == 5.0
    ds.attrs["device"] = "aoc48"
    ds["breaks_at_multiplier"], ds["breaks_at_bits"] = ("model", [16.0]), ("model", [5.0])
    assert "m                  1.0e-05  1.1000  1.9000  5.0000  at 16x" in breakdown_table(ds)


@pytest.mark.slow
def test_twin_regression_holds_at_the_profile_and_breaks_at_heavy_noise(tmp_path: Path) -> None:
    from aocsim.experiments.workloads import default_workload

    model = load_model("regression-twin48")
    w = default_workload(model, samples=100)
    work = [Case("regression-twin48", model, w.inputs, w.targets, {"stop": "readout", "probes": 64})]
    ds = where_it_breaks(work, "aoc48", multipliers=(1, 1024), slm_bits=(9,), progress=False)
    mse = ds.multiplier_mse.sel(model="regression-twin48").mean(("chip", "seed"))
    exact = float(ds.exact_mse.sel(model="regression-twin48"))
    assert float(mse.sel(multiplier=1.0)) <= 1.1 * exact and float(mse.sel(multiplier=1024.0)) > 2 * exact
    assert float(ds.breaks_at_multiplier.sel(model="regression-twin48")) == 1024.0
    assert np.isnan(float(ds.breaks_at_bits.sel(model="regression-twin48")))
    assert plot_breakdown(ds, tmp_path / "r.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def parity_study() -> xr.Dataset:
    model = load_model("parity-implicit")
    tokens, targets = word_problems(group("parity"), 4, 32, identity_prob=0.5, generator=3)
    work = [Case("parity-implicit", model, tokens, targets, {"mode": "sequential"})]
    return where_it_breaks(work, "aoc48", multipliers=(1, 64), slm_bits=(9, 2), progress=False)


def test_parity_holds_at_the_profile_and_breaks_at_heavy_noise_and_two_bits(parity_study: xr.Dataset) -> None:
    ds = parity_study
    assert float(ds.exact_accuracy.sel(model="parity-implicit")) == 1.0
    assert float(ds.multiplier_accuracy.sel(multiplier=1.0).mean()) >= 0.98
    assert float(ds.bits_accuracy.sel(bits=9).mean()) >= 0.98
    assert float(ds.multiplier_accuracy.sel(multiplier=64.0).mean()) < 0.75  # chance is 0.5
    assert float(ds.bits_accuracy.sel(bits=2).mean()) < 0.75
    assert float(ds.breaks_at_multiplier.sel(model="parity-implicit")) == 64.0
    assert float(ds.breaks_at_bits.sel(model="parity-implicit")) == 2.0
    assert float(ds.multiplier_agreement.sel(multiplier=1.0).mean()) >= 0.98
    assert "at 64x" in breakdown_table(ds) and "at 2 bits" in breakdown_table(ds)


def test_study_writes_netcdf_and_a_plot(parity_study: xr.Dataset, tmp_path: Path) -> None:
    path = tmp_path / "breaks.nc"
    parity_study.to_netcdf(path, engine="h5netcdf")
    with xr.open_dataset(path, engine="h5netcdf") as back:
        xr.testing.assert_identical(back.load(), parity_study)
    png = plot_breakdown(parity_study, tmp_path / "breaks.png")
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize("kwargs, message", [
    ({"workloads": []}, "workloads is empty"),
    ({"multipliers": ["lots"]}, "multipliers = "),
    ({"slm_bits": (4, 4)}, "distinct"),
    ({"slm_bits": (4.5,)}, "whole numbers"),
    ({"device": 48}, "device = 48"),
])
def test_bad_study_settings_are_one_line_errors(kwargs: dict, message: str) -> None:
    work = [Case("x", "parity-implicit", None, None)]
    args = {"workloads": work, "device": "aoc48", **kwargs}
    with pytest.raises(InputError, match=message):
        where_it_breaks(args.pop("workloads"), **args)
