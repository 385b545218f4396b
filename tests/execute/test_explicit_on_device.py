"""Explicit SSM baselines on the device (the hybrid placement, aocsim/execute/hybrid.py): one pass of
the map from z = 0, priced as one pass, so that noise studies compare implicit and explicit models on
the same machine (docs/LANGUAGE.md, the SNR study)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from aocsim import InputError, compare, load_model
from aocsim.execute.ssm_device import calibration_inputs, fit_programs, linear_maps, on_tiles
from aocsim.execute.registry import resolve
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems


@pytest.fixture(scope="module")
def data():
    return word_problems(group("parity"), 4, 24, identity_prob=0.5, generator=8)


@pytest.mark.parametrize("mode", ["sequential", "simultaneous"])
def test_an_explicit_model_without_noise_is_its_exact_path(mode: str, data) -> None:
    tokens, targets = data
    ds = compare("parity-explicit2", "aoc48", tokens, targets, placement=dict(mode=mode, on_tiles="none"))
    dev, exact = ds.sel(path="device"), ds.sel(path="exact")
    assert np.array_equal(dev.prediction, exact.prediction) and float(ds.fixed_point_error.max()) == 0.0
    assert np.array_equal(dev.correct, exact.correct)
    assert int(dev.iterations.max()) == 0  # one pass: no iteration


def test_the_two_modes_of_an_explicit_model_are_one_function() -> None:
    model = load_model("parity-explicit2")
    tokens = word_problems(group("parity"), 3, 40, generator=2)[0]
    with torch.no_grad():
        seq, sim = model(tokens, mode="sequential"), model(tokens, mode="simultaneous")
    assert torch.allclose(seq.z, sim.z, rtol=0, atol=1e-5)


def test_an_explicit_model_on_tiles_is_priced_as_one_pass(data) -> None:
    tokens, targets = data
    ds = compare("parity-explicit1", "aoc48", tokens, targets)
    # weight-stationary, a product one pass at the converters' pace (8 round trips of 20 ns) and its latency
    # (a DAC and an ADC interval, 1 + 8 round trips, and the 100 ns digital stage): the injection and the output
    # projection, once per token; the input projection multiplies RMSNorm(0) = 0 in a one-block explicit
    # model, so it has no tiles
    assert np.allclose(ds.hardware_time_s.sel(path="device"), 2 * (8 * 20e-9 + 9 * 20e-9 + 100e-9))
    assert float(ds.energy_j.min()) > 0
    assert ds.attrs["modules"] == 4 + 2  # inject 4 x 1 tiles, out_proj 1 x 2
    assert ds.attrs["maps_on_tiles"] == "inject, blocks.0.out_proj"
    assert float(ds.fixed_point_error.min()) > 0  # the tiles' noise and errors reach the state


@pytest.mark.slow
def test_a_map_that_only_multiplies_zero_gets_no_tiles() -> None:
    profile = load_device("aoc48")
    tokens = word_problems(group("parity"), 2, 16, generator=3)[0]
    for name, lacking in (("parity-explicit1", {"blocks.0.in_proj"}), ("parity-explicit2", {"blocks.0.in_proj"}),
                          ("parity-implicit", set())):
        model = load_model(name)
        programs = fit_programs(model, profile, calibration_inputs(model, tokens), resolve(model, profile).placement)
        expected = {n for n in calibration_inputs(model, tokens) if not n.endswith("elementwise")} - lacking
        assert set(programs) == expected, name


@pytest.mark.parametrize(("placement", "message"), [
    ({"snr_kind": "device", "snr_db": 20}, "snr_kind = 'device' on an explicit SSM"),
    ({"ema_alpha": 0.2}, "ema_alpha = 0.2 on an explicit SSM: its one pass has no iterates"),
    ({"on_tiles": "in_proj"}, "on_tiles = 'in_proj' on an explicit SSM: its first block's input projection"),
])
def test_what_an_explicit_model_cannot_take_is_refused_before_any_fit(placement, message, data,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim.execute import map_fit

    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran before the refusal")

    monkeypatch.setattr(map_fit, "_fit_maps", no_fit)
    monkeypatch.setattr(map_fit, "FITS", map_fit.FITS.fresh())
    tokens, targets = data
    with pytest.raises(InputError, match=message):
        compare("parity-explicit1", "aoc48", tokens, targets, placement=placement)


def test_state_noise_reaches_an_explicit_model_token_by_token(data) -> None:
    # sequential mode commits each token's states, where snr_site 'states' draws; the one-pass
    # simultaneous form holds no states per token and would leave the noise out
    tokens, targets = data
    ds = compare("parity-explicit2", "aoc48", tokens, targets,
                 placement=dict(mode="sequential", on_tiles="none", snr_db=10, snr_site="states"))
    error = ds.fixed_point_error.isel(chip=0, seed=0)
    assert float(error[:, 0].max()) == 0.0  # the first token reads no committed state
    assert float(error[:, 1:].min()) > 1e-3


def _placed_in_docs() -> tuple[dict[str, list[str]], dict[str, int]]:
    """What docs/LANGUAGE.md says is on tiles: the maps it lists for `charlm-explicit1` and the optical
    modules it gives `charlm-explicit1` (the device table) and `charlm-explicit2`."""
    text = (Path(__file__).parents[2] / "docs" / "LANGUAGE.md").read_text()
    listed = text.split("Maps on tiles of `charlm-explicit1`:", 1)[1].split("Its `blocks.0.in_proj`", 1)[0]
    table = text.split("| optical modules |", 1)[1]
    row = re.search(r"^\| `charlm-explicit1` \|(.*)\|$", table, re.M).group(1).split("|")
    deeper = re.search(r"`charlm-explicit2` has [\d +\s]+=\s+(\d+)\s+modules", text).group(1)
    return {"charlm-explicit1": re.findall(r"`([\w.]+)`", listed)}, {"charlm-explicit1": int(row[3]),
                                                                     "charlm-explicit2": int(deeper)}


def test_the_docs_and_the_placement_agree_on_what_an_explicit_model_puts_on_tiles() -> None:
    # docs/LANGUAGE.md: weight-stationary, one module per tile, ceil(out / N) x ceil(in / N) per map; an
    # explicit model's first input projection reads RMSNorm(0) = 0 and is not placed, later ones are
    profile = load_device("aoc48")
    n = profile.channels
    listed, modules = _placed_in_docs()
    for name, count in modules.items():
        model = load_model(name)
        maps = linear_maps(model)
        placed = on_tiles(model, resolve(model, profile).placement)
        assert placed == listed.get(name, placed), name
        shapes = [tuple(maps[m].weight.shape) for m in placed]
        assert sum(math.ceil(o / n) * math.ceil(i / n) for o, i in shapes) == count, name
        tokens = torch.arange(24).remainder(model.config.vocab_size)[None]
        seen = calibration_inputs(model, tokens)
        for idle in set(maps) - set(placed):  # what is left off only ever multiplies zero
            assert float(seen[idle].abs().max()) == 0.0 and maps[idle].bias is None, (name, idle)
    tokens = torch.arange(9).remainder(load_model("charlm-explicit1").config.vocab_size)[None]
    ds = compare("charlm-explicit1", "aoc48", tokens[:, :8], tokens[:, 1:], seeds=[0], chips=[0])
    assert ds.attrs["modules"] == modules["charlm-explicit1"]
    assert ds.attrs["maps_on_tiles"] == ", ".join(listed["charlm-explicit1"])
