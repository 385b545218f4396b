"""How much a chip's calibration does (the `fit_probes` and `fit_rounds` placement options,
aocsim/execute/tile_program.py): the declared defaults when unset, more rounds never keep a worse program,
fewer probes measure the matrix less exactly (as 1 / sqrt(probes)), a fit that cannot measure its matrix is
refused (by every kind that fits maps, and by a sweep before its first point), and the Dataset says what a
run's calibration did."""

from __future__ import annotations

import pytest
import torch

from aocsim import DEQ, DEQConfig, compare, load_model
from aocsim.errors import InputError
from aocsim.execute import map_fit
from aocsim.execute.map_fit import fit_key, fit_map, on_tiles
from aocsim.execute.option_groups import FIT_PROBES, FIT_ROUNDS, TileOptions
from aocsim.execute.placement import Placement
from aocsim.execute.registry import resolve
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
        return measure([DEVICE], W[None], live, probe=keys.as_key(probe), probes=probes, **options)[0][0]

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


def test_every_kind_that_fits_maps_is_refused_too_few_probes_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """`registry.resolve` checks fit_probes against the maps a kind fits (`PlacedModel.fitted_maps`): the
    hybrid SSM's and the hybrid Mamba2's maps on tiles (a5-implicit's widest, out_proj, takes 128 inputs) and a
    tiled DEQ's beta W."""
    monkeypatch.setattr(map_fit, "_fit_maps", lambda *a: pytest.fail("fitted before the check"))
    device = load_device("aoc48")
    a5 = load_model("a5-implicit")
    with pytest.raises(InputError, match=r"fit_probes = 128; expected more than the inputs of the map W \[64, 128\]"):
        resolve(a5, device, {"fit_probes": 128, "on_tiles": "in_proj,out_proj"})
    assert resolve(a5, device, {"fit_probes": 129, "on_tiles": "in_proj,out_proj"}).cls.kind == "hybrid SSM"
    assert resolve(a5, device, {"fit_probes": 129, "on_tiles": "in_proj"}).cls.kind == "hybrid SSM"  # 64 wide
    with pytest.raises(InputError, match=r"fit_probes = 64; expected more than the inputs of the map W \[296, 64\]"):
        resolve(load_model("s5-mamba2"), device, {"fit_probes": 64})  # a hybrid Mamba2's first map
    big = DEQ(DEQConfig(96, 64, 10, split=48), generator=torch.Generator().manual_seed(5))
    with pytest.raises(InputError, match=r"fit_probes = 96; expected more than the inputs of the map W \[96, 96\]"):
        resolve(big, device, {"fit_probes": 96})
    assert resolve(big, device, {"fit_probes": 97}).cls.kind == "tiled DEQ"


@pytest.mark.parametrize("shape", ["grid", "search"])
def test_a_sweep_refuses_too_few_probes_before_any_point_runs(shape: str, tmp_path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """A grid's point with too few probes, or a search whose fit_probes range reaches below a map's inputs, is
    refused when the sweep starts (naming the placement), not when its point comes up: nothing has run and
    the sweep's folder is not made."""
    from aocsim.experiments.sweep import parse_spec, sweep
    from aocsim.experiments.sweep import run as sweep_run

    spec = {"model": "parity-implicit", "device": "aoc48", "data": {"sequences": 2, "length_factor": 1},
            "seeds": 1, "chips": 1, "metrics": ["accuracy", "energy_per_inference_j"]}
    if shape == "grid":
        spec["axes"] = {"slm.bits": [6, 8], "placement.fit_probes": [2048, 30]}
    else:
        spec["space"] = {"slm.bits": {"int": [4, 9]}, "placement.fit_probes": {"int": [16, 4096]}}
        spec["search"] = {"objectives": {"accuracy": "max", "energy_j": "min"}, "budget": 4, "batch": 2, "seed": 0}
    monkeypatch.setattr(sweep_run, "run_population", lambda *a, **k: pytest.fail("a point ran before the check"))
    low = 30 if shape == "grid" else 16
    with pytest.raises(InputError, match=rf"^at placement.fit_probes = {low}: fit_probes = {low}; expected more than the "
                                         r"inputs of the map W \[148, 32\]") as err:
        sweep(parse_spec(spec), tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
