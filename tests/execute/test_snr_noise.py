"""Noise set by an SNR in dB and the EMA readout (aocsim/execute/snr.py, snr_mapping.py; docs/LANGUAGE.md,
"Noise set by an SNR"): x dB set gives x dB measured on the drawn noise, on the abstract model and, through
the mapping, on aoc48; noise off is the exact path; the EMA readout at alpha 1 is the last iterate and
divides iid noise's spread by sqrt(alpha / (2 - alpha)); same seed, same bits; one-line errors."""

from __future__ import annotations

import math

import pytest
import torch

from aocsim.errors import InputError
from aocsim.execute import Placement
from aocsim.execute.token_keys import TokenKeys
from aocsim.execute.registry import place
from aocsim.execute.snr import EmaReadout, perturb, ratio
from aocsim.execute.snr_mapping import device_snr_db
from aocsim.io.model_files import load_model

TOKENS = torch.randint(0, 2, (6, 16), generator=torch.Generator().manual_seed(0))
CALIBRATION = torch.randint(0, 2, (8, 16), generator=torch.Generator().manual_seed(1))
EXACT = {"rtol": 1e-5, "max_iter": 300}  # the float32 exact path's tolerance and cap (hybrid.EXACT_TOL)


@pytest.fixture(scope="module")
def model():
    return load_model("parity-implicit")


def _abstract(model, **options):
    """The abstract noise model: every map digital, noise drawn at its site."""
    return place(model, "ideal", {"on_tiles": "none", **options}, chip=0, calibration=CALIBRATION)


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
@pytest.mark.parametrize("site, mode", [("inputs", "sequential"), ("inputs", "simultaneous"),
                                        ("states", "sequential")])
def test_set_db_is_the_db_drawn_on_the_abstract_model(model, kind: str, site: str, mode: str) -> None:
    for db in (10.0, 30.0):
        placed = _abstract(model, snr_db=db, snr_kind=kind, snr_site=site, mode=mode, max_iter=8)
        placed.run(TOKENS, seed=3)
        noise = placed.parts[0]
        assert noise.noise > 0 and abs(noise.measured_db - db) < 0.5, (db, noise.measured_db)


def test_perturb_draws_the_set_power_ratio() -> None:
    x = torch.randn(4000, 64, dtype=torch.float64) * torch.linspace(0.1, 3.0, 64, dtype=torch.float64)
    n = torch.randn(4000, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for kind in ("additive", "multiplicative"):
        drawn = perturb(x, n, 17.0, kind) - x
        assert abs(10 * math.log10(x.square().sum() / drawn.square().sum()) - 17.0) < 0.1
    assert ratio(20.0) == pytest.approx(0.1) and ratio(math.inf) == 0.0


@pytest.mark.slow
def test_set_db_is_the_db_measured_on_aoc48_through_the_mapping(model, monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile's own noise scaled to x dB at the site (once per chip) measures x dB again with
    another weight load and other draws."""
    from aocsim.execute import snr_mapping, tile_program

    monkeypatch.setattr(tile_program, "PROBES", 64)  # a coarser program: the noise's dB is what is tested
    monkeypatch.setattr(snr_mapping, "SEQUENCES", 4)  # 4 x 16 tokens: about 0.15 dB of sampling error
    for site, db in (("inputs", 20.0), ("states", 26.0)):
        placed = place(model, "aoc48", {"snr_db": db, "snr_kind": "device", "snr_site": site, "max_iter": 10},
                       chip=0, calibration=CALIBRATION)
        multiplier, measured, own = placed.device_snr
        assert abs(measured - db) <= 0.25 and multiplier > 1.0 and own > db  # noisier than aoc48's own
        again = device_snr_db(model, placed.run_profile, placed.calibration, placed.placement, CALIBRATION, site,
                              seed=7, programs=placed.programs)
        assert abs(again - db) < 0.5, (site, again)


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
def test_the_mapping_measures_the_db_set_on_the_abstract_model(model, kind: str) -> None:
    """The device measurement (two draws of one step from the exact states) on noise whose dB is known:
    the abstract model's on the states reads the dB set."""
    placed = _abstract(model, snr_db=18.0, snr_site="states", snr_kind=kind, max_iter=8)
    measured = device_snr_db(model, placed.profile, placed.calibration, placed.placement, CALIBRATION, "states")
    assert abs(measured - 18.0) < 0.5, measured


@pytest.mark.parametrize("options", [{}, {"snr_db": math.inf}, {"snr_db": "inf", "snr_kind": "multiplicative"},
                                     {"snr_db": math.inf, "snr_site": "states"}])
def test_noise_off_is_the_exact_path(model, options) -> None:
    placed = _abstract(model, **EXACT, **options)
    run, exact = placed.run(TOKENS, seed=1), placed.exact(model, TOKENS, placed.placement)
    assert torch.equal(run.outputs, exact.outputs) and torch.equal(run.z, exact.z)


@pytest.mark.parametrize("mode", ["sequential", "simultaneous"])
def test_ema_at_alpha_1_is_the_last_iterate(model, mode: str) -> None:
    noisy = {"snr_db": 15.0, "mode": mode, "max_iter": 12}
    plain = _abstract(model, **noisy).run(TOKENS, seed=4)
    read = _abstract(model, **noisy, ema_alpha=1.0).run(TOKENS, seed=4)
    assert torch.equal(plain.outputs, read.outputs) and torch.equal(plain.z, read.z)
    lower = _abstract(model, **noisy, ema_alpha=0.2).run(TOKENS, seed=4)
    assert not torch.equal(plain.z, lower.z)


@pytest.mark.parametrize("alpha", [0.1, 0.2, 0.5])
def test_ema_divides_the_spread_of_iid_iterates(alpha: float) -> None:
    """Iterates z* + e_k, e_k iid: the read state's spread is sqrt(alpha / (2 - alpha)) of e's once
    the start has faded ((1 - alpha)^(2K) small), within the sampling error of 4000 x 8 values."""
    b, d, k = 4000, 8, 200
    gen = torch.Generator().manual_seed(5)
    readout = EmaReadout(alpha)
    readout.token_keys = TokenKeys(torch.arange(b), 1)
    readout.token_keys.announce(torch.tensor([0]), 0)
    center = torch.full((b, d), 2.0, dtype=torch.float64)
    for _ in range(k):
        readout._see(None, (center + torch.randn(b, d, dtype=torch.float64, generator=gen),))
    spread = float((readout.z(center[:, None]) - 2.0).std())
    expected = math.sqrt(alpha / (2 - alpha))
    assert abs(spread / expected - 1) < 4 * math.sqrt(1 / (2 * b * d)) + 0.01, (spread, expected)


def test_ema_narrows_the_read_state_of_a_noisy_model(model) -> None:
    """On the model the iterates' noise is correlated through the map, so the factor is not the iid one;
    the read state's distance from the exact fixed point still falls."""
    exact = _abstract(model, **EXACT).exact(model, TOKENS, Placement(mode="sequential", on_tiles=()))
    def error(**options) -> float:
        run = _abstract(model, snr_db=10.0, max_iter=30, rtol=0.0, **options).run(TOKENS, seed=2)
        return float((run.z - exact.z).square().mean().sqrt())
    assert error(ema_alpha=0.2) < 0.9 * error()  # measured: 0.81


def test_same_seed_same_bits_and_a_sequence_draws_the_same_alone(model) -> None:
    options = {"snr_db": 12.0, "snr_kind": "multiplicative", "snr_site": "states", "ema_alpha": 0.5, "max_iter": 8}
    placed = _abstract(model, **options)
    a, b, c = placed.run(TOKENS, seed=9), placed.run(TOKENS, seed=9), placed.run(TOKENS, seed=10)
    assert torch.equal(a.outputs, b.outputs) and not torch.equal(a.outputs, c.outputs)
    alone = placed.run(TOKENS[2:3], seed=9, samples=torch.tensor([2]))
    assert torch.allclose(alone.z, a.z[2:3], rtol=0, atol=1e-6)


@pytest.mark.parametrize("options, words", [
    ({"snr_db": "loud"}, "snr_db = 'loud'"),
    ({"snr_db": float("nan")}, "snr_db = nan"),
    ({"snr_site": "cache"}, "snr_site = 'cache'"),
    ({"snr_kind": "pink"}, "snr_kind = 'pink'"),
    ({"ema_alpha": 0.0}, "ema_alpha = 0.0"),
    ({"ema_alpha": 1.5}, "ema_alpha = 1.5"),
])
def test_bad_values_are_one_line_errors_naming_the_option(options, words: str) -> None:
    with pytest.raises(InputError) as error:
        Placement(**options)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_states_need_sequential_mode_and_device_noise_needs_tiles(model) -> None:
    with pytest.raises(InputError, match="snr_site = 'states' with mode = 'simultaneous'"):
        _abstract(model, snr_db=10.0, snr_site="states", mode="simultaneous")
    with pytest.raises(InputError, match="snr_kind = 'device' with on_tiles = 'none'"):
        _abstract(model, snr_db=10.0, snr_kind="device")
    with pytest.raises(InputError, match="snr_db = 10.0 applies to hybrid SSMs"):
        place(load_model("digits-deq48"), "aoc48", {"snr_db": 10.0})


def test_the_abstract_model_runs_on_a_profile_of_any_size_at_no_cost(tmp_path) -> None:
    """With every map digital nothing is powered: no channel count is needed to price the run (0 J)."""
    from click.testing import CliRunner

    from aocsim import compare
    from aocsim.cli import main

    ds = compare("parity-implicit", "ideal", TOKENS, placement={"on_tiles": "none", "snr_db": 20, "max_iter": 8})
    assert float(abs(ds.energy_j).max()) == 0.0 and float(ds.hardware_time_s.sel(path="device").max()) == 0.0
    out = CliRunner().invoke(main, ["compare", "parity-implicit", "--device", "ideal", "--on-tiles", "none",
                                    "--snr-db", "20", "--chips", "1", "--seeds", "1", "--sequences", "2",
                                    "--out", str(tmp_path / "r.nc")])
    assert out.exit_code == 0, out.output
    assert "machine            none: every map digital" in out.output


@pytest.mark.slow
def test_the_dataset_records_the_profile_each_chips_runs_used(model, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40, deliver 3: noise set in dB on the device's own noise runs each chip on a scaled
    noise.multiplier; the Dataset records it per chip beside the base profile (it recorded only the base)."""
    import json

    from aocsim import compare
    from aocsim.execute import snr_mapping, tile_program

    monkeypatch.setattr(tile_program, "PROBES", 64)
    monkeypatch.setattr(snr_mapping, "SEQUENCES", 2)
    x = CALIBRATION[:2, :8]
    ds = compare(model, "aoc48", x, placement={"snr_db": 20.0, "snr_kind": "device", "max_iter": 4},
                 chips=(0, 1), calibration=CALIBRATION)
    base = json.loads(ds.attrs["device_json"])["noise"]["multiplier"]
    used = [json.loads(str(v))["noise.multiplier"] for v in ds.run_overrides.values]
    assert len(set(used)) == 2 and all(u > base for u in used)  # each chip its own measured multiplier
    plain = compare(model, "aoc48", x, placement={"max_iter": 4}, calibration=CALIBRATION)
    assert plain.run_overrides.values.tolist() == ["{}"]
