"""Weight loads of one program run as one product (aocsim/hardware/engine/tile_product.py, `LoadStack`):
each row gets what its own load gives it alone, whatever the other loads and rows of the stack."""

from __future__ import annotations

import pytest
import torch

from aocsim.errors import InputError
from aocsim.hardware.engine import keys, tile_pass
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.tile_product import LoadStack
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.profiles.profile import load_device

F64 = torch.float64


def _rand(seed: int, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("options", [
    {},  # a 2 x 3 grid with the hold's kT/C on its analog partial sums
    {"passes": 3, "predistort": True},
    {"partial_sums": "digital", "mount": Mount(count=2, multiplexed=True)},  # reloaded per call and load
])
@pytest.mark.slow
def test_a_stack_of_loads_gives_each_row_its_own_loads_product(options: dict, dtype: torch.dtype) -> None:
    options = dict(options)
    passes, partial_sums = options.pop("passes", 1), options.pop("partial_sums", "analog")
    device = load_device("aoc48")
    weight = 0.01 * _rand(0, 70, 130, dtype=dtype)
    loads = [TiledMatrix(device, weight, generator=keys.as_key(seed), **options) for seed in (11, 12, 13)]
    run_keys = [keys.as_key(seed).fold(keys.Stream.RUN) for seed in (21, 22, 23)]
    t = _rand(1, 3 * 5, 130, dtype=dtype)
    ids = torch.tensor([4, 0, 9, 2, 7, 0, 9, 2, 7, 4, 9, 2, 7, 4, 0])  # each group's sample ids, in its own order
    stacked = LoadStack(loads)(t, run_keys, ids, partial_sums=partial_sums, call=6, passes=passes)
    for s, (load, key) in enumerate(zip(loads, run_keys)):
        rows = slice(5 * s, 5 * (s + 1))
        alone = load(t[rows], generator=key, samples=ids[rows], call=6, passes=passes, partial_sums=partial_sums)
        assert torch.equal(stacked.input_scale[rows], alone.input_scale)
        assert torch.equal(stacked.y[rows], alone.y)  # the same draws, constants and codes
    assert stacked.batch == 15 and stacked.adc_conversions == 15 * alone.adc_conversions_per_sample
    other = [TiledMatrix(device, weight, generator=keys.as_key(seed), **options) for seed in (11, 99, 13)]
    changed = LoadStack(other)(t, run_keys, ids, partial_sums=partial_sums, call=6, passes=passes)
    alone = other[1](t[5:10], generator=run_keys[1], samples=ids[5:10], call=6, passes=passes,
                     partial_sums=partial_sums)
    assert torch.equal(changed.y[:5], stacked.y[:5]) and torch.equal(changed.y[5:10], alone.y)


# A population's design points: each per-load value changed on the second load (tile_product.PER_LOAD).
POPULATION = {"slm.bits": 5, "slm.programming_error_levels": 0.02, "noise.power_per_unit_w": 3e-6,
              "noise.bias_units": 2.0, "noise.rin.rin_db_per_hz": -120.0,
              "noise.responsivity_a_per_w": 0.3, "readout.adc_bits": 5, "variation.chip_seed": 7,
              "variation.relative_std": 0.03, "noise.multiplier": 4.0, "noise.thermal.temperature_k": 900.0,
              "noise.dark.current_a": 1e-7, "readout.hold_capacitance_f": 1e-14, "environment.temperature_delta_k": 30.0}
# (the machine the population is built on: aoc48 with temperature coefficients, so that a temperature acts)
TEMPERATURE_COEFFICIENTS = {"environment.hold_leakage_per_k": 0.3, "environment.led_cubic_per_k": 0.05}


def test_every_per_load_value_is_named_here() -> None:
    from aocsim.hardware.engine.tile_product import PER_LOAD

    assert set(POPULATION) == set(PER_LOAD)


@pytest.mark.parametrize("key", sorted(POPULATION))
@pytest.mark.parametrize("partial_sums,predistort", [("analog", False), ("digital", False), ("analog", True)])
def test_a_population_stack_gives_each_design_point_its_own_product(key: str, partial_sums: str,
                                                                    predistort: bool) -> None:
    """(predistorted: each point's emitters measured with its own light and ADC, its own cubics)"""
    device = load_device("aoc48", TEMPERATURE_COEFFICIENTS)
    weight = 0.01 * _rand(0, 30, 70)
    points = [device, device.with_overrides({key: POPULATION[key]}), device.with_overrides({"readout.adc_bits": 10})]
    loads = [TiledMatrix(p, weight, generator=keys.as_key(seed), predistort=predistort)
             for p, seed in zip(points, (11, 12, 13))]
    run_keys = [keys.as_key(seed).fold(keys.Stream.RUN) for seed in (21, 22, 23)]
    t, ids = _rand(1, 3 * 6, 70), torch.arange(18) % 6
    stacked = LoadStack(loads)(t, run_keys, ids, partial_sums=partial_sums, call=2, passes=2)
    for s, (load, key_) in enumerate(zip(loads, run_keys)):
        rows = slice(6 * s, 6 * (s + 1))
        alone = load(t[rows], generator=key_, samples=ids[rows], call=2, passes=2, partial_sums=partial_sums)
        assert torch.equal(stacked.y[rows], alone.y), (key, s)  # its own programming, light, noise and ADC step
    if partial_sums == "analog" and not predistort:  # the value acts: the same load at the base profile differs
        base = TiledMatrix(device, weight, generator=keys.as_key(12))(t[6:12], generator=run_keys[1], samples=ids[6:12],
                                                                        call=2, passes=2, partial_sums=partial_sums)
        assert not torch.equal(stacked.y[6:12], base.y), key


@pytest.mark.parametrize("partial_sums,predistort,light", [("analog", False, None), ("digital", False, None),
                                                            ("analog", True, None), ("analog", True, 3e-6)])
def test_programs_of_several_widths_on_one_grid_stack_as_each_alone(partial_sums: str, predistort: bool,
                                                                    light: float | None) -> None:
    """A population's programs skip different dead input positions: 70, 75 and 80 inputs on a 1 x 2 grid of
    48-channel tiles. Each row comes as wide as the widest (zeros past its own), and gets its load's product
    alone, bit for bit: its columns past its width are undriven (the DAC's code nearest 0 is not 0, and a
    predistorted 0 is not 0 either). `light`: the second point's, so that each load predistorts with its own
    measured cubics. Without an ADC, whose codes would hide the 0.3 mV drive of the nearest code."""
    device = load_device("aoc48", {"readout.adc_bits": None})
    points = [device, device if light is None else device.with_overrides({"noise.power_per_unit_w": light}), device]
    weights = [0.01 * _rand(i, 30, width) for i, width in enumerate((70, 80, 75))]
    loads = [TiledMatrix(p, w, generator=keys.as_key(11 + i), predistort=predistort)
             for i, (p, w) in enumerate(zip(points, weights))]
    run_keys = [keys.as_key(seed).fold(keys.Stream.RUN) for seed in (21, 22, 23)]
    t, ids = _rand(1, 3 * 6, 80), torch.arange(18) % 6
    for s, w in enumerate(weights):
        t[6 * s:6 * (s + 1), w.shape[1]:] = 0.0
    stacked = LoadStack(loads)(t, run_keys, ids, partial_sums=partial_sums, call=2, passes=2)
    for s, (load, key_) in enumerate(zip(loads, run_keys)):
        rows = slice(6 * s, 6 * (s + 1))
        alone = load(t[rows, :weights[s].shape[1]], generator=key_, samples=ids[rows], call=2, passes=2,
                     partial_sums=partial_sums)
        assert torch.equal(stacked.y[rows], alone.y), s
    with pytest.raises(InputError, match="t has 75 inputs; expected 80, the widest load's"):
        LoadStack(loads)(t[:, :75], run_keys, ids, partial_sums=partial_sums, call=2, passes=2)
    other_grid = TiledMatrix(device, 0.01 * _rand(5, 30, 100), generator=keys.as_key(14))  # 1 x 3 tiles
    with pytest.raises(InputError, match=r"loads\[1\] is not a load of loads\[0\]'s program"):
        LoadStack([loads[0], other_grid])


def test_a_population_stack_refuses_points_of_another_shape() -> None:
    device = load_device("aoc48")
    weight = _rand(0, 10, 20)
    a = TiledMatrix(device, weight, generator=1)
    for key, value in (("injection.dac_bits", 4), ("loop.round_trip_s", 3e-8), ("readout.hold_leakage_a", 1e-9)):
        with pytest.raises(InputError, match=r"loads\[1\] is not a load of loads\[0\]'s program"):
            LoadStack([a, TiledMatrix(device.with_overrides({key: value}), weight, generator=2)])
    quiet = device.with_overrides({"noise.multiplier": 0.0})  # draws nothing: another layout
    with pytest.raises(InputError, match="which noises draw"):
        LoadStack([TiledMatrix(quiet, weight, generator=1), a])
    with pytest.raises(InputError, match="readout.adc_bits"):
        LoadStack([a, TiledMatrix(device.with_overrides({"readout.adc_bits": None}), weight, generator=2)])


def test_loads_of_other_programs_do_not_stack() -> None:
    device = load_device("aoc48")
    a = TiledMatrix(device, _rand(0, 10, 20), generator=1)
    with pytest.raises(InputError, match=r"loads\[1\] is not a load of loads\[0\]'s program"):
        LoadStack([a, TiledMatrix(device, _rand(0, 10, 20), generator=2, predistort=True)])
    with pytest.raises(InputError, match="expected at least one weight load"):
        LoadStack([])


def test_passes_of_one_load_multiply_as_matmul_does() -> None:
    """`step.affine` runs the K passes of a load as one product of their rows: matmul's numbers, and
    matmul's broadcasting where the matrices have more leading dims than the inputs."""
    from aocsim.hardware.engine.step import affine

    bias = _rand(2, 6)
    for x_shape, w_shape in (((3, 4, 5, 8), (3, 1, 8, 6)), ((1, 3, 5, 8), (2, 1, 8, 6))):
        x, w = _rand(0, *x_shape), _rand(1, *w_shape)
        expected = torch.matmul(x, w) + bias
        got = affine(bias, x, w)
        assert got.shape == expected.shape and torch.allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("options", [
    {},  # a 2 x 3 grid with the hold's kT/C on its analog partial sums
    {"passes": 3, "predistort": True},
    {"partial_sums": "digital"},
])
@pytest.mark.slow
@pytest.mark.parametrize("count", [1, 3])
def test_a_call_per_row_draws_what_each_row_draws_in_its_own_call(options: dict, dtype: torch.dtype,
                                                                  count: int) -> None:
    """Rows on their own iterations (aocsim/execute/ssm_rows.py) share a product: row r draws from call[r]'s
    streams, bit for bit what its call alone gives it, through one load or a stack of loads."""
    options = dict(options)
    passes, partial_sums = options.pop("passes", 1), options.pop("partial_sums", "analog")
    device = load_device("aoc48")
    weight = 0.01 * _rand(0, 70, 130, dtype=dtype)
    loads = [TiledMatrix(device, weight, generator=keys.as_key(seed), **options) for seed in (11, 12, 13)[:count]]
    run_keys = [keys.as_key(seed).fold(keys.Stream.RUN) for seed in (21, 22, 23)[:count]]
    t = _rand(1, count * 6, 130, dtype=dtype)
    ids = torch.arange(count * 6) % 5
    calls = torch.tensor([3, 0, 7, 3, 1, 0, 0, 7, 2, 3, 3, 1, 7, 7, 0, 2, 1, 3])[:count * 6]
    every = LoadStack(loads)(t, run_keys, ids, partial_sums=partial_sums, call=calls, passes=passes)
    for call in calls.unique().tolist():
        alone = LoadStack(loads)(t, run_keys, ids, partial_sums=partial_sums, call=call, passes=passes)
        mine = calls == call
        assert torch.equal(every.y[mine], alone.y[mine]) and torch.equal(every.input_scale, alone.input_scale)
    assert not torch.equal(every.y, LoadStack(loads)(t, run_keys, ids, partial_sums=partial_sums, call=3,
                                                     passes=passes).y)


def test_a_call_per_row_is_checked_and_refused_on_multiplexed_tiles() -> None:
    device = load_device("aoc48")
    weight = 0.01 * _rand(0, 70, 130)
    tiles = TiledMatrix(device, weight, generator=1, mount=Mount(count=2, multiplexed=True))
    t = _rand(1, 4, 130)
    with pytest.raises(InputError, match="a call per row"):
        tiles(t, call=torch.tensor([0, 1, 2, 3]))
    with pytest.raises(InputError, match=r"call = .*expected an integer >= 0 or an integer tensor \[4\]"):
        TiledMatrix(device, weight, generator=1)(t, call=torch.tensor([0, 1]))


@pytest.mark.parametrize("count,dtype", [(1, torch.float32), (3, torch.float32), (1, torch.float64),
                                         (3, torch.float64)])
@pytest.mark.parametrize("per_row", [False, True])
def test_a_product_in_pieces_of_rows_gives_the_values_of_one_piece(count: int, dtype: torch.dtype, per_row: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A large product runs in pieces of rows (`tile_product.CHUNK_BYTES`), a stack of loads load by load where
    their pieces would not fit together: every row's output and partials are
    those of one piece to the last bits of a product (float64: a BLAS kernel changes with a call's rows), its
    input scale and the clipped count the same (float32, a device run's; float64, a tile program's probes)."""
    from aocsim.hardware.engine import tile_product

    device = load_device("aoc48", overrides={"readout.range_v": [-0.3, 0.3]})  # some nodes beyond it
    weight = 5 * _rand(0, 70, 130, dtype=dtype)
    points = [device, device.with_overrides({"noise.multiplier": 4.0}),  # a population: each row its load's hold
              device.with_overrides({"readout.hold_capacitance_f": 1e-14})]
    loads = [TiledMatrix(p, weight, generator=keys.as_key(seed)) for p, seed in zip(points, (11, 12, 13)[:count])]
    run_keys = [keys.as_key(seed).fold(keys.Stream.RUN) for seed in (21, 22, 23)[:count]]
    t = _rand(1, count * 23, 130, dtype=dtype)
    ids = torch.arange(count * 23) % 17
    call = torch.arange(count * 23) % 5 if per_row else 4
    options = dict(partial_sums="analog", call=call, passes=3, keep_partials=True)
    whole = LoadStack(loads)(t, run_keys, ids, **options)
    size = t.element_size()
    monkeypatch.setattr(tile_product, "CHUNK_BYTES", size * 10 * 2 * 3 * 3 * 48)  # pieces of 10 rows of a load (the
    # last 3), each load on its own (`LoadStack._width`: 10 rows of two loads would not fit)
    chunked = []  # the pieces' rows, seen by the product's body
    monkeypatch.setattr(tile_product, "run", lambda plan, x, compile: chunked.append(x["t"].shape[0]) or
                        tile_pass.run(plan, x, compile))
    pieces = LoadStack(loads)(t, run_keys, ids, **options)
    scale = float(whole.y.abs().max())  # a last bit of a product, not a code: here no ADC code moves
    torch.testing.assert_close(pieces.y, whole.y, rtol=0, atol=1e-6 * scale)
    torch.testing.assert_close(pieces.partials, whole.partials, rtol=0, atol=1e-6 * scale)
    assert torch.equal(pieces.input_scale, whole.input_scale) and pieces.adc_clipped == whole.adc_clipped > 0
    assert chunked == [10, 10, 3] * count
