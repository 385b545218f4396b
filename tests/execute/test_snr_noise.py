"""Noise set by an SNR in dB and the EMA readout (aocsim/execute/snr.py, snr_mapping.py; docs/LANGUAGE.md,
"Noise set by an SNR"): x dB set gives x dB measured on the drawn noise, on the abstract model and, through
the mapping, on aoc48; noise off is the exact path; the EMA readout at alpha 1 is the last iterate and
divides iid noise's spread by sqrt(alpha / (2 - alpha)); same seed, same bits; one-line errors. The reference
convention (snr_convention 'elementwise', issue 42): per-element noise at the dB set, the first token noise-free,
the states committed from the EMA value, the stop test over the batch; 'rms' is today's numbers bit for bit."""

from __future__ import annotations

import math

import pytest
import torch

from aocsim.errors import InputError
from aocsim.execute import Placement
from aocsim.execute.token_keys import TokenKeys
from aocsim.execute.registry import place
from aocsim.execute.snr import EmaReadout, ReferenceSolve, SiteNoise, perturb, ratio
from aocsim.execute.ssm_device import plain_copy
from aocsim.execute.snr_mapping import device_snr_db
from aocsim.io.model_files import load_model

TOKENS = torch.randint(0, 2, (6, 16), generator=torch.Generator().manual_seed(0))
CALIBRATION = torch.randint(0, 2, (8, 16), generator=torch.Generator().manual_seed(1))
EXACT = {"rtol": 1e-5, "max_iter": 300}  # the float32 exact path's tolerance and cap (hybrid.EXACT_TOL)


@pytest.fixture(scope="module")
def model():
    return load_model("parity-implicit")


@pytest.fixture(autouse=True)
def one_thread():
    """Bit-for-bit comparisons on one torch thread, as compare's parts and `pytest -n 2`'s workers run: with
    more, a product's rounding follows the split of its reduction, which differs between the device path's
    batch shapes and the exact path's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    from aocsim.execute import snr_mapping

    monkeypatch.setattr(snr_mapping, "SEQUENCES", 4)  # 4 x 16 tokens: about 0.15 dB of sampling error
    for site, db in (("inputs", 20.0), ("states", 26.0)):  # (a coarser program: the noise's dB is what is tested)
        placed = place(model, "aoc48", {"snr_db": db, "snr_kind": "device", "snr_site": site, "max_iter": 10,
                                        "fit_probes": 96}, chip=0, calibration=CALIBRATION)
        multiplier, measured, own = placed.device_snr
        assert abs(measured - db) <= 0.25 and multiplier > 1.0 and own > db  # noisier than aoc48's own
        again = device_snr_db(model, placed.run_profile, placed.inner.calibration, placed.placement, CALIBRATION, site,
                              seed=7, programs=placed.inner.programs)
        assert abs(again - db) < 0.5, (site, again)


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
def test_the_mapping_measures_the_db_set_on_the_abstract_model(model, kind: str) -> None:
    """The device measurement (two draws of one step from the exact states) on noise whose dB is known:
    the abstract model's on the states reads the dB set."""
    placed = _abstract(model, snr_db=18.0, snr_site="states", snr_kind=kind, max_iter=8)
    measured = device_snr_db(model, placed.profile, placed.inner.calibration, placed.placement, CALIBRATION, "states")
    assert abs(measured - 18.0) < 0.5, measured


@pytest.mark.parametrize("options", [{}, {"snr_db": math.inf}, {"snr_db": "inf", "snr_kind": "multiplicative"},
                                     {"snr_db": math.inf, "snr_site": "states"}])
def test_noise_off_is_the_exact_path(model, options) -> None:
    placed = _abstract(model, **EXACT, **options)
    run, exact = placed.run(TOKENS, seed=1), placed.exact(model, TOKENS, placed.placement)
    # the exact path in whole batches, the placed run in passes of the rows still iterating: float32 rounding
    assert torch.equal(run.solve.iterations, exact.solve.iterations)
    torch.testing.assert_close(run.outputs, exact.outputs, rtol=0, atol=1e-5)
    torch.testing.assert_close(run.z, exact.z, rtol=0, atol=1e-5)


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
    from aocsim.execute import snr_mapping

    monkeypatch.setattr(snr_mapping, "SEQUENCES", 2)
    x = CALIBRATION[:2, :8]
    ds = compare(model, "aoc48", x, placement={"snr_db": 20.0, "snr_kind": "device", "max_iter": 4, "fit_probes": 96},
                 chips=(0, 1), calibration=CALIBRATION)
    base = json.loads(ds.attrs["device_json"])["noise"]["multiplier"]
    used = [json.loads(str(v))["noise.multiplier"] for v in ds.run_overrides.values]
    assert len(set(used)) == 2 and all(u > base for u in used)  # each chip its own measured multiplier
    plain = compare(model, "aoc48", x, placement={"max_iter": 4}, calibration=CALIBRATION)
    assert plain.run_overrides.values.tolist() == ["{}"]


# --- the reference convention (issue 42, deliver 1) ----------------------------------------------------------

ELEMENTWISE = {"snr_convention": "elementwise"}


def _record_draws(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Every draw of the run's `SiteNoise`: (x, the noise added, each row's token position)."""
    seen = []
    draw = SiteNoise._draw

    def record(self, x, samples, *coordinates):
        noisy = draw(self, x, samples, *coordinates)
        seen.append((x.double(), (noisy - x).double(), samples % self.token_keys.length))
        return noisy
    monkeypatch.setattr(SiteNoise, "_draw", record)
    return seen


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
@pytest.mark.parametrize("site, mode", [("inputs", "sequential"), ("inputs", "simultaneous"),
                                        ("states", "sequential")])
def test_elementwise_draws_each_element_at_the_db_set(model, monkeypatch: pytest.MonkeyPatch, kind: str, site: str,
                                                      mode: str) -> None:
    """Per element, the noise's std is |x_i| 10^(-SNR/20) (additive; multiplicative: |x_i x_i| 10^(-SNR/20), the
    reference's x + x |x| r e): pooled over the N >= 10^4 nonzero elements of tokens after the first, the
    measured dB, -10 log10 mean((e_i / scale_i)^2), has a sampling sd of 4.34 sqrt(2 / N) <= 0.06 dB, so 0.5 dB
    is 8 sd. The first token's elements draw nothing. (Measured: 0.07 dB above the dB set on the inputs, 0.005 dB on the states.)"""
    seen = _record_draws(monkeypatch)
    for db in (10.0, 30.0):
        seen.clear()
        _abstract(model, snr_db=db, snr_kind=kind, snr_site=site, mode=mode, max_iter=8, rtol=0.0,
                  **ELEMENTWISE).run(TOKENS, 3)  # rtol 0: every token makes its 9 passes
        rows = [(x, e, (t != 0)[:, None].expand_as(x)) for x, e, t in seen]
        x, e, later = (torch.cat([r[i].reshape(-1) for r in rows]) for i in range(3))
        assert e[~later].abs().max() == 0.0  # the first token noise-free
        scale = x.abs() if kind == "additive" else x.square()
        # finite: the multiplicative form is not scale-free, and at 10 dB parity-implicit's states grow until
        # they overflow (x + x |x| r e amplifies large values); the elements drawn before that are measured
        pooled = (e / scale)[later & (x != 0) & torch.isfinite(e)]
        measured = -10 * math.log10(float(pooled.square().mean()))
        assert pooled.numel() >= 10_000 and abs(measured - db) < 0.5, (db, measured, pooled.numel())


@pytest.mark.parametrize("site", ["inputs", "states"])
def test_elementwise_leaves_the_first_token_noise_free(model, site: str) -> None:
    """On the abstract model (every map digital: only the SNR noise acts) the first token is the exact path's,
    bit for bit; on the states the second too (the states the first commits are noise-free). 'rms' noises both."""
    noisy = {**EXACT, "snr_db": 10.0, "snr_site": site}
    placed = _abstract(model, **noisy, **ELEMENTWISE)
    run, exact = placed.run(TOKENS, seed=1), placed.exact(model, TOKENS, placed.placement)
    clean = 1 if site == "inputs" else 2
    assert torch.equal(run.outputs[:, :clean], exact.outputs[:, :clean]) and torch.equal(run.z[:, :clean],
                                                                                          exact.z[:, :clean])
    assert not torch.allclose(run.z[:, clean], exact.z[:, clean], rtol=0, atol=1e-4)  # the next token noisy
    rms = _abstract(model, **noisy).run(TOKENS, seed=1)
    assert not torch.allclose(rms.z[:, clean - 1], exact.z[:, clean - 1], rtol=0, atol=1e-4)


def test_elementwise_commits_the_states_from_the_ema_value(model, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ema_alpha the states each token commits are those of one map call at its EMA value m, and its z is
    f(m): recomputed digitally from m and the states the token saw (noise on the states, drawn after the
    commit, so that the call at m draws nothing), bit for bit."""
    commits = []
    commit = SiteNoise._states

    def record(self, caches, t):
        noisy = commit(self, caches, t)
        commits.append((caches, noisy))
        return noisy
    monkeypatch.setattr(SiteNoise, "_states", record)
    placed = _abstract(model, snr_db=15.0, snr_site="states", ema_alpha=0.3, max_iter=12, **ELEMENTWISE)
    run = placed.run(TOKENS, seed=5)
    solve = placed.parts[-1]
    assert isinstance(solve, ReferenceSolve) and len(commits) == TOKENS.shape[1]
    plain = plain_copy(model)
    u = plain.injection(TOKENS)
    before = [block.init_cache(TOKENS.shape[0], u) for block in plain.blocks]
    for t, (committed, noisy) in enumerate(commits):
        fz, after = plain.f_token(solve.read[:, t], u[:, t], before)
        assert all(torch.equal(a.conv, c.conv) and torch.equal(a.ssm, c.ssm) for a, c in zip(after, committed)), t
        assert torch.equal(run.z[:, t], fz), t
        before = noisy


def test_batch_convergence_stops_every_sequence_together(model) -> None:
    options = {"snr_db": 25.0, "rtol": 0.01, "max_iter": 40}
    batch = _abstract(model, **options, snr_convergence="batch").run(TOKENS, seed=6).solve
    assert (batch.iterations == batch.iterations[:1]).all() and (batch.rel_residual == batch.rel_residual[:1]).all()
    token = _abstract(model, **options).run(TOKENS, seed=6).solve
    assert not (token.iterations == token.iterations[:1]).all()  # each sequence stops at its own
    assert (batch.iterations >= token.iterations.min(0).values).all()


# Computed on main (91fbd86) before snr_convention existed: the sum of each run's outputs (seed 4). 1e-6: the
# rounding of another machine's kernels; on the machine they were computed on, the runs' outputs, z and
# iterations matched main's bit for bit (torch.equal). The draw itself is held to main's formulas bit for bit
# below (a change in their last bits moves these sums by less than 1e-7).
MAIN = [({"snr_db": 15.0, "max_iter": 12}, 18.0423800945282),
        ({"snr_db": 12.0, "snr_kind": "multiplicative", "snr_site": "states", "ema_alpha": 0.5, "max_iter": 8},
         17.686091661453247),
        ({"snr_db": 15.0, "mode": "simultaneous", "max_iter": 12}, 20.318406254053116)]


@pytest.mark.parametrize("options, main", MAIN)
def test_rms_is_todays_convention_bit_for_bit(model, options, main: float) -> None:
    plain = _abstract(model, **options).run(TOKENS, seed=4)
    named = _abstract(model, **options, snr_convention="rms", snr_convergence="token").run(TOKENS, seed=4)
    assert torch.equal(plain.outputs, named.outputs) and torch.equal(plain.z, named.z)
    assert torch.equal(plain.solve.iterations, named.solve.iterations)
    assert float(plain.outputs.detach().double().sum()) == pytest.approx(main, rel=1e-6)
    other = _abstract(model, **options, **ELEMENTWISE).run(TOKENS, seed=4)
    assert not torch.equal(plain.outputs, other.outputs)


def test_rms_draws_with_mains_formulas_bit_for_bit() -> None:
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(3)) * torch.linspace(0.01, 4.0, 32)
    n = torch.randn(64, 32, generator=torch.Generator().manual_seed(4))
    r = ratio(13.0)
    main = {"additive": x + x.square().mean(-1, keepdim=True).sqrt() * (r * n), "multiplicative": x + x * (r * n)}
    for kind, expected in main.items():
        assert torch.equal(perturb(x, n, 13.0, kind), expected) and torch.equal(perturb(x, n, 13.0, kind, "rms"),
                                                                                 expected)


def test_the_reference_conventions_rules_are_one_line_errors(model) -> None:
    for options, words in (
            ({"snr_convention": "elementwise", "ema_alpha": 0.2, "mode": "simultaneous"},
             "snr_convention = 'elementwise' with ema_alpha and mode = 'simultaneous'"),
            ({"snr_convergence": "batch", "mode": "simultaneous"}, "snr_convergence = 'batch' with mode"),
            ({"snr_convention": "elementwise", "snr_db": 10.0, "snr_kind": "device", "on_tiles": "in_proj"},
             "snr_convention = 'elementwise' with snr_kind = 'device'")):
        with pytest.raises(InputError, match=words) as error:
            Placement(**options).resolved("hybrid SSM")
        assert "\n" not in str(error.value)
    for options in ({"snr_convention": "norm"}, {"snr_convergence": "never"}):
        with pytest.raises(InputError, match=f"^{next(iter(options))} = "):
            Placement(**options)


def test_state_noise_beside_input_noise_is_two_sites_each_at_its_own_db(model) -> None:
    """snr_states_db (the reference grid's state noise against its input noise): alone it is snr_db on the
    states, bit for bit (the same keyed draws); beside snr_db on the inputs each site draws at its own dB, and
    the run differs from either alone. Fails if the second site is dropped, keyed apart or given snr_db's dB."""
    options = {"snr_kind": "additive", "max_iter": 8, "mode": "sequential"}
    alone = _abstract(model, snr_states_db=15.0, **options).run(TOKENS, seed=4)
    as_site = _abstract(model, snr_db=15.0, snr_site="states", **options).run(TOKENS, seed=4)
    assert torch.equal(alone.outputs, as_site.outputs) and torch.equal(alone.z, as_site.z)
    both = _abstract(model, snr_db=25.0, snr_states_db=15.0, **options)
    run = both.run(TOKENS, seed=4)
    inputs, states = both.parts[0], both.parts[1]
    assert (inputs.site, states.site) == ("inputs", "states")
    assert abs(inputs.measured_db - 25.0) < 0.5 and abs(states.measured_db - 15.0) < 0.5
    only_inputs = _abstract(model, snr_db=25.0, **options).run(TOKENS, seed=4)
    assert not torch.equal(run.z, alone.z) and not torch.equal(run.z, only_inputs.z)
    with pytest.raises(InputError, match="snr_states_db with snr_kind = 'additive' and snr_site = 'states'"):
        _abstract(model, snr_db=10.0, snr_site="states", snr_states_db=20.0)
    with pytest.raises(InputError, match="snr_states_db with mode = 'simultaneous'"):
        _abstract(model, snr_states_db=20.0, mode="simultaneous")
