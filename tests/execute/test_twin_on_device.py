"""A twin-native DEQ on a device (aocsim/execute/twin.py): its own weights programmed, no fit."""

from __future__ import annotations

import pytest
import torch

from aocsim import compare, load_model
from aocsim.errors import InputError
from aocsim.execute import place
from aocsim.experiments.workloads import default_workload
from aocsim.nn.twin_deq import nominal_profile


@pytest.fixture(scope="module")
def twin():
    model = load_model("digits-twin48")
    return model, default_workload(model, samples=120)


def test_on_its_own_nominal_pipeline_the_device_is_the_exact_path(twin) -> None:
    """Noise and static draws off, the same bits: the loop the device runs is the exact path's map."""
    model, w = twin
    ds = compare(model, nominal_profile(model.config), w.inputs, w.targets,
                 placement={"atol": 0.0, "rtol": 1e-10, "max_iter": 5000})
    assert bool(ds.agreement.all()) and float(ds.fixed_point_error.max()) < 1e-8
    assert ds.attrs["kind"] == "twin DEQ" and ds.attrs["placement"].startswith("twin-native")
    # the residual in the loop's volts, as the kind declares it (CF units; issue 41, finding 7)
    assert ds.residual.attrs["units"] == "V" and ds.residual_trace.attrs["units"] == "V"
    assert ds.residual_trace.attrs["kind"] == "absolute" and "device volts" in ds.residual.attrs["description"]


def test_on_noisy_aoc48_it_agrees_and_keeps_its_accuracy(twin) -> None:
    """A CI-sized version of the issue's 5 chips x 5 seeds on all 450 images (>= 99.9 %, >= 97 %)."""
    model, w = twin
    ds = compare(model, "aoc48", w.inputs, w.targets, seeds=(0, 1), chips=(0, 1))
    assert float(ds.agreement.mean()) >= 0.99
    exact = float(ds.correct.sel(path="exact").isel(chip=0, seed=0).mean())
    device = ds.correct.sel(path="device").mean("sample")
    assert float(device.min()) >= exact - 0.02
    assert (ds.hardware_time_s.sel(path="device") > 0).all()


def test_a_profile_of_another_size_or_without_calibration_is_a_one_line_error(twin) -> None:
    model, w = twin
    for device, message in (("aoc16", "device 'aoc16' has 16 channels; the twin DEQ is defined on 'aoc48-twin' "
                                      "with 48"),
                            ("ideal", "device 'ideal' has no calibration")):
        with pytest.raises(InputError, match=message) as err:
            place(model, device)
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="fit = False applies to native DEQs; digits-twin48 on aoc48 runs as a "
                                         "twin DEQ"):
        compare(model, "aoc48", w.inputs[:2], placement={"fit": False})
    with pytest.raises(InputError, match=r"inputs has shape \(2, 3\)"):
        compare(model, "aoc48", torch.zeros(2, 3, dtype=torch.float64))
