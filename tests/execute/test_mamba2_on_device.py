"""The plain Mamba2 language model on the device (the hybrid Mamba2 placement, aocsim/execute/mamba2.py):
its in and out projections on calibrated tiles through the hybrid's machinery (aocsim/execute/ssm_device.py),
one pass per token, noise keyed per token; `compare` runs it like the other sequence models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aocsim import InputError, compare, load_model
from aocsim.execute import place
from aocsim.execute.option_groups import MAMBA2
from aocsim.execute.registry import placement_class
from aocsim.experiments.results import summarize
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.physics.sources import without_noise
from aocsim.hardware.profiles.profile import load_device


@pytest.fixture(scope="module")
def lm():
    model = load_model("charlm-mamba2")
    w = default_workload(model, sequences=2, length_factor=1)  # two held-out windows of 128 characters
    return model, w.inputs[:, :48], w.targets[:, :48], w.calibration


def test_the_plain_mamba2_model_is_placed_as_its_own_kind(lm) -> None:
    model, x, _, calibration = lm
    assert placement_class(model, load_device("aoc48")).kind == MAMBA2
    placed = place(model, "aoc48", calibration=calibration)
    assert set(placed.programs) == {"blocks.0.in_proj", "blocks.0.out_proj"}  # no injection; in_proj reads Emb(x)
    run = placed.run(x, 0)
    assert run.outputs.shape == (*x.shape, model.config.vocab_size) and run.z.shape == (*x.shape, model.config.d_model)
    assert (run.solve.iterations == 1).all() and (run.solve.status == 0).all()  # one pass, converged (status 0)
    assert (run.solve.rel_residual == 0).all()


def test_without_noise_the_device_path_is_the_exact_path(lm) -> None:
    """The ideal device computes every tile product exactly: the device run is the exact run; aoc48 with its
    noise off keeps its static errors (calibrated away in part) and agrees on nearly every character."""
    model, x, y, calibration = lm
    ideal = compare(model, "ideal", x, y, calibration=calibration)
    assert float(ideal.fixed_point_error.max()) < 1e-4 and float(ideal.agreement.min()) == 1.0
    np.testing.assert_allclose(ideal.nll_bits.sel(path="device"), ideal.nll_bits.sel(path="exact").broadcast_like(
        ideal.nll_bits.sel(path="device")), atol=1e-4)
    quiet = compare(model, without_noise(load_device("aoc48")), x, y, calibration=calibration)
    assert float(quiet.agreement.mean()) >= 0.95


def test_the_noise_is_keyed_by_seed_and_token(lm) -> None:
    model, x, _, calibration = lm
    placed = place(model, "aoc48", chip=1, calibration=calibration)
    first, again, other = placed.run(x, 3), placed.run(x, 3), placed.run(x, 4)
    assert torch.equal(first.outputs, again.outputs)  # the same seed: the same bits
    assert not torch.equal(first.outputs, other.outputs)  # another seed: another load and other noise
    assert torch.equal(place(model, "aoc48", chip=1, calibration=calibration).run(x, 3).outputs, first.outputs)
    alone = placed.run(x[1:], 3, samples=torch.tensor([1]))  # sequence 1 alone, with the id it has in the batch
    assert torch.allclose(alone.outputs[0], first.outputs[1], atol=1e-4)  # its draws do not depend on the batch
    shifted = placed.run(x[1:], 3, samples=torch.tensor([0]))  # another id: other draws
    assert not torch.allclose(shifted.outputs[0], first.outputs[1], atol=1e-4)


def test_compare_on_aoc48_gives_bits_near_the_exact_path_and_records_the_kind(lm) -> None:
    model, x, y, calibration = lm
    ds = compare(model, "aoc48", x, y, seeds=(0, 1), chips=(0, 1), calibration=calibration)
    s = summarize(ds)
    assert s["unit"] == "character" and s["explicit"] and "one pass" in s["terms"]
    assert abs(s["bits"]["device"][0] - s["bits"]["exact"]) < 0.15  # the tiles' noise costs a few hundredths
    assert s["bits"]["device"][1] > 0  # chips and seeds differ
    assert float(ds.energy_j.min()) > 0 and s["energy_j"] > 0 and float(ds.agreement.mean()) > 0.8
    # each map once per character: a pass at the converters' pace (8 x 20 ns) and its latency (9 x 20 ns + 100 ns)
    assert np.allclose(ds.hardware_time_s.sel(path="device"), 2 * (8 * 20e-9 + 9 * 20e-9 + 100e-9))
    assert (ds.iterations.sel(path="device") == 1).all() and ds.attrs["trusted"] == 1
    assert ds.attrs["kind"] == MAMBA2 and ds.attrs["implicit"] == 0
    assert ds.attrs["placement"].startswith("hybrid Mamba2: in_proj, out_proj on optical tiles")
    assert ds.attrs["maps_on_tiles"] == "blocks.0.in_proj, blocks.0.out_proj"
    assert ds.attrs["modules"] == 9 * 2 + 4 * 2  # in_proj 395 x 88: 9 x 2 tiles of 48; out_proj 88 x 176: 2 x 4


def test_the_placement_takes_the_tile_options_and_refuses_the_rest(lm) -> None:
    model, x, y, calibration = lm
    ds = compare(model, "aoc48", x[:1, :8], y[:1, :8], placement={"on_tiles": "out_proj", "averaging": 2},
                 calibration=calibration)
    assert ds.attrs["maps_on_tiles"] == "blocks.0.out_proj" and "mean of 2 passes" in ds.attrs["placement"]
    with pytest.raises(InputError, match=r"^on_tiles = 'inject,in_proj' on a plain Mamba2 model: it has no injection"):
        compare(model, "aoc48", x, y, placement={"on_tiles": "inject,in_proj"}, calibration=calibration)
    with pytest.raises(InputError, match=r"^mode = 'sequential' applies to hybrid SSMs; charlm-mamba2 on aoc48 runs as "
                                         "a hybrid Mamba2$"):
        compare(model, "aoc48", x, y, placement={"mode": "sequential"}, calibration=calibration)


def test_generation_on_a_device_refuses_it_in_one_line() -> None:
    """Generation on a device runs an implicit SSM token by token; the plain Mamba2 model is refused before any
    placement (not a traceback from the implicit model's code)."""
    from aocsim.experiments.generate import DeviceNextLogits

    with pytest.raises(InputError, match=r"^charlm-mamba2 is a plain Mamba2 model: generation on a device") as err:
        DeviceNextLogits(load_model("charlm-mamba2"), "aoc48", max_length=8)
    assert "\n" not in str(err.value)
