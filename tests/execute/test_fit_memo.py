"""The tile programs' memo (`aocsim.execute.map_fit.fit_maps`): a model is fitted once per chip and
process, whatever sweep points follow, and only where nothing the fit reads has changed."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import torch
import xarray as xr

from aocsim import compare, load_model
from aocsim.execute import map_fit, tile_program
from aocsim.execute.option_groups import TileOptions
from aocsim.execute.ssm_device import calibration_inputs, fit_programs
from aocsim.execute.registry import resolve, resolve_profile
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems

TOKENS, TARGETS = word_problems(group("parity"), 2, 16, identity_prob=0.5, generator=8)
FAST = {"fit_probes": 128}  # a coarser fit: quality plays no part here


@pytest.fixture(autouse=True)
def one_thread():
    """The fits here run on one torch thread, as compare's parts do (aocsim/parallel.py): a fit's key holds
    the thread count, so one made at another count would not be compare's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fits actually run (memo misses), with an empty memo."""
    calls: list[int] = []
    real = map_fit._fit_maps

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(map_fit, "_fit_maps", counted)
    monkeypatch.setattr(map_fit, "FITS", map_fit.FITS.fresh())
    return calls


@pytest.mark.slow
def test_points_that_a_fit_does_not_read_reuse_it_and_give_the_same_results(fits: list[int]) -> None:
    first = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), placement=FAST)
    assert len(fits) == 1
    compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,),
            placement={**FAST, "averaging": 2, "rtol": 0.05})
    assert len(fits) == 1  # averaging and the stop rule: what a fit does not read
    again = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), placement=FAST)
    xr.testing.assert_identical(first.drop_attrs(), again.drop_attrs())


@pytest.mark.slow
def test_anything_a_fit_reads_fits_again(fits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model("parity-implicit")
    profile = load_device("aoc48")
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, profile, FAST).placement
    base = fit_programs(model, profile, calibration, placement)
    assert len(fits) == 1
    assert fit_programs(model, profile, calibration, placement).keys() == base.keys() and len(fits) == 1
    fit_programs(model, profile.with_overrides({"noise.multiplier": 2.0}), calibration, placement)
    assert len(fits) == 2  # another profile value
    fit_programs(model, profile, {k: v * 1.01 for k, v in calibration.items()}, placement)
    assert len(fits) == 3  # other calibration inputs
    fit_programs(model, profile, calibration, resolve(model, profile, {"fit_probes": 96}).placement)
    assert len(fits) == 4  # the fit's effort: its probes
    fit_programs(model, profile, calibration, resolve(model, profile, {**FAST, "fit_rounds": 4}).placement)
    assert len(fits) == 5  # and its rounds
    monkeypatch.setattr(tile_program, "DAMPING", 0.25)
    fit_programs(model, profile, calibration, placement)
    assert len(fits) == 6  # the fit's own constants


def test_a_remembered_program_is_the_program_a_fit_gives(fits: list[int]) -> None:
    """A hit, after a run has used the programs (a caller that changed them would show here), equals a
    fresh fit, and draws nothing (a memo replays no keys: tests/_streams.py)."""
    from aocsim.hardware.engine import keys

    model = load_model("parity-implicit")
    profile = resolve_profile("aoc48", 0)  # chip 0, as compare places it
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, profile, FAST).placement
    with keys.recording() as drawn_by_fit:
        fit_programs(model, profile, calibration, placement)
    compare(model, "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), calibration=TOKENS, placement=FAST)
    with keys.recording() as drawn_by_hit:
        remembered = fit_programs(model, profile, calibration, placement)
    assert len(fits) == 1 and drawn_by_fit and not drawn_by_hit
    map_fit.FITS.clear()
    fresh = fit_programs(model, profile, calibration, placement)
    assert len(fits) == 2
    for name in fresh:
        assert torch.equal(remembered[name].weight, fresh[name].weight)
        assert remembered[name].sigma == fresh[name].sigma and remembered[name].error == fresh[name].error


def test_a_fit_in_a_folder_is_read_back_by_a_process_that_did_not_fit(fits: list[int], tmp_path) -> None:
    """With `disk_memo.use(folder)` (a sweep's fits/), a fit is written once and read back, bit for bit,
    where the memory has forgotten it (another worker, a resumed sweep); a folder leaves results as
    they were, and an entry of other inputs is not read."""
    from aocsim import disk_memo

    model = load_model("parity-implicit")
    profile = resolve_profile("aoc48", 0)
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, profile, FAST).placement
    plain = compare(model, "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), calibration=TOKENS, placement=FAST)
    map_fit.FITS.clear()
    with disk_memo.use(tmp_path):
        fitted = fit_programs(model, profile, calibration, placement)
        assert len(fits) == 2 and len(list(tmp_path.glob("fits-*.h5"))) == 1
        map_fit.FITS.clear()
        read = fit_programs(model, profile, calibration, placement)
        assert len(fits) == 2  # read from the folder, not fitted
        for name in fitted:
            a, b = fitted[name], read[name]
            assert torch.equal(a.weight, b.weight) and torch.equal(a.columns, b.columns)
            assert (a.sigma, a.error, a.dead, a.tile_size, a.input_range, a.mount) == (
                b.sigma, b.error, b.dead, b.tile_size, b.input_range, b.mount)
        map_fit.FITS.clear()
        stored = compare(model, "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), calibration=TOKENS, placement=FAST)
        assert len(fits) == 2
        fit_programs(model, profile.with_overrides({"noise.multiplier": 2.0}), calibration, placement)
        assert len(fits) == 3 and len(list(tmp_path.glob("fits-*.h5"))) == 2
    xr.testing.assert_identical(plain.drop_attrs(), stored.drop_attrs())


def test_emitter_measurements_in_a_folder_are_read_back(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim import disk_memo
    from aocsim.hardware.engine import emitter_calibration as E

    monkeypatch.setattr(E, "SHAPES", E.SHAPES.fresh())
    monkeypatch.setattr(E, "REPEATS", 4)  # speed; part of the entry's key
    profile = load_device("aoc48")
    measure = E._fitted_shape
    with disk_memo.use(tmp_path):
        measured = E.measured_shapes(profile, 48, 3, 0.2, torch.float64, "cpu")
        E.SHAPES.clear()
        monkeypatch.setattr(E, "_fitted_shape", lambda *a: pytest.fail("measured again"))
        read = E.measured_shapes(profile, 48, 3, 0.2, torch.float64, "cpu")
        assert all(torch.equal(a, b) for a, b in zip(measured, read))
        (entry,) = tmp_path.glob("emitters-*.h5")
        entry.write_bytes(b"not an HDF5 file")  # an unreadable entry is measured again and written over
        E.SHAPES.clear()
        monkeypatch.setattr(E, "_fitted_shape", measure)
        again = E.measured_shapes(profile, 48, 3, 0.2, torch.float64, "cpu")
        assert all(torch.equal(a, b) for a, b in zip(measured, again)) and entry.read_bytes()[:4] == b"\x89HDF"
        monkeypatch.setattr(E, "_fitted_shape", lambda *a: pytest.fail("measured again"))
        monkeypatch.setattr(E, "REPEATS", 8)
        E.SHAPES.clear()
        with pytest.raises(pytest.fail.Exception, match="measured again"):
            E.measured_shapes(profile, 48, 3, 0.2, torch.float64, "cpu")


def test_a_compiled_fit_is_remembered_apart(fits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A placement with `compile` fits with compiled probe products (the same numbers to float rounding,
    not the same bits): its programs are its own, so that a compiled run gives the same bits whether or
    not an eager one fitted the chip before it in the process (and the other way round)."""
    seen: list[object] = []
    monkeypatch.setattr(map_fit, "_fit_maps", lambda devices, maps, tile: seen.append(tile.compile) or [[]])
    profile = load_device("aoc48")
    for compile in (False, True, False, True):
        map_fit.fit_maps(profile, [], TileOptions(partial_sums="analog", compile=compile))
    assert seen == [False, True]  # one fit each, then memo hits


def test_a_fit_made_at_another_thread_count_is_not_served(fits: list[int]) -> None:
    """A reduction's rounding follows torch's thread count, so a fit's key holds it (aocsim/hardware/engine/
    memo.py, from disk_memo.machine): a fit made on two threads is its own, and one thread finds its
    own fit again. Fails with the machine left out of the memory's key."""
    model = load_model("parity-implicit")
    profile = resolve_profile("aoc48", 0)
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, profile, FAST).placement
    fit_programs(model, profile, calibration, placement)
    torch.set_num_threads(2)
    fit_programs(model, profile, calibration, placement)
    assert len(fits) == 2
    torch.set_num_threads(1)
    fit_programs(model, profile, calibration, placement)
    assert len(fits) == 2


def test_one_modules_emitter_measurement_is_never_served_for_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each module has its own emitters (docs/PHYSICS.md, LED cubic spread): the memo's key holds the module,
    so module 1's measured shapes are module 1's, measured afresh, not module 0's. Fails with the module
    left out of the key."""
    from aocsim.hardware.engine import emitter_calibration as E

    monkeypatch.setattr(E, "SHAPES", E.SHAPES.fresh())
    monkeypatch.setattr(E, "REPEATS", 4)  # speed: the shapes differ between modules by far more than the noise
    profile = load_device("aoc48")
    zero = E.measured_shapes(profile, 48, 0, 0.2, torch.float64, "cpu")
    one = E.measured_shapes(profile, 48, 1, 0.2, torch.float64, "cpu")
    fresh = (E._fitted_shape(profile, 48, 1.0, 1, 0.2), E._fitted_shape(profile, 48, -1.0, 1, 0.2))
    assert all(torch.equal(a, b) for a, b in zip(one, fresh))
    assert not torch.equal(zero[0], one[0])


def test_a_profile_is_keyed_by_its_values_not_its_file() -> None:
    """The same values read from another file (a checkout's devices/ against an installed package's, as CI's
    new process saw) are the same chip: the memo's key holds a profile's values alone. Seen failing when the
    profile's `origin` was part of the key (a later process placed the chip again)."""
    import dataclasses

    from aocsim.hardware.engine.memo import Memo

    profile = load_device("aoc48")
    moved = dataclasses.replace(profile, origin="/elsewhere/aoc48.yaml", name="a copy")
    memo = Memo("test", 4)
    assert memo.key((profile,)) == memo.key((moved,))
    assert memo.key((profile,)) != memo.key((profile.with_overrides({"noise.multiplier": 2.0}),))


def test_a_key_remembers_only_frozen_parts_that_cannot_change() -> None:
    """`memo.derive` remembers a frozen dataclass's key by identity only where it holds nothing mutable: a
    profile's components (read-only arrays) are derived once; a frozen dataclass holding a tensor is derived
    anew, so that changing the tensor in place changes its key (a stale key would serve wrong numbers)."""
    import dataclasses

    from aocsim.hardware.engine import memo

    parts = load_device("aoc48").parts
    assert memo.derive(parts) == memo.derive(parts) and id(parts) in memo._FROZEN

    @dataclasses.dataclass(frozen=True)
    class Holder:
        values: torch.Tensor

    held = Holder(torch.zeros(3))
    before = memo.derive(held)
    held.values[0] = 1.0
    assert memo.derive(held) != before and id(held) not in memo._FROZEN
    writeable = Holder(np.zeros(3))  # type: ignore[arg-type]
    before = memo.derive(writeable)
    writeable.values[0] = 1.0
    assert memo.derive(writeable) != before


def test_a_population_keeps_each_result_under_its_own_key() -> None:
    """`Memo.many` (a population's fits): it computes only the inputs it does not know, in one call, and keeps
    each result under that input's own key, so that each is served afterwards, alone or in another population,
    without computing. Fails with the results kept under another input's key (they would be computed again)."""
    from aocsim.hardware.engine.memo import Memo

    memo: Memo[float] = Memo("test population", 8)
    calls: list[list[int]] = []

    def compute(inputs: list[tuple]) -> Callable[[list[int]], list[float]]:  # `many`'s compute for `inputs`
        def run(indices: list[int]) -> list[float]:
            calls.append([inputs[i][0] for i in indices])
            return [inputs[i][0] * 10.0 for i in indices]
        return run

    first = [(1,), (2,), (3,)]
    assert memo.many(first, compute(first)) == [10.0, 20.0, 30.0]
    for one in first:  # each served alone, under its own key
        assert memo(one, lambda: pytest.fail("a kept result was computed again")) == one[0] * 10.0
    second = [(3,), (4,), (1,)]
    assert memo.many(second, compute(second)) == [30.0, 40.0, 10.0]
    assert calls == [[1, 2, 3], [4]]
