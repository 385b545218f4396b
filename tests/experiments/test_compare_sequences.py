"""`aocsim.compare` for implicit SSMs (the hybrid placement, aocsim/execute/hybrid.py) and the main job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from aocsim import InputError, compare, load_model
from aocsim.tasks.groups import group, word_problems

MODEL = "parity-implicit"


@pytest.fixture(scope="module")
def data():
    return word_problems(group("parity"), 4, 32, identity_prob=0.5, generator=8)


@pytest.mark.parametrize("mode", ["sequential", "simultaneous"])
def test_on_the_ideal_device_the_paths_coincide(mode: str, data) -> None:
    tokens, targets = data
    ds = compare(MODEL, "ideal", tokens, targets, placement=dict(mode=mode, rtol=1e-5, max_iter=300))
    assert {k: v for k, v in ds.sizes.items() if k != "iteration"} == {"path": 2, "chip": 1, "seed": 1,
                                                                       "sample": 4, "position": 32}
    assert bool(ds.agreement.all()) and float(ds.fixed_point_error.max()) < 1e-4
    # convergence traces: per sequence the median token residual falls from its start to the tolerance
    for path in ("exact", "device"):
        for row in ds.residual_trace.sel(path=path).values.reshape(-1, ds.sizes["iteration"]):
            row = row[~np.isnan(row)]
            assert row[-1] <= 1e-5 and row[0] > 100 * row[-1], path
    assert ds.residual_trace.attrs["kind"] == "relative" and ds.residual_trace.attrs["units"] == "1"
    assert bool(ds.correct.all())  # the exact model solves parity
    assert bool(np.isnan(ds.hardware_time_s.sel(path="exact")).all())
    assert bool((ds.hardware_time_s.sel(path="device") > 0).all())
    assert ds.attrs["placement.mode"] == mode and ds.attrs["model"] == MODEL and "tiles" in ds.attrs["placement"]


@pytest.mark.slow
def test_noisy_aoc48_is_reproducible_on_any_number_of_workers_and_keeps_parity(data) -> None:
    tokens, targets = data
    first = compare(MODEL, "aoc48", tokens, targets, seeds=(0, 1))
    # the second run in two processes: the model and profile pickled, each run keyed by chip and seed
    xr.testing.assert_identical(first, compare(MODEL, "aoc48", tokens, targets, seeds=(0, 1), workers=2))
    assert float(first.agreement.mean()) > 0.99
    assert not np.array_equal(first.residual.sel(path="device", seed=0), first.residual.sel(path="device", seed=1))
    # device time, weight-stationary (each tile on a module of its own, a map's tiles at once): the
    # injection's product once, the two projections' every evaluation of the map (k + 1 for k iterations),
    # each a pass at the converters' pace (160 ns) and a product's latency (DAC, ADC, digital: 280 ns)
    hw = first.hardware_time_s.sel(path="device")
    it = first.iterations.sel(path="device")
    assert np.allclose(hw, (1 + 2 * (it + 1)) * (160e-9 + 280e-9))
    assert first.attrs["modules"] == 10  # parity on 48 channels: inject 4 x 1, in 4 x 1, out 1 x 2 tiles


@pytest.mark.parametrize(("change", "message"), [
    ({"tokens": torch.full((2, 5), 7)}, "token id 7 is outside the vocabulary"),
    ({"targets": torch.zeros(2, 3, dtype=torch.long)}, "expected an integer tensor \\[4, 32\\]"),
    ({"placement": {"mode": "both"}}, "mode = 'both'"),
    ({"placement": {"rtol": 2.0}}, "rtol = 2.0"),
    ({"placement": {"max_iter": 0}}, "max_iter = 0"),
    ({"placement": {"stop": "readout"}}, "stop = 'readout' applies to native DEQs and twin DEQs; parity-implicit on aoc48-twin "
                                         "runs as a hybrid SSM"),
    ({"placement": {"fit": False}}, "fit = False applies to native DEQs"),
    ({"placement": {"bogus": 1}}, "placement.bogus is not a placement option"),
    ({"placement": {"on_tiles": ("inject", "conv")}}, "unknown map 'conv'; expected 'none' or a non-empty subset of"),
    ({"placement": {"on_tiles": ("inject", "inject")}}, "not a set; expected 'none' or a non-empty subset"),
])
def test_bad_arguments_are_one_line_errors(change: dict, message: str, data) -> None:
    tokens, targets = data
    args = {"model": MODEL, "tokens": tokens, "targets": targets, **change}
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare(args.pop("model"), "aoc48-twin", args.pop("tokens"), args.pop("targets"), **args)


@pytest.mark.slow
def test_the_main_job_runs_digits_and_parity(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aocsim.cli import main

    out = tmp_path / "main.nc"
    result = CliRunner().invoke(main, ["compare", "--device", "aoc48-twin", "--seeds", "1", "--chips", "1",
                                       "--sequences", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "model digits-deq48 on aoc48-twin" in result.output
    assert "model parity-implicit on aoc48-twin, sequential mode: 1 runs (chips x seeds) x 256 tokens" in result.output
    with xr.open_dataset(out, engine="h5netcdf", group=MODEL) as ds:
        assert dict(ds.sizes)["position"] == 64 and float(ds.agreement.mean()) == 1.0
    assert (tmp_path / "main.png").read_bytes()[:4] == b"\x89PNG"
    # an existing figure is not replaced without --overwrite, and that is said before any work
    (tmp_path / "fig.svg").write_text("mine")
    again = CliRunner().invoke(main, ["compare", "--out", str(tmp_path / "other.nc"), "--plot",
                                      str(tmp_path / "fig.svg")])
    assert again.exit_code == 1 and "--plot" in again.output and "exists; pass --overwrite" in again.output
    assert (tmp_path / "fig.svg").read_text() == "mine" and not (tmp_path / "other.nc").exists()
    bad = CliRunner().invoke(main, ["compare", "--out", str(tmp_path / "other.nc"), "--plot", str(tmp_path / "f.txt")])
    assert bad.exit_code == 1 and "unknown format '.txt'" in bad.output
    bad = CliRunner().invoke(main, ["compare", "--out", str(tmp_path / "other.nc"), "--on-tiles", "inject,scan"])
    assert bad.exit_code == 1 and "unknown map 'scan'" in bad.output and bad.output.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.svg", "main.nc", "main.png"]


@pytest.mark.parametrize("mode", ["sequential", "simultaneous"])
def test_float64_on_ideal_fixed_points_agree_to_1e_9(mode: str, data) -> None:
    """The acceptance bound: on `ideal` a float64 model's device fixed points are its exact ones to 1e-9."""
    tokens, targets = data
    model = load_model(MODEL).double()
    ds = compare(model, "ideal", tokens[:2, :16], targets[:2, :16], placement=dict(mode=mode, rtol=1e-13, max_iter=400))
    assert bool(ds.agreement.all()) and float(ds.fixed_point_error.max()) <= 1e-9


@pytest.mark.slow
def test_only_the_chosen_maps_run_on_tiles(data) -> None:
    """on_tiles=("out_proj",): the injection and input projection stay digital (no tile passes for them)."""
    tokens, targets = data
    ds = compare(MODEL, "aoc48", tokens[:2, :16], targets[:2, :16], placement=dict(on_tiles=("out_proj",)))
    assert ds.attrs["maps_on_tiles"] == "blocks.0.out_proj" and ds.attrs["placement"].startswith("hybrid: out_proj")
    it = ds.iterations.sel(path="device") + 1  # evaluations of the map: k + 1 for k iterations
    # out_proj: 1 x 2 tiles at once, a pass at the converters' pace and a product's latency
    assert np.allclose(ds.hardware_time_s.sel(path="device"), it * (160e-9 + 280e-9))
    assert ds.attrs["modules"] == 2
    # converters per token: the whole input into the tile row, one ADC per output (analog partial
    # sums) or one per output and tile column (digital)
    d_model, d_inner = load_model(MODEL).blocks[0].out_proj.weight.shape
    dac_per_pass = np.unique(ds.dac_conversions / it)
    assert dac_per_pass.size == 1 and d_inner <= dac_per_pass[0] <= d_inner + 4  # (+ the tiles' offset inputs)
    assert np.array_equal(ds.adc_conversions, it * d_model)
    digital = compare(MODEL, "aoc48", tokens[:2, :16], targets[:2, :16], placement=dict(on_tiles=("out_proj",), partial_sums="digital"))
    it = digital.iterations.sel(path="device") + 1
    assert np.array_equal(digital.adc_conversions, it * 2 * d_model) and digital.attrs["placement.partial_sums"] == "digital"
    # energy: both modules' static power over the hardware time plus the converters' energy
    from aocsim.hardware.physics.energy import Activity, energy_j
    from aocsim.hardware.profiles.profile import load_device

    expected = energy_j(load_device("aoc48"), Activity(digital.hardware_time_s.sel(path="device").values,
                                                       digital.dac_conversions.values, digital.adc_conversions.values,
                                                       digital.digital_ops.values, modules=2,
                                                       busy_s=digital.busy_s.values))
    assert np.array_equal(digital.digital_ops, digital.adc_conversions)  # each tile column's reading added
    assert np.allclose(digital.energy_j, expected["total"], rtol=1e-12)
    with pytest.raises(InputError, match="on_tiles = .* applies to hybrid SSMs"):
        compare("digits-deq48", "aoc48-twin", torch.zeros(1, 64, dtype=torch.float64), placement=dict(on_tiles=("inject",)))
