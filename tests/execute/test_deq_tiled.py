"""A DEQ larger than one machine: beta W on optical tiles, the rest digital (aocsim/execute/tiled.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aocsim import DEQ, DEQConfig, compare
from aocsim.errors import InputError
from aocsim.execute import Placement, place
from aocsim.execute.placement import TILED
from aocsim.execute.tiled import TiledDEQ
from aocsim.hardware.profiles.profile import load_device


@pytest.fixture(scope="module")
def big() -> tuple[DEQ, torch.Tensor]:
    """A 96-variable DEQ (two aoc48 machines wide) with feedback that matters, and inputs for it."""
    gen = torch.Generator().manual_seed(5)
    model = DEQ(DEQConfig(96, 64, 10, split=48), generator=gen)
    with torch.no_grad():
        model.weight.mul_(0.45 / torch.linalg.matrix_norm(model.operator(), ord=2))
    return model, torch.rand(40, 64, generator=gen, dtype=torch.float64)


def _exact(model: DEQ, x: torch.Tensor):
    with torch.no_grad():
        return model(x, atol=1e-13, rtol=0.0, max_iter=500)


def test_on_ideal_tiles_the_device_path_is_the_exact_path(big) -> None:
    model, x = big
    # `ideal` has any number of channels, so a DEQ runs there natively; the tiled class directly:
    s = Placement(tile_size=48, atol=0.0, rtol=1e-13, max_iter=500).resolved(TILED)
    placed = TiledDEQ(model, load_device("ideal"), s, TiledDEQ.prepare(model, x, s))
    assert placed.load(0).tiles.grid == (2, 2)
    run = placed.run(x, seed=1)
    exact = _exact(model, x)
    fpe = (run.z - exact.z).norm(dim=1) / exact.z.norm(dim=1)
    assert float(fpe.max()) <= 1e-9
    assert torch.equal(run.outputs.argmax(1), exact.logits.argmax(1))
    # the activity: every tile once per evaluation of the map (k iterations evaluate it k + 1 times; all four
    # tiles at once, each on its own module: one pass, a round trip on ideal's converters that keep up, and
    # a product's latency: one DAC and one ADC interval, 1 + 8 round trips), the whole input into both tile
    # rows, one ADC conversion per output (analog partial sums)
    its = run.solve.iterations.double().numpy() + 1
    round_trip = float(load_device("ideal").values["loop.round_trip_s"])
    assert (run.activity.round_trips == 4 * its).all()
    np.testing.assert_allclose(run.activity.time_s, its * (1 + 9) * round_trip)
    assert run.activity.modules == 4
    assert (run.activity.dac_conversions == 2 * 96 * its).all() and (run.activity.adc_conversions == 96 * its).all()


def test_on_a_noisy_machine_a_sample_draws_the_same_alone_as_in_its_batch(big) -> None:
    """Noise keyed by sample and iteration: alone or in a batch, sample 4 sees the same draws (the
    results differ only by the matrix products' rounding, which depends on the batch size)."""
    model, x = big
    fixed = Placement(atol=0.0, rtol=0.0, max_iter=25)  # the same iterations either way
    placed = place(model, "aoc48", fixed, calibration=x)
    batch = placed.run(x[:6], 3)
    alone = placed.run(x[4:5], 3, samples=torch.tensor([4]))
    torch.testing.assert_close(alone.z[0], batch.z[4], atol=1e-10, rtol=0)
    other_seed = placed.run(x[:6], 4)
    assert float((other_seed.z - batch.z).abs().max()) > 1e-4  # the noise is real and keyed by the seed
    exact = _exact(model, x[:6])
    fpe = (batch.z - exact.z).norm(dim=1) / exact.z.norm(dim=1)
    assert float(fpe.max()) < 0.05  # calibrated tiles, 25 noisy iterations: a few percent off


def test_compare_runs_a_larger_deq_tiled_and_refuses_it_without_tiling(big) -> None:
    model, x = big
    ds = compare(model, "aoc48-twin", x, seeds=[0], chips=[0], calibration=x)
    assert ds.attrs["placement"].startswith("tiled hybrid")
    assert float(ds.fixed_point_error.max()) < 0.03  # measured: 0.016
    assert float(ds.agreement.mean()) >= 0.9
    with pytest.raises(InputError, match="state_size = 96 does not fit device 'aoc48-twin' with 48 channels and "
                                         "tiling is off") as err:
        compare(model, "aoc48-twin", x, placement=dict(tiling=False))
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="stop = 'readout' applies to native DEQs and twin DEQs; this DEQ on aoc48-twin runs as a "
                                         "tiled DEQ"):
        compare(model, "aoc48-twin", x, placement=dict(stop="readout"))
    placed = place(model, "aoc48-twin", calibration=x)
    for kwargs, message in (({"seed": None}, "seed = None"),
                            ({"seed": 0, "samples": [0, 1]}, r"samples = \[0, 1\]; expected None"),
                            ({"seed": 0, "samples": torch.tensor([-1] * 40)}, "samples = ")):
        with pytest.raises(InputError, match=message):
            placed.run(x, **kwargs)
    with pytest.raises(InputError, match=r"x has shape \(40, 3\); expected \[B, 64\]"):
        placed.run(x[:, :3], seed=0)
    with pytest.raises(InputError, match=r"calibration has shape \(40, 3\); expected a tensor \[B, 64\]"):
        place(model, "aoc48-twin", calibration=x[:, :3])
    with pytest.raises(InputError, match="calibration = None"):
        place(model, "aoc48-twin")
    with pytest.raises(InputError, match="model is a str"):
        place("digits-deq48", "aoc48")


def test_a_tiled_deq_averages_its_passes_and_counts_them(big) -> None:
    """averaging = 4 on aoc48: four times the passes per iteration in the hardware time (the 2 x 3 tiles
    at once, on six modules) and the converter counts, and the fixed point closer to the exact one than with one pass (less noise)."""
    model, x = big
    runs = {k: compare(model, "aoc48", x[:8], seeds=[0], chips=[0], calibration=x, placement=dict(averaging=k, rtol=0.0, max_iter=30)) for k in (1, 4)}
    per_iteration = {k: ds.sel(path="device").hardware_time_s.values / (ds.sel(path="device").iterations.values + 1)
                     for k, ds in runs.items()}  # per evaluation of the map: K passes of 8 round trips and the latency
    rt = float(load_device("aoc48").values["loop.round_trip_s"])
    latency = (1 + 8) * rt + 1e-7  # a DAC and an ADC interval, the digital stage
    assert abs((per_iteration[1] - latency) / (8 * rt) - 1).max() < 1e-9
    assert abs((per_iteration[4] - latency) / (8 * rt) - 4).max() < 1e-9
    assert runs[1].attrs["modules"] == 6  # 2 x 3 tiles on aoc48 (a dead input adds a tile column)
    assert runs[4].attrs["placement.averaging"] == 4 and "mean of 4 passes" in runs[4].attrs["placement"]
    assert float(runs[4].adc_conversions.mean()) == 4 * float(runs[1].adc_conversions.mean())
    assert float(runs[4].fixed_point_error.median()) < float(runs[1].fixed_point_error.median())
