"""Multi-fidelity searches (aocsim/experiments/sweep/fidelity.py, docs/SWEEPS.md section 6): the block is
checked, every trial's fidelity is recorded, a screen is the first samples of its full run, promoted trials
are the full runs of their design points, the front holds whole-workload trials only, a resumed search is
its uninterrupted twin."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.sweep import parse_spec, sweep
from aocsim.experiments.sweep.fidelity import crowding, ranking, screen_key
from aocsim.experiments.sweep.search import STUDY_FILE, VIOLATION, mark_front, open_study, trial_point
from aocsim.experiments.sweep.spec import Point, noise_seed, point_key
from aocsim.experiments.sweep.store import SweepStore

SPACE = {"slm.bits": {"int": [2, 6]}, "noise.power_per_unit_w": {"log": [1.0e-7, 1.0e-5]}}
PLAIN = {"model": "digits-deq48", "device": "aoc48", "data": {"samples": 40}, "seeds": [51], "chips": [52],
         "search": {"objectives": {"agreement": "max", "energy_j": "min"}, "constraints": {"agreement": ">= 0.97"},
                    "budget": 4, "batch": 2, "sampler": "nsga2", "seed": 3},
         "space": SPACE, "metrics": ["agreement", "energy_j", "iterations"]}
SCREENED = {**PLAIN, "search": {**PLAIN["search"], "fidelity": {"screen": 0.25, "promote": 0.5}}}  # 10 of 40


@pytest.fixture(scope="module")
def screened(tmp_path_factory) -> xr.Dataset:
    """SCREENED run on one worker: 2 rounds of 2 trials, 1 promoted in each."""
    return sweep(parse_spec(SCREENED), tmp_path_factory.mktemp("fidelity") / "run", workers=1)


def _means(ds: xr.Dataset, metric: str) -> np.ndarray:
    return ds[metric].mean([d for d in ds[metric].dims if d != "trial"]).values


BAD = [
    ({"screen": 0}, "search.fidelity.screen = 0; expected a fraction in (0, 1)"),
    ({"screen": 1.0}, "search.fidelity.screen = 1.0; expected a fraction in (0, 1)"),
    ({"screen": "a quarter"}, "search.fidelity.screen = 'a quarter'; expected a fraction in (0, 1)"),
    ({"promote": -0.5}, "search.fidelity.promote = -0.5; expected a fraction in (0, 1)"),
    ({"promote": 0.75}, "search.fidelity.promote = 0.75 promotes every trial of a round of search.batch = 2; "
                        "expected a fraction at most 0.5"),
    ({"rungs": 2}, "search.fidelity.rungs is not a fidelity setting; expected screen, promote and optionally chips"),
    ({"chips": 0}, "search.fidelity.chips = 0; expected an integer >= 1"),
    ({"chips": 1.5}, "search.fidelity.chips = 1.5; expected an integer >= 1"),
    ({"chips": 1}, "search.fidelity.chips = 1 with chips = [52]: a screen on fewer chips needs a spec of 2 or more "
                   "chips"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_fidelity_blocks_are_one_line_errors_naming_the_field(change: dict, message: str) -> None:
    block = {**SCREENED["search"]["fidelity"], **change}
    with pytest.raises(InputError) as err:
        parse_spec({**SCREENED, "search": {**SCREENED["search"], "fidelity": block}}, check=False)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_screen_on_fewer_chips_needs_fewer_chips_than_the_spec_has() -> None:
    block = {"screen": 0.25, "promote": 0.5, "chips": 2}
    with pytest.raises(InputError, match=re.escape("search.fidelity.chips = 2; expected fewer than the spec's 2 chips "
                                                   "([52, 53])")):
        parse_spec({**SCREENED, "chips": [52, 53], "search": {**SCREENED["search"], "fidelity": block}}, check=False)
    with pytest.raises(InputError, match=re.escape("search.fidelity = {'screen': 0.25}; expected {screen: FRACTION, "
                                                   "promote: FRACTION}")):
        parse_spec({**SCREENED, "search": {**SCREENED["search"], "fidelity": {"screen": 0.25}}}, check=False)


def test_a_screen_must_leave_part_of_the_workload_and_a_round_must_have_a_trial_to_screen_out(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape("search.batch = 1 with search.fidelity")):
        parse_spec({**SCREENED, "search": {**SCREENED["search"], "batch": 1, "sampler": "tpe"}}, check=False)
    with pytest.raises(InputError, match=re.escape("search.fidelity.screen = 0.25 of a workload of 1 samples screens "
                                                   "all of them")):
        sweep(parse_spec({**SCREENED, "data": {"samples": 1}}), tmp_path / "never")
    assert not (tmp_path / "never").exists()  # refused before any work


def test_every_trial_records_its_fidelity_and_the_samples_compare_scored(screened: xr.Dataset) -> None:
    fidelity, samples = screened.fidelity.values, screened.samples.values
    assert screened.sizes["trial"] == 4 and set(fidelity.tolist()) == {0.25, 1.0}
    np.testing.assert_array_equal(samples, np.where(fidelity < 1, 10, 40))  # the first 10 of 40 test images
    for start in (0, 2):  # each round of 2: one promoted to the whole workload, one screened only
        assert sorted(fidelity[start:start + 2].tolist()) == [0.25, 1.0]
    assert "fidelity" in screened.attrs["search"] and screened.fidelity.attrs["units"] == "1"


def test_screens_are_the_first_samples_of_the_full_run_and_promoted_trials_are_the_full_runs(
        screened: xr.Dataset, tmp_path: Path) -> None:
    """A promoted trial's metrics are its design point run as a search without fidelity runs it; a screened
    trial's are that full run's first 10 samples (the same noise seeds, keyed by sample index)."""
    from aocsim.experiments.compare import compare
    from aocsim.experiments.sweep.run import _model, point_workload, run_point
    from aocsim.hardware.profiles.profile import load_device

    plain, base = parse_spec(PLAIN), load_device("aoc48")
    model = _model("digits-deq48")
    w = point_workload(model, PLAIN["data"])
    for i in range(screened.sizes["trial"]):
        settings = {p: screened[p].values[i].item() for p in SPACE}
        key = point_key(plain, "digits-deq48", settings)
        if screened.fidelity.values[i] == 1.0:
            full = run_point(plain, base, Point("digits-deq48", settings, (0, i), key))
            for m in ("agreement", "energy_per_inference_j", "iterations"):
                assert _means(screened, m)[i] == full[m].mean().item(), (i, m)
            continue
        seed = noise_seed(plain.root_seed, key, 51)
        ds = compare(model, load_device("aoc48").with_overrides({"noise.power_per_unit_w": settings[
            "noise.power_per_unit_w"], "slm.bits": settings["slm.bits"]}), w.inputs, w.targets, seeds=[seed],
            chips=[52], calibration=w.calibration)
        assert ds.sizes["sample"] == 40
        first = ds.isel(sample=slice(0, 10))
        assert _means(screened, "agreement")[i] == pytest.approx(float(first.agreement.mean()), abs=1e-12)
        device_iterations = first.iterations.sel(path="device") if "path" in first.iterations.dims else first.iterations
        assert _means(screened, "iterations")[i] == pytest.approx(float(device_iterations.mean()), rel=1e-12)


def test_the_front_and_its_volume_are_made_of_full_fidelity_trials_only(screened: xr.Dataset, tmp_path: Path) -> None:
    from aocsim.experiments.sweep.plots import plot_front
    from aocsim.experiments.sweep.search import against
    from aocsim.experiments.sweep.table import front_table

    search = parse_spec(SCREENED, check=False).search
    assert screened.pareto.any() and (screened.fidelity.values[screened.pareto.values] == 1.0).all()
    # a screened trial that would dominate every trial, put there by hand: still off the front, the volume unchanged
    i = int(np.flatnonzero(screened.fidelity.values < 1)[0])
    forged = screened.copy(deep=True)
    forged["agreement"][{"trial": i}] = 1.0
    forged["energy_per_inference_j"][{"trial": i}] = 1e-12
    marked = mark_front(forged.drop_vars(["pareto", "feasible", "repeat_of"]), search)
    assert bool(marked.feasible[i]) and not bool(marked.pareto[i])
    np.testing.assert_array_equal(marked.pareto.values, screened.pareto.values)
    assert marked.attrs["hypervolume"] == screened.attrs["hypervolume"]
    assert not against(forged, forged)["front"][0][i]
    assert "2 screened only (25% of the workload), 2 on the whole workload" in front_table(screened)
    assert plot_front(screened, tmp_path / "front.png").stat().st_size > 10_000  # screened trials hollow


def test_promotion_ranks_by_non_dominated_front_then_crowding_and_feasible_first() -> None:
    values = np.array([[0.9, 3.0], [1.0, 1.0], [0.95, 2.0], [1.0, 0.5], [0.99, 1.5], [1.0, 9.0]])
    violation = np.array([[-1.0], [-1.0], [-1.0], [0.5], [-1.0], [-1.0]])  # trial 3 is infeasible
    # fronts of the feasible: {1}, {4, 5} (both extremes: by index), {2}, {0}; the infeasible 3 last, whatever its values
    assert ranking(values, violation, ["max", "min"]).tolist() == [1, 4, 5, 2, 0, 3]
    np.testing.assert_allclose(crowding(np.array([[0.0, 4.0], [1.0, 2.0], [3.0, 1.0], [4.0, 0.0]])),
                               [np.inf, 1.5, 1.25, np.inf])
    # within a front, the less crowded first: the front of those four, maximising both negated costs
    front = -np.array([[0.0, 4.0], [1.0, 2.0], [3.0, 1.0], [4.0, 0.0]])
    assert ranking(front, np.full((4, 1), -1.0), ["max", "max"]).tolist() == [0, 3, 1, 2]


def test_a_search_killed_within_a_rounds_tells_promotes_the_same_trials_when_resumed(screened: xr.Dataset,
                                                                                    tmp_path: Path) -> None:
    """Killed after the last round's first tell: the resumed round ranks the screens of all its trials, the
    told one too, promotes the same trial and ends with the uninterrupted Dataset."""
    out = tmp_path / "cut"
    spec = parse_spec(SCREENED)
    sweep(spec, out, workers=1)
    journal = out / STUDY_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    ops = [int(re.search(rb'"op_code": ?(\d+)', line).group(1)) for line in lines]
    last_ask = max(i for i, op in enumerate(ops) if op == 4)  # create trial
    first_tell = next(i for i in range(last_ask, len(ops)) if ops[i] == 6)  # a trial's state and values
    journal.write_bytes(b"".join(lines[: first_tell + 1]))
    (out / "results.nc").unlink()
    states = [t.state.name for t in open_study(SweepStore(out), spec.search).get_trials()]
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "RUNNING"]
    for t in open_study(SweepStore(out), spec.search).get_trials()[2:]:  # both screens kept and read again
        assert (out / "points" / f"{screen_key(trial_point(spec, t).key, 0.25)}.nc").is_file()
    xr.testing.assert_identical(screened, sweep(spec, out, workers=1, resume=True))


@pytest.mark.slow
def test_a_screen_on_the_first_chip_runs_only_it_and_promoted_trials_run_every_chip(tmp_path: Path) -> None:
    """search.fidelity.chips = 1 of chips [52, 53]: a screened trial's file holds chip 52 alone (results.nc: NaN
    on 53, `chips` 1), its first samples as `compare` gives them on that chip; a promoted trial runs both."""
    from aocsim.experiments.compare import compare
    from aocsim.experiments.sweep.run import _model, point_workload
    from aocsim.experiments.sweep.table import front_table
    from aocsim.hardware.profiles.profile import load_device

    raw = {**SCREENED, "chips": [52, 53], "search": {**SCREENED["search"], "budget": 2,
                                                     "fidelity": {"screen": 0.25, "promote": 0.5, "chips": 1}}}
    ds = sweep(parse_spec(raw), tmp_path / "run", workers=1)
    screened = ds.fidelity.values < 1
    assert screened.tolist().count(True) == 1 and ds.chips.values.tolist() == [1 if s else 2 for s in screened]
    i = int(np.flatnonzero(screened)[0])
    agreement = ds.agreement.isel(trial=i)
    assert np.isnan(agreement.sel(chip=53)).all() and np.isfinite(agreement.sel(chip=52)).all()
    assert np.isfinite(ds.agreement.isel(trial=1 - i)).all()
    assert "1 screened only (25% of the workload, 1 of 2 chips), 1 on the whole workload" in front_table(ds)
    settings = {p: ds[p].values[i].item() for p in SPACE}
    key = point_key(parse_spec(raw), "digits-deq48", settings)
    assert (tmp_path / "run" / "points" / f"{screen_key(key, 0.25, 1)}.nc").is_file()
    model = _model("digits-deq48")
    w = point_workload(model, raw["data"])
    alone = compare(model, load_device("aoc48").with_overrides(settings), w.inputs[:10], w.targets[:10],
                    seeds=[noise_seed(0, key, 51)], chips=[52], calibration=w.calibration)
    assert float(agreement.sel(chip=52).mean()) == pytest.approx(float(alone.agreement.mean()), abs=1e-12)
    # a point file whose chips are not the spec's (another sweep's, put there by hand): a one-line error
    from aocsim.experiments.sweep.search import results

    screen = tmp_path / "run" / "points" / f"{screen_key(key, 0.25, 1)}.nc"
    moved = xr.load_dataset(screen).assign_coords(chip=[99])
    moved.to_netcdf(screen)
    with pytest.raises(InputError, match=re.escape("holds chips [99]; expected chips of the spec's [52, 53]")) as err:
        results(parse_spec(raw), SweepStore(tmp_path / "run"), {})
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_a_trial_repeating_a_promoted_setting_is_told_its_whole_workload_run(tmp_path: Path) -> None:
    """Three start trials of one setting, rounds of 2: trial 0 is promoted, and trials 1 and 2 (the first not
    promoted in its round, the second in the next round) are told that whole-workload run, not their screens."""
    same = {"slm.bits": 6, "noise.power_per_unit_w": 1.0e-7}
    raw = {**SCREENED, "chips": [52, 53], "search": {**SCREENED["search"], "start": [same, same, same],
                                                     "fidelity": {"screen": 0.25, "promote": 0.5, "chips": 1}}}
    ds = sweep(parse_spec(raw), tmp_path / "run", workers=1)
    assert ds.repeat_of.values[:3].tolist() == [-1, 0, 0]
    assert ds.fidelity.values[:3].tolist() == [1.0, 1.0, 1.0] and ds.chips.values[:3].tolist() == [2, 2, 2]
    for i in (1, 2):
        xr.testing.assert_identical(ds.agreement.isel(trial=i, drop=True), ds.agreement.isel(trial=0, drop=True))
    attrs = [t.user_attrs for t in open_study(SweepStore(tmp_path / "run"), parse_spec(raw).search).get_trials()]
    assert all(a["point_key"] == attrs[0]["point_key"] and a[VIOLATION][-1] < 0 for a in attrs[:3])
