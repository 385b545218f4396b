"""An implicit SSM on a virtual AOC as a hybrid (aocsim/execute/hybrid.py, ssm_device.py, device_linear.py,
tile_program.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aocsim import load_model
from aocsim.errors import InputError
from aocsim.execute.device_linear import DeviceLinear
from aocsim.execute.placement import HYBRID, Placement, TileOptions
from aocsim.execute.ssm_device import calibration_inputs, linear_maps, place_ssm, plain_copy
from aocsim.execute.tile_program import fit_tile_program, measure
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems


def hybrid(**options) -> Placement:
    return Placement(**options).resolved(HYBRID)


@pytest.fixture(scope="module")
def parity():
    model = load_model("parity-implicit")
    tokens, targets = word_problems(group("parity"), 16, 16, identity_prob=0.5, generator=3)
    cal_tokens, _ = word_problems(group("parity"), 16, 16, identity_prob=0.5, generator=99)
    return model, tokens, targets, calibration_inputs(model, cal_tokens)


def test_plain_copy_resolves_weight_norm_into_the_same_function(parity) -> None:
    model, tokens, _, _ = parity
    plain = plain_copy(model)
    assert not any("parametrizations" in k for k in plain.state_dict())
    with torch.no_grad():
        assert torch.equal(plain(tokens).logits, model(tokens).logits)


def test_on_the_ideal_device_the_hybrid_is_the_exact_model(parity) -> None:
    """Noise off, no quantisation, tanh: every tile product is exact, so the device run is the exact run."""
    model, tokens, _, cal = parity
    placed = place_ssm(model, load_device("ideal"), cal, hybrid(tile_size=16), generator=0)
    for mode in ("simultaneous", "sequential"):
        with torch.no_grad():
            exact = model(tokens, mode=mode, tol=1e-5, max_iter=200)
        device = placed(tokens, generator=1, mode=mode, tol=1e-5, max_iter=200)
        assert ((device.z - exact.z).norm(dim=-1) / exact.z.norm(dim=-1)).max() < 1e-4
        assert torch.equal(device.logits.argmax(-1), exact.logits.argmax(-1))


def test_tile_program_finds_the_dead_input_and_cuts_the_matrix_error() -> None:
    """On aoc48-twin, W programmed as is computes c W with a 19-30 % error (per-entry gains, crosstalk) and
    input position 8 is dead; the fitted program skips it and brings the error under a quarter."""
    device = load_device("aoc48-twin")
    w = torch.randn(60, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.1
    key = keys.as_key(0)
    program = fit_tile_program(device, w, tile_size=48, input_range=0.1, key=key)
    assert 8 in program.dead
    assert 8 not in program.columns.tolist() and program.columns.tolist()[:8] == list(range(8))
    live = torch.ones(40, dtype=torch.bool)
    (a,), _ = measure([device], w[None], live, tile_size=48, input_range=0.1, load=key.fold(7), probe=key.fold(8),
                      partial_sums="analog")
    naive = float((a - program.out_gain[:, None] * w).norm() / (program.out_gain[:, None] * w).norm())
    assert naive > 0.15 and program.error < naive / 4


def test_a_tile_program_is_the_same_bits_from_call_to_call() -> None:
    """Same key, same program, whatever memory the arrays land in: the least squares of the probes is a
    QR solve (the default pivoted driver rounded differently from call to call, and the program error
    stored with compare's results differed between two identical runs)."""
    device = load_device("aoc48-twin")
    w = torch.randn(60, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.1
    first = fit_tile_program(device, w, tile_size=48, input_range=0.1, key=keys.as_key(3), rounds=1)
    for shift in range(4):
        _ = [torch.empty(7 * shift + 1) for _ in range(3)]  # other allocations move the next arrays
        again = fit_tile_program(device, w.clone(), tile_size=48, input_range=0.1, key=keys.as_key(3), rounds=1)
        assert torch.equal(again.weight, first.weight) and again.error == first.error


def test_the_fits_least_squares_give_the_same_bits_from_call_to_call() -> None:
    """The one least-squares solve of the device's fits (tile programs, the emitters' measured cubics): the
    same bits whatever memory its arrays land in (torch's default driver differed in most of 100 calls)."""
    from aocsim._numerics import least_squares

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 49, generator=gen, dtype=torch.float64), torch.randn(512, 48, generator=gen, dtype=torch.float64)
    first = least_squares(a, b)
    for shift in range(100):
        _ = [torch.empty(7 * shift + 1) for _ in range(3)]
        assert torch.equal(least_squares(a.clone(), b.clone()), first)


def test_closed_loop_rounds_do_not_let_a_weak_column_diverge() -> None:
    """a5-implicit's output projection on aoc48-twin: with one damping for every column, the error falls
    from 37 % to 18 % in three rounds, then grows again (one weak column's correction overshoots and
    diverges, 5x to 36x its own norm); a column whose error grows steps back and halves its step, and
    the program ends near 6 %."""
    from aocsim import load_model
    from aocsim.execute.ssm_device import linear_maps, plain_copy

    w = linear_maps(plain_copy(load_model("a5-implicit")))["blocks.0.out_proj"].weight.detach()
    program = fit_tile_program(load_device("aoc48-twin"), w / w.abs().max(), tile_size=48, input_range=0.1,
                               key=keys.as_key(0))
    assert program.error < 0.09


def test_parity_on_the_twin_agrees_with_the_exact_path_in_both_modes(parity) -> None:
    model, tokens, targets, cal = parity
    placed = place_ssm(model, load_device("aoc48-twin"), cal, hybrid(), generator=0)
    assert all(layer.calibration_error < 0.1 for layer in placed.maps.values())
    with torch.no_grad():
        exact = model(tokens, mode="sequential", tol=1e-5, max_iter=200).logits.argmax(-1)
    for mode in ("simultaneous", "sequential"):
        device = placed(tokens, generator=1, mode=mode, tol=3e-3, max_iter=100)
        assert torch.equal(device.logits.argmax(-1), exact) and torch.equal(exact, targets)


def test_device_runs_are_reproducible_from_their_seeds(parity) -> None:
    model, tokens, _, cal = parity
    device = load_device("aoc48")
    a = place_ssm(model, device, cal, hybrid(), generator=0)
    b = place_ssm(model, device, cal, hybrid(), generator=0)
    z1 = a(tokens[:4], generator=5, mode="sequential", tol=1e-2, max_iter=5).z
    z2 = b(tokens[:4], generator=5, mode="sequential", tol=1e-2, max_iter=5).z
    z3 = a(tokens[:4], generator=6, mode="sequential", tol=1e-2, max_iter=5).z
    assert torch.equal(z1, z2) and not torch.equal(z1, z3)


def test_a_sequence_draws_the_same_noise_alone_as_in_its_batch(parity) -> None:
    """Noise is keyed by sequence id, position and visit: sequences run on their own (with their ids)
    reproduce their rows of the batch run in sequential mode, although other sequences of the batch need
    more iterations (their extra passes must not reach a stopped one's committed state). In float64: the
    matrix products' rounding depends on the batch size (a GEMM's blocking), far below the noise."""
    _, tokens, _, _ = parity
    model = load_model("parity-implicit").double()
    cal = calibration_inputs(model, word_problems(group("parity"), 16, 16, identity_prob=0.5, generator=99)[0])
    placed = place_ssm(model, load_device("aoc48"), cal, hybrid(), generator=1)
    full = placed(tokens[:6], generator=3, mode="sequential", tol=0.1, max_iter=30)
    pick = [4, 1]
    part = placed(tokens[pick], generator=3, sequences=torch.tensor(pick), mode="sequential", tol=0.1, max_iter=30)
    torch.testing.assert_close(part.z, full.z[pick], atol=1e-12, rtol=0)
    assert torch.equal(part.iterations, full.iterations[pick])
    assert not bool((full.iterations == full.iterations.max(0).values).all())  # the batch's rows differ
    other = placed(tokens[pick], generator=3, mode="sequential", tol=0.1, max_iter=30)  # ids 0 and 1
    assert not torch.equal(other.z, part.z)
    with pytest.raises(InputError, match="sequences"):
        placed(tokens[:2], generator=3, sequences=torch.tensor([0]))


def test_bad_placements_are_one_line_errors(parity) -> None:
    model, _, _, cal = parity
    from aocsim.execute import place

    with pytest.raises(InputError, match="stop = 'readout' applies to native DEQs and twin DEQs; parity-implicit on aoc48 runs as "
                                         "a hybrid SSM"):
        place(model, "aoc48", {"stop": "readout"}, calibration=torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(InputError, match="calibration = None"):
        place(model, "aoc48")
    with pytest.raises(InputError, match="generator = None"):
        place_ssm(model, load_device("aoc48"), cal, hybrid(), generator=None)
    with pytest.raises(InputError, match="generator = None"):
        placed = place_ssm(model, load_device("aoc48"), cal, hybrid(), generator=0)
        placed.reset(None)
    with pytest.raises(InputError, match="calibration has no inputs for 'blocks.0.in_proj'"):
        place_ssm(model, load_device("aoc48"), {"inject": cal["inject"]}, hybrid(), generator=0)
    w = linear_maps(plain_copy(model))["inject"].weight.detach()
    with pytest.raises(InputError, match="generator = None"):
        DeviceLinear(load_device("aoc48"), w, None, cal["inject"], generator=None)


def test_averaging_passes_divides_the_noise_by_sqrt_k_and_multiplies_the_cost() -> None:
    """A product averaged over K tile passes (each its own draws) has the single pass's mean and 1 / sqrt(K)
    its noise std: 400 rows of one input, each an independent draw, on aoc48, K = 1 and K = 4."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 30, generator=gen, dtype=torch.float64) * 0.1
    cal = torch.randn(256, 30, generator=gen, dtype=torch.float64)
    x = cal[:1].expand(400, 30).clone()
    runs = {}
    for k in (1, 4):
        layer = DeviceLinear(load_device("aoc48"), w, None, cal, generator=0, tile=TileOptions(averaging=k))
        layer.reset(7)
        y = layer(x)
        runs[k] = (y.mean(0), y.std(0), layer)
    ratio = float(runs[4][1].mean() / runs[1][1].mean())
    assert 0.45 < ratio < 0.55, ratio  # 1 / sqrt(4), std of the estimate about 1 % here
    # the same mean: the averaged passes are unbiased (4 sigma of the K = 1 mean's error)
    assert bool(((runs[4][0] - runs[1][0]).abs() <= 4 * runs[1][1] / 400 ** 0.5 + 1e-12).all())
    one, four = runs[1][2], runs[4][2]
    a1, a4 = one.activity(), four.activity()
    latency = (1 + 8) * 20e-9 + 100e-9  # a product's DAC and ADC interval and digital stage, not averaged
    assert a4.round_trips == 4 * a1.round_trips and a4.time_s - latency == pytest.approx(4 * (a1.time_s - latency))
    assert (a4.dac_conversions, a4.adc_conversions) == (4 * a1.dac_conversions, 4 * a1.adc_conversions)
    assert a1.digital_ops == 0 and a4.digital_ops == 4 * a1.adc_conversions  # the four readings added
    with pytest.raises(InputError, match="averaging = 0; expected an integer >= 1"):
        DeviceLinear(load_device("aoc48"), w, None, cal, generator=0, tile=TileOptions(averaging=0))


def test_averaged_runs_count_their_passes_in_time_and_energy(parity) -> None:
    """compare: with K passes per product every tile pass is counted K times (hardware time and
    conversions), and the Dataset says so."""
    from aocsim import compare

    model, tokens, targets, _ = parity
    ds = {k: compare(model, "aoc48", tokens[:2], targets[:2], placement=dict(averaging=k)) for k in (1, 2)}
    rt = float(load_device("aoc48").values["loop.round_trip_s"])
    # products per token: the injection once, both projections per evaluation of the map (k + 1 for k
    # iterations); each a map's tiles at once: K passes of 8 round trips (the converters' pace) and the
    # latency, 1 + 8 round trips and the 100 ns digital stage (5 round trips)
    for k, d in ds.items():
        dev = d.sel(path="device")
        products = 1 + 2 * (dev.iterations + 1)
        assert np.allclose(dev.hardware_time_s / rt, products * (8 * k + 9 + 5))
        assert d.attrs.get("placement.averaging", 1) == k
    per_iteration = {k: float(np.polyfit(d.sel(path="device").iterations.values.ravel(),
                                         d.sel(path="device").adc_conversions.values.ravel(), 1)[0])
                     for k, d in ds.items()}
    assert np.isclose(per_iteration[2], 2 * per_iteration[1])
    assert "mean of 2 passes" in ds[2].attrs["placement"]
    with pytest.raises(InputError, match="averaging = 2 applies to .*runs as a native DEQ"):
        compare("digits-deq48", "aoc48", torch.zeros(1, 64, dtype=torch.float64), placement=dict(averaging=2))
    with pytest.raises(InputError, match="predistort = True applies to .*runs as a native DEQ"):
        compare("digits-deq48", "aoc48", torch.zeros(1, 64, dtype=torch.float64), placement=dict(predistort=True))
    with pytest.raises(InputError, match="predistort = 1; expected true or false"):
        compare(model, "aoc48", tokens[:1], placement=dict(predistort=1))


def test_a_weak_output_is_not_calibrated_into_noise() -> None:
    """a5-implicit's in_proj has a row at a tenth of the median norm: its node is mostly noise, and a gain
    fitted to it (0.003 on chip 2's seed-2 load of aoc48) divided that noise by 0.003 (calibration error
    107 %, the run's accuracy 20 %). Gains stay within GAIN_SPREAD of the median."""
    from aocsim.execute import place
    from aocsim.execute.device_linear import GAIN_SPREAD
    from aocsim.execute.run import seed_key
    from aocsim.experiments.workloads import default_workload

    model = load_model("a5-implicit")
    placed = place(model, "aoc48", {"on_tiles": "in_proj"}, chip=2,
                   calibration=default_workload(model, sequences=1).calibration)
    load = place_ssm(placed.model, placed.profile, placed.calibration, placed.placement,
                     generator=seed_key(2).fold(keys.Stream.LOAD), programs=placed.programs)
    layer = load.maps["blocks.0.in_proj"]
    gain = layer.gain.abs()
    assert float(gain.max() / gain.min()) <= GAIN_SPREAD ** 2 + 1e-9
    assert layer.calibration_error < 0.15, layer.calibration_error


def test_a_diverged_row_reads_nan_alone_and_its_tokens_report_divergence(parity) -> None:
    """A state that diverged digitally (an extreme design point: a5-implicit on aoc48 at 4 SLM bits, a 6-bit
    ADC and 1e-5 W per unit stopped a whole search with 't contains NaN') reads NaN in its own row of a map on
    tiles, the other rows as without it, and its token's status is diverged."""
    from aocsim.execute.hybrid import per_token
    from aocsim.nn.implicit_ssm import SSMOutput
    from aocsim.solve.result import SolveStatus

    model, tokens, _, cal = parity
    placed = place_ssm(model, load_device("aoc48"), cal, hybrid(), generator=0)
    layer = placed.maps["inject"]
    x = cal["inject"][:6].clone()
    clean, _ = layer._nodes(x, keys.as_key(5))
    x[2, 3] = float("inf")
    node, _ = layer._nodes(x, keys.as_key(5))
    assert torch.isnan(node[2]).all() and torch.equal(node[[0, 1, 3, 4, 5]], clean[[0, 1, 3, 4, 5]])
    residuals = torch.tensor([[0.01, float("nan"), 0.5]])
    out = SSMOutput(torch.zeros(1, 3, 2), torch.zeros(1, 3, 4), torch.ones(1, 3, dtype=torch.int64), residuals, None)
    assert per_token(out, 0.1).status.tolist() == [[SolveStatus.CONVERGED.value, SolveStatus.DIVERGED.value,
                                                    SolveStatus.MAX_ITER.value]]
