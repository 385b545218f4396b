"""Sweeps (aocsim/experiments/sweep): spec checks, resume after SIGKILL, the same Dataset on any
number of workers or a Dask cluster, expected trends, Pareto fronts, one-line errors."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.errors import InputError
from aocsim.experiments.sweep import load_spec, parse_spec, status, sweep
from aocsim.experiments.sweep.plots import pareto_front, plot_pareto, plot_sweep
from aocsim.experiments.sweep.spec import noise_seed
from aocsim.experiments.sweep.store import SweepStore

SMALL = {"model": "digits-deq48", "device": "aoc48", "data": {"samples": 24},
         "axes": {"slm.bits": [4, 9], "readout.adc_bits": [8, 12]}, "seeds": 2, "chips": 1,
         "metrics": ["accuracy", "agreement", "iterations", "fixed_point_error", "energy_per_inference_j"]}


def _write(tmp_path: Path, spec: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> xr.Dataset:
    """SMALL run uninterrupted on one worker."""
    return sweep(parse_spec(SMALL), tmp_path_factory.mktemp("one") / "sweep", workers=1)


@pytest.mark.slow
def test_two_workers_and_a_dask_cluster_give_the_same_dataset(reference: xr.Dataset, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    xr.testing.assert_identical(reference, sweep(parse_spec(SMALL), tmp_path / "two", workers=2))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        on_dask = sweep(parse_spec(SMALL), tmp_path / "dask", scheduler=cluster.scheduler_address)
    xr.testing.assert_identical(reference, on_dask)
    # each point's noise streams come from the root seed and its key: distinct per point and seed
    seeds = reference.noise_seed.values.ravel()
    assert len(set(seeds.tolist())) == seeds.size


@pytest.mark.slow
def test_a_sweep_killed_mid_run_and_resumed_gives_the_uninterrupted_dataset(reference: xr.Dataset,
                                                                            tmp_path: Path) -> None:
    spec, out = _write(tmp_path, SMALL), tmp_path / "killed"
    command = [sys.executable, "-m", "aocsim", "--threads", "1", "sweep", str(spec), "--out", str(out),
               "--workers", "1"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list((out / "points").glob("*.nc"))) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    written = len(list((out / "points").glob("*.nc")))
    assert 1 <= written < 4, written  # killed after some points and before the end
    assert not (out / "results.nc").exists()
    assert status(out)["done"] == written
    before = {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.nc")}
    refused = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(out)])
    assert refused.exit_code == 1 and "pass --resume" in refused.output  # nothing lost
    resumed = CliRunner().invoke(main, ["--threads", "1", "sweep", str(spec), "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        xr.testing.assert_identical(reference, ds.load())
    assert status(out) == {"done": 4, "total": 4, "results": True, "missing": []}
    # the finished points were kept, not run again
    assert {name: (out / "points" / name).stat().st_mtime_ns for name in before} == before


@pytest.mark.slow
def test_expected_trends_agreement_with_slm_bits_residual_with_noise(tmp_path: Path) -> None:
    spec = {**SMALL, "data": {"samples": 90}, "axes": {"noise.multiplier": [1, 64], "slm.bits": [2, 9]},
            "metrics": ["agreement", "residual", "fixed_point_error"]}
    ds = sweep(parse_spec(spec), tmp_path / "trend", workers=2)
    runs = ds.sizes["chip"] * ds.sizes["seed"]
    agree = ds.agreement.sel(model="digits-deq48").mean(("chip", "seed"))
    band = 2 * ds.agreement.std(("chip", "seed")).max() + 1 / (90 * runs)  # one image of slack
    assert bool((agree.sel({"slm.bits": 9}) >= agree.sel({"slm.bits": 2}) - band).all())
    assert float(agree.sel({"slm.bits": 9}).min()) > float(agree.sel({"slm.bits": 2}).min())
    residual = ds.residual.mean(("chip", "seed"))
    assert bool((residual.sel({"noise.multiplier": 64}) > 10 * residual.sel({"noise.multiplier": 1})).all())
    error = ds.fixed_point_error.mean(("chip", "seed"))
    assert bool((error.sel({"slm.bits": 9}) < error.sel({"slm.bits": 2})).all())


def test_the_results_carry_units_provenance_and_draw(reference: xr.Dataset, tmp_path: Path) -> None:
    assert reference.energy_per_inference_j.attrs["units"] == "J"
    assert float(reference.energy_per_inference_j.min()) > 0
    assert reference.attrs["device"] == "aoc48" and "digits-deq48" in reference.attrs["model_sha256"]
    assert parse_spec(yaml.safe_load(yaml.safe_dump(SMALL))).text() == reference.attrs["spec"]
    assert plot_sweep(reference, tmp_path / "grid.png").stat().st_size > 0
    assert plot_pareto(reference, tmp_path / "front.png").stat().st_size > 0
    out = CliRunner().invoke(main, ["plot", str(tmp_path / "none.nc")])
    assert out.exit_code == 2  # click: no such file


def test_pareto_front_is_what_nothing_beats() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        cost, acc = rng.integers(0, 6, 12).astype(float), rng.integers(0, 6, 12).astype(float)
        front = set(pareto_front(cost, acc).tolist())
        for i in range(12):
            beaten = any((cost[j] <= cost[i] and acc[j] >= acc[i]) and (cost[j] < cost[i] or acc[j] > acc[i])
                         for j in range(12))
            if beaten:
                assert i not in front
        # exactly one point per distinct non-dominated (cost, accuracy) pair
        kept = {(cost[i], acc[i]) for i in front}
        assert len(kept) == len(front)
        for i in range(12):
            if not any((cost[j] <= cost[i] and acc[j] >= acc[i]) and (cost[j] < cost[i] or acc[j] > acc[i])
                       for j in range(12)):
                assert (cost[i], acc[i]) in kept


def test_zip_and_latin_hypercube_axes() -> None:
    spec = parse_spec({**SMALL, "axes": {}, "zip": {"noise.multiplier": [1, 2, 4], "readout.adc_bits": [12, 10, 8]},
                       "random": {"points": 8, "seed": 1, "ranges": {"noise.rin.rin_db_per_hz":
                                                                      {"low": -150, "high": -130}}}})
    assert spec.shape == (1, 3, 8) and len(spec.points()) == 24
    drawn = np.asarray(spec.axes[1].values["noise.rin.rin_db_per_hz"])
    # Latin hypercube: one draw in each eighth of the range
    assert sorted(np.floor((drawn + 150) / 20 * 8).astype(int).tolist()) == list(range(8))
    keys = {p.key for p in spec.points()}
    assert len(keys) == 24
    assert noise_seed(0, "a", 0) != noise_seed(1, "a", 0) != noise_seed(0, "b", 0)


@pytest.mark.parametrize("change, message", [
    ({"axes": {"slm.bitz": [4]}}, "unknown parameter 'slm.bitz' (did you mean 'slm.bits'?)"),
    ({"axes": {"placement.tile": [4]}}, "unknown parameter 'placement.tile'"),
    ({"axes": {"slm.bits": [0, 9]}}, "slm.bits = 0"),
    ({"axes": {"noise.power_per_unit_w": [-1.0]}}, "noise.power_per_unit_w = -1.0"),
    ({"axes": {"slm.bits": []}}, "axes.slm.bits = []; expected a non-empty list"),
    ({"axes": {"placement.partial_sums": ["both"]}}, "placement.partial_sums = 'both'"),
    ({"axes": {"placement.averaging": [0, 4]}}, "placement.averaging = 0; expected an integer >= 1"),
    ({"axes": {"placement.on_tiles": ["in_proj,head"]}}, "placement.on_tiles = 'in_proj,head': unknown map 'head'; "
                                                         "expected"),
    ({"axes": {"placement.colour": ["red"]}}, "unknown parameter 'placement.colour'"),
    ({"axes": {"placement.predistort": ["yes"]}}, "placement.predistort = 'yes'; expected"),
    ({"zip": {"slm.bits": [4, 5], "readout.adc_bits": [8]}}, "zip: lists of lengths [1, 2]"),
    ({"random": {"points": 4, "ranges": {"noise.multiplier": {"low": 2, "high": 1}}}},
     "random.ranges.noise.multiplier"),
    ({"seeds": 0}, "seeds = 0; expected a count >= 1"),
    ({"metrics": ["speed"]}, "metrics: unknown metric 'speed'"),
    ({"modle": "x"}, "unknown key 'modle'"),
    ({"data": {"images": 3}}, "data.images is not a data setting"),
    ({"device": "aoc99"}, "device = 'aoc99'"),
    ({"axes": {"variation.chip_seed": [0, 1]}}, "variation.chip_seed is swept; expected the chips under chips:"),
    ({"axes": {"slm.bits": [4, 4.0]}}, "slm.bits = [4, 4.0]; expected distinct values"),
    ({"axes": {"readout.adc_bits": [8, None]}}, "(no null"),
    ({"zip": {}}, "zip = {}; expected a non-empty mapping"),
])
def test_bad_specs_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_spec({**SMALL, **change})
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_cli_errors_lose_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [digits-deq48\n")
    out = CliRunner().invoke(main, ["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert out.exit_code == 1 and "not valid YAML at line" in out.output
    spec = _write(tmp_path, SMALL)
    out = CliRunner().invoke(main, ["sweep", str(spec), "--out", "/proc/aocsim-sweep"])
    assert out.exit_code == 1 and "cannot write in /proc" in out.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for flags in ([], ["--overwrite"], ["--resume"]):
        out = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(mine), *flags])
        assert out.exit_code == 1 and "not a sweep's" in out.output
    assert (mine / "notes.txt").read_text() == "keep me"
    start = time.monotonic()
    out = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "d"), "--scheduler",
                                    "tcp://127.0.0.1:9"])
    assert out.exit_code == 1 and "cannot reach it" in out.output and time.monotonic() - start < 30
    assert not (tmp_path / "d").exists()
    other = _write(tmp_path, {**SMALL, "seeds": 1}, "other.yaml")
    done = tmp_path / "done"
    SweepStore(done).prepare(load_spec(spec), "device and model checksums then", resume=False, overwrite=False)
    out = CliRunner().invoke(main, ["sweep", str(other), "--out", str(done), "--resume"])
    assert out.exit_code == 1 and "a different spec" in out.output
    out = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(done), "--resume"])
    assert out.exit_code == 1 and "the device profile or a model changed" in out.output
    # a folder of the user's that merely looks like one (results.nc, points/) is not a sweep's
    look = tmp_path / "look"
    (look / "points").mkdir(parents=True)
    (look / "results.nc").write_text("mine")
    (look / "points" / "0123456789abcdef.nc").write_text("mine too")
    for flags in ([], ["--overwrite"], ["--resume"]):
        out = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(look), *flags])
        assert out.exit_code == 1 and "not a sweep's" in out.output
    assert (look / "results.nc").read_text() == "mine"
    assert (look / "points" / "0123456789abcdef.nc").read_text() == "mine too"
    out = CliRunner().invoke(main, ["sweep", "status", str(tmp_path / "mine")])
    assert out.exit_code == 1 and "holds no sweep" in out.output


def test_settings_a_model_cannot_take_are_refused_before_any_work(tmp_path: Path) -> None:
    native = "runs as a native DEQ on aoc48; expected it only for tiled DEQs, hybrid SSMs and hybrid Mamba2s"
    for change, message in (({"axes": {"placement.tile_size": [16, 48]}}, native),
                            ({"data": {"samples": 5000}}, "samples = 5000"),
                            ({"axes": {"placement.averaging": [1, 4]}}, native),
                            ({"axes": {"placement.mode": ["sequential"]}}, "expected it only for hybrid SSMs"),
                            ({"metrics": ["bits_per_character"]}, "but model 'digits-deq48' has task 'digits'"),
                            ({"metrics": ["mse"]}, "but model 'digits-deq48' has task 'digits'; expected regressions"),
                            ({"model": "regression-twin48"}, "metrics has 'accuracy', but model 'regression-twin48' "
                                                             "has task 'regression'")):
        with pytest.raises(InputError, match=re.escape(message)):
            sweep(parse_spec({**SMALL, **change}), tmp_path / "never")
        assert not (tmp_path / "never").exists()


def test_specs_read_floats_as_profiles_do(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("model: digits-deq48\ndevice: aoc48\naxes:\n  noise.power_per_unit_w: [1e-5, 3e-4]\n")
    assert load_spec(path).axes[0].values["noise.power_per_unit_w"] == (1e-5, 3e-4)


def test_a_setting_axis_draws_as_named_positions(tmp_path: Path) -> None:
    ds = xr.Dataset({"accuracy": (("model", "placement.partial_sums", "chip", "seed"), np.ones((1, 2, 1, 2)))},
                    coords={"model": ["m"], "placement.partial_sums": ["analog", "digital"], "chip": [0],
                            "seed": [0, 1]})
    assert plot_sweep(ds, tmp_path / "cat.png").stat().st_size > 0


def test_a_resume_after_the_device_profile_was_edited_is_refused(tmp_path: Path) -> None:
    """The sweep's spec.json holds the profile's checksum: a resume on an edited profile file would mix
    points of two machines in one Dataset, so it is refused; on the unchanged file it resumes."""
    from aocsim.paths import devices_dir

    device = tmp_path / "my48.yaml"
    device.write_text((devices_dir() / "aoc48.yaml").read_text())
    spec = parse_spec({**SMALL, "device": str(device), "data": {"samples": 4}, "axes": {"slm.bits": [9]}})
    out = tmp_path / "run"
    first = sweep(spec, out)
    assert xr.testing.assert_identical(sweep(spec, out, resume=True), first) is None  # unchanged: resumes
    device.write_text(device.read_text().replace("injection.dac_bits: 12", "injection.dac_bits: 11"))
    with pytest.raises(InputError, match="the device profile or a model changed since the sweep started") as err:
        sweep(parse_spec({**SMALL, "device": str(device), "data": {"samples": 4}, "axes": {"slm.bits": [9]}}), out,
              resume=True)
    assert "\n" not in str(err.value)


def test_a_resume_with_changed_placement_is_refused_and_keeps_the_files(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards against a resume accepted after only the spec's placement.* entries changed (issue 41, finding
    9c): its points would be run again beside the stale point files and spec.json rewritten without a word.
    The resume is refused in one line before any point runs; spec.json and the point files stay as they were."""
    from aocsim.experiments.sweep import run as sweep_run

    first = {**SMALL, "data": {"samples": 4}, "seeds": 1, "axes": {"slm.bits": [9], "placement.max_iter": [20]}}
    out = tmp_path / "run"
    sweep(parse_spec(first), out, workers=1)

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in [out / "spec.json", *(out / "points").iterdir()]}

    before = files()
    assert len(before) == 2  # spec.json and the one point
    monkeypatch.setattr(sweep_run, "run_point", lambda *args, **kwargs: pytest.fail("a point ran"))
    changed = {**first, "axes": {"slm.bits": [9], "placement.max_iter": [30]}}
    with pytest.raises(InputError, match="holds a sweep of a different spec") as err:
        sweep(parse_spec(changed), out, workers=1, resume=True)
    assert "\n" not in str(err.value)
    assert files() == before


def test_language_models_sweep_their_bits_per_character(tmp_path: Path) -> None:
    # the abstract noise model (no map on tiles): at inf dB the device path is the exact one; noise
    # on the states costs bits; the metric is each path's mean of the compare Dataset's nll_bits
    spec = {"model": "charlm-explicit1", "device": "aoc48", "data": {"sequences": 2, "length_factor": 1},
            "axes": {"placement.on_tiles": ["none"], "placement.mode": ["sequential"],
                     "placement.snr_site": ["states"], "placement.snr_db": [0.0, float("inf")]},
            "seeds": 1, "chips": 1, "metrics": ["bits_per_character", "exact_bits_per_character"]}
    ds = sweep(parse_spec(spec), tmp_path / "bits", workers=1).squeeze()
    device, exact = ds.bits_per_character, ds.exact_bits_per_character
    assert float(device.sel(**{"placement.snr_db": float("inf")})) == float(exact.sel(**{"placement.snr_db": float("inf")}))
    assert float(device.sel(**{"placement.snr_db": 0.0})) > float(exact.sel(**{"placement.snr_db": 0.0})) + 0.1
    assert 1.0 < float(exact[0]) < 4.0
    from aocsim.experiments.language import plot_bits_against_snr

    assert plot_bits_against_snr(ds, tmp_path / "bits.png").stat().st_size > 10_000
    with pytest.raises(InputError, match="the results have no 'bits_per_character'"):
        plot_bits_against_snr(ds.drop_vars("bits_per_character"), tmp_path / "no.png")
    with pytest.raises(InputError, match="the SNR is the x axis"):
        plot_bits_against_snr(ds, tmp_path / "no.png", lines=("model", "placement.snr_db"))


def test_the_reference_grid_heat_maps_average_seeds_and_refuse_a_hidden_axis(tmp_path: Path) -> None:
    """plot_snr_heat_maps / snr_grid (docs/LANGUAGE.md, "The reference grid"): a cell is the mean over chips
    and seeds of its point; a swept dimension that is neither an axis nor a panel is refused, not averaged."""
    import numpy as np
    import xarray as xr

    from aocsim.experiments.language import plot_snr_heat_maps, snr_grid

    dims = ("placement.snr_kind", "placement.ema_alpha", "placement.snr_states_db", "placement.snr_db", "seed")
    shape = (2, 2, 4, 4, 3)
    acc = np.random.default_rng(0).uniform(0.2, 0.9, shape)
    ds = xr.Dataset({"accuracy": (dims, acc)}, coords={
        dims[0]: ["additive", "multiplicative"], dims[1]: [0.2, 0.1], dims[2]: [0.0, 20.0, 30.0, 40.0],
        dims[3]: [0.0, 10.0, 20.0, 30.0], "seed": [0, 1, 2]})
    grid = snr_grid(ds)
    cell = grid.sel({dims[0]: "multiplicative", dims[1]: 0.1, dims[2]: 20.0, dims[3]: 30.0})
    assert float(cell) == pytest.approx(acc[1, 1, 1, 3].mean(), rel=1e-12)
    path = plot_snr_heat_maps(ds, tmp_path / "heat.png", mark=(21.7, 24.1, "aoc48"))
    assert path.stat().st_size > 20_000
    wider = xr.concat([ds, ds], dim=xr.DataArray(["a", "b"], dims="model", name="model"))
    with pytest.raises(InputError, match="model has 2 values; expected it among panels"):
        snr_grid(wider)
    assert snr_grid(wider.isel({dims[1]: [0]}), panels=("model", "placement.snr_kind")).sizes["model"] == 2
    with pytest.raises(InputError, match="the results have no 'placement.snr_states_db'"):
        snr_grid(ds.drop_vars("placement.snr_states_db").rename({"placement.snr_states_db": "x"}))


@pytest.mark.slow
def test_regressions_sweep_their_errors(tmp_path: Path) -> None:
    """The probes' refit against none, on the noise-free chip draws and on aoc48: the regression metrics
    are the compare Dataset's means (mse per path, rms of device - exact)."""
    spec = {"model": "regression-twin48", "device": "aoc48", "data": {"samples": 40},
            "axes": {"placement.probes": [0, 32], "placement.stop": ["readout"]}, "seeds": 1, "chips": 1,
            "metrics": ["mse", "exact_mse", "output_rms", "iterations"]}
    ds = sweep(parse_spec(spec), tmp_path / "reg", workers=1).squeeze()
    raw, probed = (ds.sel(**{"placement.probes": p}) for p in (0, 32))
    assert float(raw.exact_mse) == float(probed.exact_mse) and float(probed.output_rms) < float(raw.output_rms)
    assert float(probed.mse) < float(raw.mse)


def test_a_resumed_sweep_reads_its_chips_fits_from_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sequence model's tile programs are fitted once for the points that share a chip (fits/ in the
    sweep's folder) and read back by a resumed sweep whose process has not fitted them."""
    from aocsim.execute import map_fit

    monkeypatch.setattr(map_fit, "FITS", map_fit.FITS.fresh())
    spec = parse_spec({"model": "parity-implicit", "device": "aoc48", "data": {"sequences": 2, "length_factor": 1},
                       "axes": {"placement.averaging": [1, 2]}, "seeds": 1, "chips": 1, "metrics": ["agreement"]})
    out = tmp_path / "sweep"
    first = sweep(spec, out, workers=1)
    assert len(list((out / "fits").glob("fits-*.h5"))) == 1  # averaging: nothing a fit reads
    next(iter((out / "points").glob("*.nc"))).unlink()
    map_fit.FITS.clear()
    monkeypatch.setattr(map_fit, "_fit_maps", lambda *a, **k: pytest.fail("fitted again"))
    xr.testing.assert_identical(first, sweep(spec, out, workers=1, resume=True))


@pytest.mark.slow
def test_a_sweep_on_tiles_that_do_not_calibrate_ends_with_a_warning_and_untrusted_points(tmp_path: Path) -> None:
    """Parity on aoc16, whose tile programs do not calibrate (compare prints WARNING lines): the sweep keeps
    compare's verdict per point (trusted = 0 and its notes in results.nc, NO in the table) and ends with a
    WARNING naming the points and their cause."""
    spec = {"model": "parity-implicit", "device": "aoc16", "data": {"sequences": 1, "length_factor": 1},
            "axes": {"placement.max_iter": [2]}, "metrics": ["accuracy", "agreement"]}
    out = CliRunner().invoke(main, ["--threads", "1", "sweep", str(_write(tmp_path, spec)), "--out",
                                    str(tmp_path / "run"), "--workers", "1"])
    assert out.exit_code == 0, out.output
    assert "WARNING 1 of 1 points cannot be trusted" in out.output
    assert "placement.max_iter=2: the tile programs did not calibrate on aoc16" in out.output
    assert out.output.splitlines()[[i for i, line in enumerate(out.output.splitlines())
                                    if "trusted" in line.split()][0] + 1].split()[-1] == "NO"
    with xr.open_dataset(tmp_path / "run" / "results.nc", engine="h5netcdf") as ds:
        assert int(ds.trusted.squeeze()) == 0 and "did not calibrate" in str(ds.warnings.squeeze().values)
    status = CliRunner().invoke(main, ["sweep", "status", str(tmp_path / "run")])
    assert status.exit_code == 0 and "WARNING 1 of 1 points cannot be trusted" in status.output


def test_a_trusted_sweep_says_so_per_point(reference: xr.Dataset) -> None:
    assert (reference.trusted.values == 1).all() and (reference.warnings.values == "").all()
    assert reference.trusted.dims == ("model", "slm.bits", "readout.adc_bits")


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parents[2] / "notebooks" / "sweeps").glob("*.yaml")))
def test_every_bundled_spec_reads(name: str) -> None:
    """Each spec the docs run (`notebooks/sweeps/`) is a valid spec: its model, device, axes or search block, and
    (for a search) a start inside its space."""
    spec = load_spec(Path(__file__).parents[2] / "notebooks" / "sweeps" / name)
    assert spec.models and (spec.search is not None or spec.axes)
    if spec.search is not None:
        space = {p.path: p for p in spec.search.space}
        for start in spec.search.start:
            assert set(start) <= set(space), (name, set(start) - set(space))
