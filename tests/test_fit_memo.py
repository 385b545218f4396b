"""The tile programs' memo (`aocsim.execute.device_linear.fit_maps`): a model is fitted once per chip and
process, whatever sweep points follow, and only where nothing the fit reads has changed."""

from __future__ import annotations

import pytest
import torch
import xarray as xr

from aocsim import compare, load_model
from aocsim.execute import device_linear, tile_program
from aocsim.execute.ssm_device import calibration_inputs, fit_programs
from aocsim.execute.registry import resolve, resolve_profile
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems

TOKENS, TARGETS = word_problems(group("parity"), 2, 16, identity_prob=0.5, generator=8)


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fits actually run (memo misses), with an empty memo."""
    calls: list[int] = []
    real = device_linear._fit_maps

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(device_linear, "_fit_maps", counted)
    monkeypatch.setattr(device_linear, "_FITS", type(device_linear._FITS)())
    monkeypatch.setattr(tile_program, "PROBES", 128)  # quality plays no part here
    return calls


def test_points_that_a_fit_does_not_read_reuse_it_and_give_the_same_results(fits: list[int]) -> None:
    first = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,))
    assert len(fits) == 1
    compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), placement={"averaging": 2,
                                                                                             "rtol": 0.05})
    assert len(fits) == 1  # averaging and the stop rule: what a fit does not read
    again = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,))
    xr.testing.assert_identical(first.drop_attrs(), again.drop_attrs())


def test_anything_a_fit_reads_fits_again(fits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model("parity-implicit")
    profile = load_device("aoc48")
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, profile).placement
    base = fit_programs(model, profile, calibration, placement)
    assert len(fits) == 1
    assert fit_programs(model, profile, calibration, placement).keys() == base.keys() and len(fits) == 1
    fit_programs(model, profile.with_overrides({"noise.multiplier": 2.0}), calibration, placement)
    assert len(fits) == 2  # another profile value
    fit_programs(model, profile, {k: v * 1.01 for k, v in calibration.items()}, placement)
    assert len(fits) == 3  # other calibration inputs
    monkeypatch.setattr(tile_program, "PROBES", 64)
    fit_programs(model, profile, calibration, placement)
    assert len(fits) == 4  # the fit's own constants


def test_a_remembered_program_is_the_program_a_fit_gives(fits: list[int]) -> None:
    """A hit, after a run has used the programs (a caller that changed them would show here), equals a
    fresh fit; and it shows `keys.recording()` the keys the fit drew."""
    from aocsim.hardware.engine import keys

    model = load_model("parity-implicit")
    profile = resolve_profile("aoc48", 0)  # chip 0, as compare places it
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, profile).placement
    with keys.recording() as drawn_by_fit:
        fit_programs(model, profile, calibration, placement)
    compare(model, "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,), calibration=TOKENS)
    with keys.recording() as drawn_by_hit:
        remembered = fit_programs(model, profile, calibration, placement)
    assert len(fits) == 1 and [k.value for k in drawn_by_hit] == [k.value for k in drawn_by_fit] != []
    device_linear._FITS.clear()
    fresh = fit_programs(model, profile, calibration, placement)
    assert len(fits) == 2
    for name in fresh:
        assert torch.equal(remembered[name].weight, fresh[name].weight)
        assert remembered[name].sigma == fresh[name].sigma and remembered[name].error == fresh[name].error
