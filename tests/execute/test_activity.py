"""What the machine did, recorded by the code that does the work (docs/ARCHITECTURE.md): each placed
kind's `Run.activity`, checked against counts worked out here from the device's figures and the
placement's tile grids (one round trip per loop iteration or tile pass; every tile row gets the whole
input through its DACs; one ADC conversion per output, per tile column with digital partial sums;
K samples per channel in the readout window)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aocsim import DEQ, DEQConfig, load_model
from aocsim.execute import Placement, place
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.profiles.profile import load_device

AOC48 = load_device("aoc48")
RT = float(AOC48["loop.round_trip_s"])
# a tile pass at the converters' pace (one ADC per channel, a conversion each 8 round trips) and a
# product's DAC, ADC and digital latency (docs/PHYSICS.md section 6)
PASS = 8 * RT
LATENCY = (AOC48["injection.dac_interval_iterations"] + AOC48["readout.sample_interval_iterations"]) * RT + AOC48[
    "readout.digital_latency_s"]


@pytest.fixture(scope="module")
def digits():
    return default_workload(load_model("digits-deq48"), samples=6)


@pytest.mark.parametrize("stop", ["readout", "tolerance"])
def test_a_native_inference_converts_what_its_stop_reads(stop: str, digits) -> None:
    placed = place(load_model("digits-deq48"), AOC48, Placement(stop=stop), calibration=digits.calibration)
    run = placed.run(digits.inputs, 3)
    act, its = run.activity, run.solve.iterations.numpy()
    n = 48
    assert act.channels == n and np.all(act.dac_conversions == n)  # the input, once
    if stop == "readout":  # the whole window, then K samples per channel through the ADC, averaged
        k = AOC48["readout.samples"]
        window = AOC48["readout.settle_iterations"] + (k - 1) * AOC48["readout.sample_interval_iterations"] + 1
        assert np.all(act.adc_conversions == n * k) and np.all(act.digital_ops == n * k)
        np.testing.assert_allclose(act.round_trips, window)
        np.testing.assert_allclose(act.time_s, window * RT)
    else:  # the ADC samples every m round trips; the stop comes at the first sample after the tolerance
        m = AOC48["readout.sample_interval_iterations"]
        samples = np.maximum(np.ceil(its / m), 1)
        assert np.all(act.adc_conversions == n * samples) and np.all(act.digital_ops == n * samples)
        np.testing.assert_allclose(act.round_trips, samples * m)
        np.testing.assert_allclose(act.time_s, samples * m * RT)
        assert (act.round_trips >= its).all() and (act.round_trips < its + m).all()


RELOAD = float(AOC48["slm.reload_time_s"])


@pytest.mark.parametrize(("averaging", "modules"), [(1, None), (3, None), (1, 1), (3, 2)])
def test_a_tiled_deq_counts_every_tile_pass_of_every_iteration(averaging: int, modules: int | None) -> None:
    """Weight-stationary (one module per tile): all tiles of a product at once, `averaging` round trips;
    time-multiplexed on fewer modules: every tile written again each product (a weight load each; a
    wave's tiles written at once, one reload time), then waves of `modules` tiles."""
    model = DEQ(DEQConfig(96, 64, 10, split=48), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        model.weight.mul_(0.45 / torch.linalg.matrix_norm(model.operator(), ord=2))
    x = torch.rand(70, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    placed = place(model, AOC48, Placement(averaging=averaging, max_iter=6, rtol=0.0, modules=modules), calibration=x)
    run = placed.run(x[:4], 1)
    its = run.solve.iterations.double().numpy() + 1  # k iterations evaluate the map k + 1 times
    m, width = placed.program.weight.shape  # 96 outputs; the program's columns (a dead input skipped)
    rows, cols = math.ceil(m / 48), math.ceil(width / 48)
    tiles = rows * cols
    a = run.activity
    held = modules is None or modules >= tiles
    assert a.modules == (tiles if modules is None else min(modules, tiles))
    waves = 1 if held else math.ceil(tiles / modules)
    loads = 0 if held else tiles
    np.testing.assert_allclose(a.round_trips, its * tiles * averaging)
    # rtol 0: every sample makes all max_iter + 1 evaluations, so the 4 samples share each product's loads
    share = 1 / 4
    np.testing.assert_allclose(a.weight_loads, its * loads * share)
    # a wave's tiles are written at once (each module its own drivers): one reload time per wave, shared
    np.testing.assert_allclose(a.time_s, its * (waves * averaging * PASS + (0 if held else waves) * RELOAD * share
                                                + LATENCY))
    # each tile's module lit for its passes alone
    np.testing.assert_allclose(a.busy_s, its * tiles * averaging * PASS)
    np.testing.assert_allclose(a.dac_conversions, its * rows * width * averaging)
    np.testing.assert_allclose(a.adc_conversions, its * m * averaging)
    np.testing.assert_allclose(a.digital_ops, its * m * averaging if averaging > 1 else 0)


@pytest.mark.parametrize("averaging", [1, 2])
def test_an_ssm_counts_its_injection_once_and_its_projections_every_iteration(averaging: int) -> None:
    model = load_model("parity-implicit")
    w = default_workload(model, sequences=3, length_factor=1)
    placed = place(model, AOC48, Placement(averaging=averaging, partial_sums="digital"), calibration=w.calibration)
    run = placed.run(w.inputs, 5)
    its = run.solve.iterations.double().numpy() + 1  # k iterations evaluate the map k + 1 times

    def per_product(name: str) -> tuple[float, float, float, float]:
        m, width = placed.programs[name].weight.shape
        rows, cols = math.ceil(m / 48), math.ceil(width / 48)
        # passes, DAC, ADC, round trips of the product's time (its tiles at once, one module each)
        return rows * cols * averaging, rows * width * averaging, cols * m * averaging, averaging

    names = ("inject", "blocks.0.in_proj", "blocks.0.out_proj")
    once = np.array(per_product("inject"))
    each = np.array(per_product("blocks.0.in_proj")) + np.array(per_product("blocks.0.out_proj"))
    expected = once[:, None, None] + each[:, None, None] * its[None]
    a = run.activity
    np.testing.assert_allclose(a.round_trips, expected[0])
    np.testing.assert_allclose(a.time_s, expected[3] * PASS + (1 + 2 * its) * LATENCY)
    np.testing.assert_allclose(a.dac_conversions, expected[1])
    np.testing.assert_allclose(a.adc_conversions, expected[2])
    # digital partial sums: every reading added into its output; averaged passes: every pass's too
    np.testing.assert_allclose(a.digital_ops, expected[2] * (2 if averaging > 1 else 1))
    # every map on its own modules, one per tile: the machine powers all of them
    assert a.modules == sum(math.prod(placed.programs[n].weight.shape[i] // 48 + bool(placed.programs[n].weight.shape[i] % 48)
                                      for i in (0, 1)) for n in names)


def test_devices_show_and_compare_price_the_same_inference_alike(digits) -> None:
    """The readout stop's window is the same whatever the iterations: `aocsim devices show` and a compare
    Dataset give the same time and energy per inference, and name the stop rule."""
    from click.testing import CliRunner

    from aocsim import compare
    from aocsim.cli import main

    ds = compare("digits-deq48", "aoc48", digits.inputs[:3], placement={"stop": "readout"},
                 calibration=digits.calibration)
    time_s, energy = float(ds.hardware_time_s.sel(path="device").max()), float(ds.energy_j.max())
    assert ds.hardware_time_s.attrs["description"].startswith("readout stop")
    shown = CliRunner().invoke(main, ["devices", "show", "aoc48"]).output
    line = next(row for row in shown.splitlines() if "readout stop" in row)
    assert f"{time_s * 1e6:.3g} us" in line and f"{energy * 1e6:.3g} uJ" in line, (line, time_s, energy)


def test_every_evaluation_of_the_map_is_charged() -> None:
    """A solve of k iterations evaluates the map k + 1 times (the last evaluation shows the residual that stops
    it), and each is a product on the machine: the products charged are the map calls counted here.
    Fault guarded (seen failing with main's k: 8 products charged for 12 calls over 4 tokens)."""
    from aocsim.execute.device_linear import DeviceLinear

    model = load_model("parity-implicit")
    w = default_workload(model, sequences=2, length_factor=1)
    placed = place(model, AOC48, Placement(on_tiles=("in_proj",)), calibration=w.calibration)
    calls: list[int] = []
    original = DeviceLinear.__call__

    def counted(self, x, *args, **kwargs):
        calls.append(1)
        return original(self, x, *args, **kwargs)

    tiles = math.ceil(placed.programs["blocks.0.in_proj"].weight.shape[0] / 48)
    try:
        DeviceLinear.__call__ = counted
        run = placed.run(w.inputs[:1, :4], 3)  # one sequence, token by token: one call per evaluation
    finally:
        DeviceLinear.__call__ = original
    products = run.activity.round_trips / tiles  # one pass of every tile of in_proj per product
    assert float(products.sum()) == len(calls)
    assert np.all(products == run.solve.iterations.double().numpy() + 1)


def test_the_sequences_run_together_share_each_products_weight_loads() -> None:
    """A time-multiplexed product writes its tiles once for the rows run together in it: each row pays its
    share, and a batch pays each product's loads once (docs/PHYSICS.md section 6). Fault guarded (seen
    failing with every row charged the whole load: the batch's loads wrong on all 16 tokens)."""
    from aocsim.hardware.physics.energy import load_shares

    evals = np.array([[1, 3], [2, 3], [2, 1]])
    shares = load_shares(evals)
    np.testing.assert_allclose(shares.sum(0), evals.max(0))  # each product's loads paid once by the batch
    # token 0: its first product taken by all three (1/3 each), its second by the two still iterating
    np.testing.assert_allclose(shares[:, 0], [1 / 3, 1 / 3 + 1 / 2, 1 / 3 + 1 / 2])
    np.testing.assert_allclose(load_shares(evals[:1]), evals[:1])  # alone, a sequence pays its loads whole

    model = load_model("parity-implicit")
    w = default_workload(model, sequences=4, length_factor=1)
    placed = place(model, AOC48, Placement(modules=2), calibration=w.calibration)
    run = placed.run(w.inputs, 5)
    tiles = {name: math.prod(math.ceil(d / 48) for d in p.weight.shape) for name, p in placed.programs.items()}
    evaluations = run.solve.iterations.double().numpy() + 1
    per_token = run.activity.weight_loads.sum(0)  # the batch's loads per token
    expected = tiles["inject"] + (tiles["blocks.0.in_proj"] + tiles["blocks.0.out_proj"]) * evaluations.max(0)
    np.testing.assert_allclose(per_token, expected)
