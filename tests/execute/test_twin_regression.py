"""A twin regression on a device (`regression-twin48`): compare's regression results and the per-load
readout calibration on probe inputs (placement option `probes`; docs/TWIN_MODELS.md section 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from aocsim import compare, load_model
from aocsim.errors import InputError
from aocsim.experiments.results import summarize
from aocsim.experiments.workloads import default_workload
from aocsim.io.model_files import bundled_models
from aocsim.nn.twin_deq import nominal_profile

pytestmark = pytest.mark.skipif("regression-twin48" not in bundled_models(), reason="bundled model not built")
EXACT = {"atol": 0.0, "rtol": 1e-10, "max_iter": 5000}  # the device solve to the exact path's tolerance


@pytest.fixture(scope="module")
def twin():
    model = load_model("regression-twin48")
    return model, default_workload(model, samples=200)  # spread over [-1, 1]


def mse(ds, path: str = "device"):
    return ds.squared_error.sel(path=path).mean("sample")


def test_on_its_nominal_pipeline_the_device_is_the_exact_path(twin) -> None:
    """Noise and static draws off: the device's outputs are the exact path's, and compare reports a
    regression (output error and squared error, no agreement of argmaxes)."""
    model, w = twin
    ds = compare(model, nominal_profile(model.config), w.inputs, w.targets, placement=EXACT)
    assert ds.attrs["task"] == "regression" and "agreement" not in ds and "classes" not in ds.attrs
    # 1e-8: the exact path stops at Picard's rtol 1e-10 per iteration (a few 1e-9 in the outputs), the device on
    # differences of ADC samples 8 round trips apart: they stop at different iterates of the same map
    assert float(abs(ds.output_error).max()) < 1e-8
    exact = float(mse(ds, "exact").isel(chip=0, seed=0))
    assert exact == pytest.approx(model.card["metrics"]["test"]["mse"], rel=0.5)  # 200 of the 1,000 test points
    assert float(mse(ds).max()) == pytest.approx(exact, rel=1e-6)
    s = summarize(ds)
    assert s["agreement"] is None and s["mse"]["exact"] == pytest.approx(exact, rel=1e-12)


def test_probes_on_the_nominal_pipeline_give_back_the_trained_readout(twin) -> None:
    """The limit: on a chip equal to the nominal pipeline the refitted readout is V z + c itself."""
    model, w = twin
    plain = compare(model, nominal_profile(model.config), w.inputs, w.targets, placement=EXACT)
    probed = compare(model, nominal_profile(model.config), w.inputs, w.targets, placement={**EXACT, "probes": 32},
                     calibration=w.calibration)
    np.testing.assert_allclose(probed.prediction.values, plain.prediction.values, rtol=0, atol=1e-8)
    assert "refitted per weight load on 32 probe inputs" in probed.attrs["placement"]


@pytest.mark.slow
def test_probes_bring_the_device_error_on_aoc48_within_ten_percent_of_the_exact_error(twin) -> None:
    """A CI-sized version of the acceptance run (3 chips x 3 seeds, all 1,000 points): with the readout
    stop, the readout refitted on 64 probes per load. Without the probes the chips' static errors cost
    several times the exact error, and the same seed gives the same bits."""
    model, w = twin
    runs = {"seeds": (0,), "chips": (0, 1), "calibration": w.calibration}
    raw = compare(model, "aoc48", w.inputs, w.targets, placement={"stop": "readout"}, **runs)
    probed = compare(model, "aoc48", w.inputs, w.targets, placement={"stop": "readout", "probes": 64}, **runs)
    exact = float(mse(probed, "exact").isel(chip=0, seed=0))
    assert float(mse(probed).max()) <= 1.1 * exact
    assert float(mse(raw).mean()) >= 2 * exact
    again = compare(model, "aoc48", w.inputs, w.targets, placement={"stop": "readout", "probes": 64}, **runs)
    assert np.array_equal(again.prediction.values, probed.prediction.values)


def test_bad_probes_and_targets_are_one_line_errors(twin) -> None:
    model, w = twin
    for placement, calibration, message in (
            ({"probes": 10}, w.calibration, r"probes = 10; the readout fit has 25 coefficients per output and the "
                                            r"calibration inputs 1000 rows, so expected 0 or an integer in \[25, 1000\]"),
            ({"probes": 30}, w.calibration[:20], r"expected 0 or an integer in \[25, 20\]"),
            ({"probes": -1}, w.calibration, "probes = -1; expected an integer >= 0")):
        with pytest.raises(InputError, match=message) as err:
            compare(model, "aoc48", w.inputs[:4], placement=placement, calibration=calibration)
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match=r"probes = 30 applies to twin DEQs; digits-deq48 on aoc48 runs as a native"):
        compare("digits-deq48", "aoc48", torch.zeros(2, 64, dtype=torch.float64), placement={"probes": 30})
    for targets in (torch.zeros(4, dtype=torch.int64), torch.zeros(3), torch.full((4,), float("nan"))):
        with pytest.raises(InputError, match="targets") as err:
            compare(model, "aoc48", w.inputs[:4], targets, placement={"stop": "readout"})
        assert "\n" not in str(err.value)


def test_the_compare_command_prints_the_errors_of_a_regression(tmp_path) -> None:
    from aocsim.cli.app import main

    out = tmp_path / "r.nc"
    result = CliRunner().invoke(main, ["--threads", "1", "compare", "regression-twin48", "--chips", "1", "--seeds", "1",
                                       "--stop", "readout", "--probes", "32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "mse                exact 1.07e-05, device" in result.output and "x exact)" in result.output
    assert "agreement" not in result.output and out.exists() and out.with_suffix(".png").exists()


def test_bundled_model_meets_its_card_and_needs_its_loop() -> None:
    from aocsim.experiments.evaluate import evaluate_model

    model = load_model("regression-twin48")
    m = evaluate_model(model)
    assert m["mse"] == pytest.approx(model.card["metrics"]["test"]["mse"], rel=1e-9)
    assert m["mse"] < 2e-5 and m["converged_fraction"] == 1.0
    assert m["mse_zero_weight"] > 0.1 and m["mse_without_feedback"] > 0.1  # the answer crosses the loop


def test_a_regression_whose_device_error_swamps_its_outputs_is_flagged(twin) -> None:
    """The regression's trust check: at 4096x the noise the device's outputs say no more than their mean."""
    from aocsim.hardware.profiles.profile import load_device

    model, w = twin
    noisy = load_device("aoc48", {"noise.multiplier": 4096.0})
    ds = compare(model, noisy, w.inputs[::4], w.targets[::4], placement={"stop": "readout"})  # 50 points
    assert "noise swamps the state" in ds.attrs["warnings"]
    assert ds.attrs["trusted"] == 0 and "say no more than their mean" in ds.attrs["warnings"]
    sound = compare(model, "aoc48", w.inputs[::4], w.targets[::4], placement={"stop": "readout"})
    assert sound.attrs["trusted"] == 1 and sound.attrs["warnings"] == ""
