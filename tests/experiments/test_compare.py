"""compare and the native placement: the digits DEQ on the virtual AOC next to its exact path.

Bounds: the issue's acceptance figures (ideal: identical, fixed-point error <= 1e-9; the compiled
model on the twin >= 99.9 % agreement; noisy aoc48 >= 99.5 % agreement and >= 97 % accuracy on
2 chips x 2 seeds, a CI-sized version of 5 x 5).
"""

from __future__ import annotations

import re

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from aocsim import InputError, SolveStatus, compare, load_device, load_model
from aocsim.errors import UnknownNameError
from aocsim.execute import place
from aocsim.execute.fit import weak_channel
from aocsim.tasks.digits import load_split

MODEL = "digits-deq48"


@pytest.fixture(scope="module")
def digits():
    return load_split()


@pytest.fixture(scope="module")
def noisy(digits) -> xr.Dataset:
    return compare(MODEL, "aoc48", digits.x_test, digits.y_test, seeds=(0, 1), chips=(0, 1))


@pytest.mark.parametrize("fit", [False, True])
def test_on_the_ideal_device_both_paths_agree(fit: bool, digits) -> None:
    ds = compare(MODEL, "ideal", digits.x_test, digits.y_test, placement=dict(fit=fit, atol=1e-13, rtol=0.0))
    assert ds.residual.dtype == "float64" and ds.fixed_point_error.dtype == "float64"
    assert (ds.prediction.sel(path="device") == ds.prediction.sel(path="exact")).all()
    assert bool(ds.agreement.all())
    assert float(ds.fixed_point_error.max()) <= 1e-9
    assert (ds.status.sel(path="device") == SolveStatus.CONVERGED).all()


def test_the_compiled_model_agrees_with_the_exact_path_on_the_twin(digits) -> None:
    fitted = compare(MODEL, "aoc48-twin", digits.x_test, digits.y_test)
    analytic = compare(MODEL, "aoc48-twin", digits.x_test, digits.y_test, placement=dict(fit=False))
    assert float(fitted.agreement.mean()) >= 0.999
    assert (fitted.status.sel(path="device") == SolveStatus.CONVERGED).all()
    # The fit is what lifts the mapping; the fitted fixed points sit closer to the exact ones.
    assert float(fitted.agreement.mean()) >= float(analytic.agreement.mean())
    assert float(fitted.fixed_point_error.mean()) < float(analytic.fixed_point_error.mean())


def test_the_dead_emitter_gets_the_least_informative_state() -> None:
    twin = load_device("aoc48-twin")
    dead = weak_channel(twin, 48)
    assert dead is not None and twin["emitter.fan_in_pos"][dead] == 0.0
    assert weak_channel(load_device("ideal"), 48) is None
    model = load_model(MODEL)
    placed = place(model, twin, calibration=load_split().x_train)
    order = placed.compiled.order
    assert sorted(order.tolist()) == list(range(48)) and int(order[dead]) != dead
    power = (model.operator().detach() ** 2).sum(0)
    assert float(power[int(order[dead])]) < float(power.median())  # a weak state, not a strong one


def test_noisy_aoc48_agrees_and_keeps_its_accuracy(noisy: xr.Dataset) -> None:
    assert {k: v for k, v in noisy.sizes.items() if k != "iteration"} == {"path": 2, "chip": 2, "seed": 2,
                                                                          "sample": 450}
    assert float(noisy.agreement.mean()) >= 0.995
    device_accuracy = noisy.correct.sel(path="device").mean("sample")
    assert float(device_accuracy.min()) >= 0.97
    status = noisy.status.sel(path="device")
    settled = (status == SolveStatus.NOISE_FLOOR) | (status == SolveStatus.CONVERGED)
    assert bool(settled.all())
    time = noisy.hardware_time_s.sel(path="device")
    # the early stop is seen at the ADC's samples, one every 8 round trips (20 ns each)
    samples = np.maximum(np.ceil(noisy.iterations.sel(path="device") / 8), 1)
    assert bool((abs(time - samples * 8 * 20e-9) < 1e-15).all())
    assert bool(noisy.hardware_time_s.sel(path="exact").isnull().all())
    # Seeds and chips draw differently: the noisy fixed points differ between them.
    fpe = noisy.fixed_point_error
    assert not bool((fpe.isel(seed=0) == fpe.isel(seed=1)).all())
    assert not bool((fpe.isel(chip=0) == fpe.isel(chip=1)).all())


@pytest.mark.slow
def test_same_seeds_same_dataset(digits, noisy: xr.Dataset) -> None:
    again = compare(MODEL, "aoc48", digits.x_test, digits.y_test, seeds=(1,), chips=(1,))
    xr.testing.assert_identical(again.sel(seed=[1], chip=[1]).drop_attrs(),
                                noisy.sel(seed=[1], chip=[1]).drop_attrs())
    assert again.attrs["model_sha256"] == noisy.attrs["model_sha256"]
    # two processes, one chip each: the same Dataset
    xr.testing.assert_identical(noisy, compare(MODEL, "aoc48", digits.x_test, digits.y_test, seeds=(0, 1),
                                               chips=(0, 1), workers=2))


def test_the_dataset_round_trips_through_netcdf(noisy: xr.Dataset, tmp_path: Path) -> None:
    path = tmp_path / "results.nc"
    noisy.to_netcdf(path, engine="h5netcdf")
    with xr.open_dataset(path, engine="h5netcdf") as back:
        xr.testing.assert_identical(back.load(), noisy)
    assert "converged" in noisy.status.attrs["status_names"]
    assert noisy.attrs["device"] == "aoc48" and list(noisy.attrs["seeds"]) == [0, 1]


@pytest.mark.slow
def test_readout_stop_reports_the_adc_average(digits) -> None:
    ds = compare(MODEL, "aoc48", digits.x_test[:60], digits.y_test[:60], placement=dict(stop="readout"))
    readout = load_device("aoc48")
    total = readout["readout.settle_iterations"] + (readout["readout.samples"] - 1) * \
        readout["readout.sample_interval_iterations"] + 1
    assert bool((ds.hardware_time_s.sel(path="device") == total * readout["loop.round_trip_s"]).all())
    assert bool((ds.iterations.sel(path="device") < total).all())  # where the residual settled
    assert float(ds.agreement.mean()) >= 0.98 and ds.attrs["placement.stop"] == "readout"


@pytest.mark.parametrize(("change", "message"), [
    ({"inputs": torch.zeros(3, 63, dtype=torch.float64)}, r"inputs has shape \(3, 63\); expected a tensor \[B, 64\]"),
    ({"inputs": torch.full((3, 64), float("nan"), dtype=torch.float64)}, "inputs contains non-finite"),
    ({"inputs": torch.zeros(0, 64, dtype=torch.float64)}, "inputs has shape .*expected at least one sample"),
    ({"targets": torch.tensor([0, 1, 10])}, r"targets has values outside \[0, 10\)"),
    ({"targets": torch.tensor([0, 1])}, r"targets has shape \(2,\); expected an integer tensor \[3\]"),
    ({"seeds": ()}, "seeds = \\(\\); expected a non-empty sequence"),
    ({"chips": (-1,)}, "chips = \\(-1,\\); expected a non-empty sequence of distinct integers >= 0"),
    ({"placement": {"stop": "never"}}, "stop = 'never'; expected one of"),
    ({"placement": {"mode": "simultaneous"}}, "mode = 'simultaneous' applies to hybrid SSMs; digits-deq48 on "
                                              "aoc48-twin runs as a native DEQ"),
    ({"placement": {"averaging": 2}}, "averaging = 2 applies to tiled DEQs, hybrid SSMs and hybrid Mamba2s; "
                                      "digits-deq48 on aoc48-twin runs as a native DEQ"),
    ({"model": torch.nn.Linear(2, 2)}, "model is a Linear; expected a DEQ, a twin DEQ, an implicit SSM or a plain "
                                       "Mamba2 model"),
    ({"model": "parity-implicit"}, "tokens must be an integer tensor"),  # images given to a sequence model
    ({"calibration": torch.zeros(5, 8, dtype=torch.float64)}, r"calibration has shape \(5, 8\); expected a tensor"),
])
def test_bad_arguments_are_one_line_errors(change: dict, message: str, digits) -> None:
    args = {"model": MODEL, "device": "aoc48-twin", "inputs": digits.x_test[:3], "targets": digits.y_test[:3]}
    args.update(change)
    model, device, inputs, targets = (args.pop(k) for k in ("model", "device", "inputs", "targets"))
    with pytest.raises(InputError, match=message) as err:
        compare(model, device, inputs, targets, **args)
    assert "\n" not in str(err.value)


def test_unknown_device_and_a_model_larger_than_the_device(digits) -> None:
    with pytest.raises(UnknownNameError, match="aoc99"):
        compare(MODEL, "aoc99", digits.x_test[:3])
    with pytest.raises(InputError, match="state_size = 48 does not fit device 'aoc16' with 16 channels") as err:
        compare(MODEL, "aoc16", digits.x_test[:3], placement=dict(tiling=False))
    assert "\n" not in str(err.value)


# -- the command line ----------------------------------------------------------------------------

def _cli(*args: str):
    from click.testing import CliRunner

    from aocsim.cli import main

    return CliRunner().invoke(main, ["compare", *args])


@pytest.mark.slow
def test_cli_writes_the_dataset_prints_the_summary_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "results.nc"
    first = _cli("digits-deq48", "--device", "aoc48-twin", "--seeds", "1", "--chips", "1", "--out", str(out))
    assert first.exit_code == 0, first.output
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        agreement = float(ds.agreement.mean())
        assert ds.attrs["device"] == "aoc48-twin" and dict(ds.sizes)["sample"] == 450
    line = next(x for x in first.output.splitlines() if x.strip().startswith("agreement"))
    assert float(line.split()[1]) == pytest.approx(100 * agreement, abs=0.005)
    assert "accuracy exact" in first.output and "noise_floor" in first.output
    assert re.search(r"hardware time +\d+(\.\d+)? [mun]?s per sample", first.output)  # its own SI prefix
    assert "machine            1 optical module, 0 weight loads per sample (mean)" in first.output  # native: one
    before = out.read_bytes()
    again = _cli("digits-deq48", "--device", "aoc48-twin", "--out", str(out))
    assert again.exit_code == 1 and len([x for x in again.output.strip().splitlines() if not x.startswith("note: ")]) == 1
    assert "exists; pass --overwrite" in again.output and out.read_bytes() == before


def test_cli_errors_come_before_any_work_and_are_one_line(tmp_path: Path) -> None:
    for args, message in [
        (("--out", "/proc/aocsim/r.nc"), "--out = '/proc/aocsim/r.nc': cannot write in /proc ("),  # a missing
        # folder is created (tests/io/test_outputs.py); one that cannot be is refused before any work
        (("--device", "cuda", "--out", str(tmp_path / "r.nc")), "did you mean --torch-device cuda?"),
        (("digits-deq48", "digits-deq48", "--out", str(tmp_path / "r.nc")), "given twice"),
        (("nope", "--out", str(tmp_path / "r.nc")), "unknown model"),
        (("--device", "aoc16", "--no-tiling", "--out", str(tmp_path / "r.nc")), "does not fit device 'aoc16'"),
        (("digits-deq48", "--averaging", "4", "--out", str(tmp_path / "r.nc")),
         "--averaging applies to tiled DEQs, hybrid SSMs and hybrid Mamba2s; digits-deq48 runs as a native DEQ"),
        (("digits-deq48", "--predistort", "--out", str(tmp_path / "r.nc")), "--predistort applies to tiled DEQs"),
        # options given to a kind they do not apply to are refused, not ignored (issue 26, finding 5)
        (("digits-deq48", "--mode", "simultaneous", "--out", str(tmp_path / "r.nc")), "--mode applies to hybrid SSMs"),
        (("digits-deq48", "--sequences", "4", "--out", str(tmp_path / "r.nc")), "--sequences and --length-factor"),
        (("parity-implicit", "--stop", "readout", "--out", str(tmp_path / "r.nc")), "--stop applies to native DEQs"),
        (("digits-deq48", "--averaging", "0", "--out", str(tmp_path / "r.nc")), "averaging = 0; expected an integer"),
    ]:
        result = _cli(*args)
        assert result.exit_code == 1 and message in result.output, result.output
        # one line, beside the thread note a busy machine adds (docs/GUIDE.md, threads)
        lines = [line for line in result.output.strip().splitlines() if not line.startswith("note: ")]
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_one_group_per_model(tmp_path: Path) -> None:
    from aocsim.io.model_files import save_model

    model = load_model(MODEL)
    copy = save_model(model, tmp_path / "copy", {**model.card, "name": "digits-copy"})
    out = tmp_path / "two.nc"
    result = _cli(MODEL, str(copy), "--device", "aoc48-twin", "--seeds", "1", "--chips", "1", "--no-fit",
                  "--out", str(out))
    assert result.exit_code == 0, result.output
    groups = [xr.open_dataset(out, engine="h5netcdf", group=name) for name in (MODEL, "digits-copy")]
    assert [g.attrs["model"] for g in groups] == [MODEL, "digits-copy"]
    xr.testing.assert_identical(groups[0].prediction, groups[1].prediction)
    for g in groups:
        g.close()
    # the file's root does not open empty: it names the groups and how to open one (issue 26, finding 4)
    with xr.open_dataset(out, engine="h5netcdf") as root:
        assert root.attrs["groups"] == f"{MODEL}, digits-copy"
        assert root.attrs["open_with"] == f'xr.open_dataset("{out}", group="{MODEL}")'
    for name in (MODEL, "digits-copy"):
        assert f'  xr.open_dataset("{out}", group="{name}")' in result.output.splitlines()
    assert 'xr.open_dataset("compare.nc", group="parity-implicit")' in " ".join(_cli("--help").output.split())
    # all models at once: a DataTree of the file, as the summary says (issue 41, finding 7)
    tree = xr.open_datatree(out, engine="h5netcdf")
    assert set(tree.children) == {MODEL, "digits-copy"} and "agreement" in tree[MODEL].dataset
    assert f'xr.open_datatree("{out}")' in result.output
    tree.close()


def test_the_dataset_follows_cf_conventions(noisy: xr.Dataset) -> None:
    """Issue 41, finding 7: a coordinate on every dimension, units on every numeric variable, the status as
    CF flags (flag_values, flag_meanings) that decode the codes."""
    from aocsim.solve.result import SolveStatus

    assert all(d in noisy.coords for d in noisy.dims)
    for name in noisy.variables:
        if noisy[name].dtype.kind in "iufb":
            assert "units" in noisy[name].attrs, name
    flags = dict(zip(noisy.status.attrs["flag_values"].tolist(), noisy.status.attrs["flag_meanings"].split()))
    assert flags == {s.value: s.name.lower() for s in SolveStatus}
    assert noisy.residual.attrs["units"] == "1" and "model state units" in noisy.residual.attrs["description"]
    assert noisy.residual_trace.attrs["kind"] == "absolute"


@pytest.mark.slow
def test_the_progress_bar_counts_chip_x_seed_runs(digits, capsys: pytest.CaptureFixture) -> None:
    """2 chips x 3 seeds are 6 runs, whatever parts they are shared out in (it counted parts: 2)."""
    from aocsim.experiments.compare import compare_all

    compare_all([dict(model=MODEL, device="aoc48-twin", inputs=digits.x_test[:4], seeds=(0, 1, 2), chips=(0, 1))],
                progress=True)
    err = capsys.readouterr().err
    assert "compare runs (chip x seed)" in err and "6/6" in err and "2/2" not in err


def test_residual_traces_start_at_the_injection_and_end_where_each_sample_stopped(noisy: xr.Dataset, digits) -> None:
    """From z = 0 the exact path's first residual is ||f(0)|| = ||U x + b|| (tanh(0) = 0). The device's early stop
    reads its ADC every m round trips: its residuals stand at the round trips they were read, m, 2m, ... up to
    the sample's iterations, NaN between and after."""
    model = load_model(MODEL)
    first = model.injection(digits.x_test).norm(dim=1).detach().numpy()
    trace = noisy.residual_trace
    assert np.allclose(trace.sel(path="exact", iteration=0).isel(chip=0, seed=0), first, rtol=1e-12)
    exact = trace.sel(path="exact").values
    assert np.array_equal(np.isfinite(exact).sum(-1), noisy.iterations.sel(path="exact").values + 1)
    m = load_device("aoc48").parts.readout.sample_interval_iterations
    device = trace.sel(path="device").values
    its = noisy.iterations.sel(path="device").values
    read = np.zeros(device.shape, dtype=bool)
    index = np.arange(device.shape[-1])
    read[:] = (index % m == 0) & (index > 0)
    assert np.array_equal(np.isfinite(device), read & (index <= its[..., None]))


def test_holding_the_last_residual() -> None:
    from aocsim.execute.hybrid import hold_last

    nan = np.nan
    held = hold_last(np.array([[1.0, nan], [nan, 2.0], [nan, nan]]))
    np.testing.assert_array_equal(held, np.array([[1.0, nan], [1.0, 2.0], [1.0, 2.0]]))


def test_the_figure_draws_runs_that_all_agree(tmp_path: Path) -> None:
    """25 runs with the same accuracy: their float mean can exceed their maximum by a rounding step (the
    25-run digits comparison crashed matplotlib with a negative error bar)."""
    from aocsim.experiments.plots import plot_compare

    correct = np.zeros((2, 5, 5, 450), dtype=bool)
    correct[..., :439] = True  # 439 / 450 = 0.97556 in every run
    ds = xr.Dataset({"correct": (("path", "chip", "seed", "sample"), correct),
                     "agreement": (("chip", "seed", "sample"), correct[1]),
                     "fixed_point_error": (("chip", "seed", "sample"), np.full((5, 5, 450), 1e-3))},
                    coords={"path": ["exact", "device"]})
    runs = ds.correct.sel(path="device").mean("sample").values.ravel()
    assert runs.max() - runs.mean() < 0  # the rounding this guards against
    out = plot_compare({"m": ds}, tmp_path / "f.png")
    assert out.read_bytes()[:4] == b"\x89PNG"
