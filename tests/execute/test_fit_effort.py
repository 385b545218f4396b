"""How much a chip's calibration does (the `fit_probes` and `fit_rounds` placement options,
aocsim/execute/tile_program.py): the declared defaults when unset, more rounds never keep a worse program,
fewer probes measure the matrix less exactly (as 1 / sqrt(probes)), a fit that cannot measure its matrix is
refused, and the Dataset says what a run's calibration did."""

from __future__ import annotations

import pytest
import torch

from aocsim import compare
from aocsim.errors import InputError
from aocsim.execute import map_fit
from aocsim.execute.map_fit import fit_key, fit_map, on_tiles
from aocsim.execute.option_groups import FIT_PROBES, FIT_ROUNDS, TileOptions
from aocsim.execute.placement import Placement
from aocsim.execute.tile_program import measure
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems

DEVICE = load_device("aoc48-twin")
W = torch.randn(40, 30, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.1
X = torch.rand(64, 30, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1


def fit(**options):
    return fit_map(DEVICE, W, X, key=fit_key(DEVICE), tile=TileOptions(**options))


def test_unset_the_fit_takes_the_declared_probes_and_rounds_and_set_it_takes_those_given() -> None:
    assert (on_tiles(TileOptions()).fit_probes, on_tiles(TileOptions()).fit_rounds) == (FIT_PROBES, FIT_ROUNDS)
    assert not torch.equal(fit(fit_probes=FIT_PROBES // 2).weight, fit().weight)


def test_more_rounds_never_keep_a_worse_program() -> None:
    """A round's loads and probes are keyed by its number, so a fit of more rounds repeats the first ones
    and keeps the best program measured: its error is at most that of fewer rounds, and the closed loop
    corrects most of what the separable gains leave."""
    errors = [fit(fit_probes=512, fit_rounds=r).error for r in (0, 2, 6)]
    assert errors[2] <= errors[1] <= errors[0]
    assert errors[2] < 0.5 * errors[0], errors


def test_fewer_probes_measure_the_matrix_as_one_over_the_root_of_their_count() -> None:
    """The effective matrix measured on p probes deviates from one measured on many (another probe key) by
    noise whose size falls as 1 / sqrt(p): 16x the probes, 4x less (tolerance for the estimate's own spread
    over 40 x 30 entries, and the reference's)."""
    live = torch.ones(30, dtype=torch.bool)
    options = dict(tile_size=48, input_range=0.2, load=keys.as_key(5), partial_sums="analog")

    def matrix(probes: int, probe: int) -> torch.Tensor:
        return measure(DEVICE, W, live, probe=keys.as_key(probe), probes=probes, **options)[0]

    reference = matrix(16384, 1)
    coarse, fine = ((matrix(p, 2) - reference).norm() for p in (256, 4096))
    assert 2.5 < float(coarse / fine) < 6.5, float(coarse / fine)


def test_a_fit_that_cannot_measure_its_matrix_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"fit_probes = 30; expected more than the inputs of the map W \[40, 30\]"):
        fit(fit_probes=30)
    wide = torch.randn(40, 100, dtype=torch.float64)  # a model's second map, too wide for 64 probes
    maps = [(W, X, fit_key(DEVICE)), (wide, torch.rand(8, 100, dtype=torch.float64), fit_key(DEVICE, 1))]
    monkeypatch.setattr(map_fit, "_fit_maps", lambda *a: pytest.fail("fitted before the check"))
    with pytest.raises(InputError, match=r"fit_probes = 64; expected more than the inputs of the map W \[40, 100\]"):
        map_fit.fit_maps(DEVICE, maps, TileOptions(fit_probes=64))  # every map checked before any is fitted
    with pytest.raises(InputError, match="fit_probes"):
        Placement(fit_probes=0)
    with pytest.raises(InputError, match="fit_rounds"):
        Placement(fit_rounds=-1)


def test_the_dataset_says_what_the_calibration_did() -> None:
    tokens, targets = word_problems(group("parity"), 4, 16, identity_prob=0.5, generator=8)
    ds = compare("parity-implicit", "aoc48", tokens, targets, seeds=(0,), chips=(0,),
                 placement={"fit_probes": 128, "fit_rounds": 2})
    assert ds.attrs["placement.fit_probes"] == 128 and ds.attrs["placement.fit_rounds"] == 2
    assert "tile programs calibrated on 128 probes x 2 rounds" in ds.attrs["placement"]
