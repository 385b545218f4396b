"""Co-design searches (aocsim/experiments/sweep/search.py): a search killed with SIGKILL and resumed
is its uninterrupted twin, workers change nothing, the front and its hypervolume against brute force,
one-line errors for bad search specs before any work."""

from __future__ import annotations

import itertools
import re
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.errors import InputError
from aocsim.experiments.sweep import parse_spec, status, sweep
from aocsim.experiments.sweep.front import hypervolume, pareto_mask
from aocsim.experiments.sweep.search import STUDY_FILE
from aocsim.experiments.sweep.spec import point_key

SEARCH = {"model": "digits-deq48", "device": "aoc48", "data": {"samples": 40}, "seeds": [51], "chips": [52],
          "search": {"objectives": {"agreement": "max", "energy_j": "min"}, "constraints": {"agreement": ">= 0.97"},
                     "budget": 6, "batch": 3, "sampler": "nsga2", "seed": 3},
          "space": {"slm.bits": {"int": [2, 6]}, "noise.power_per_unit_w": {"log": [1.0e-7, 1.0e-5]}},
          "metrics": ["agreement", "energy_j", "iterations"]}


def _write(tmp_path: Path, spec: dict, name: str = "search.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> xr.Dataset:
    """SEARCH run uninterrupted on one worker."""
    return sweep(parse_spec(SEARCH), tmp_path_factory.mktemp("search") / "one", workers=1)


def _trials(ds: xr.Dataset) -> list[tuple]:
    return list(zip(*(ds[p].values.tolist() for p in SEARCH["space"])))


@pytest.mark.slow
def test_a_search_killed_with_sigkill_and_resumed_is_its_uninterrupted_twin(reference: xr.Dataset,
                                                                           tmp_path: Path) -> None:
    spec, out = _write(tmp_path, SEARCH), tmp_path / "killed"
    command = [sys.executable, "-m", "aocsim", "--threads", "1", "sweep", str(spec), "--out", str(out),
               "--workers", "1"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list((out / "points").glob("*.nc"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # in the first round: after some of its points, before its tells
    proc.wait()
    assert not (out / "results.nc").exists()
    done = status(out)
    assert 2 <= done["done"] < 6 and done["total"] == 6, done
    resumed = CliRunner().invoke(main, ["--threads", "1", "sweep", str(spec), "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        xr.testing.assert_identical(reference, ds.load())


def test_a_journal_line_cut_by_a_kill_is_dropped_and_its_trial_asked_again(reference: xr.Dataset,
                                                                         tmp_path: Path) -> None:
    out = tmp_path / "cut"
    sweep(parse_spec(SEARCH), out, workers=1)
    journal = out / STUDY_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    # keep the log up to the last ask (the last trial's creation), its line cut in the middle
    last = max(i for i, line in enumerate(lines) if b'"op_code":4' in line or b'"op_code": 4' in line)
    journal.write_bytes(b"".join(lines[:last]) + lines[last][: len(lines[last]) // 2])
    (out / "results.nc").unlink()
    spec = parse_spec(SEARCH)
    last = {p: ds_value.item() for p, ds_value in ((p, reference[p].values[-1]) for p in SEARCH["space"])}
    (out / "points" / f"{point_key(spec, 'digits-deq48', last)}.nc").unlink()  # its point lost too
    resumed = sweep(parse_spec(SEARCH), out, workers=1, resume=True)
    xr.testing.assert_identical(reference, resumed)


@pytest.mark.slow
def test_two_workers_ask_and_run_the_same_trials_as_one(reference: xr.Dataset, tmp_path: Path) -> None:
    xr.testing.assert_identical(reference, sweep(parse_spec(SEARCH), tmp_path / "two", workers=2))


def test_the_results_mark_the_front_of_the_feasible_trials_and_its_hypervolume(reference: xr.Dataset) -> None:
    ds = reference
    assert ds.sizes["trial"] == 6 and ds.attrs["hypervolume"] > 0
    agreement = ds.agreement.mean(("model", "chip", "seed")).values
    energy = ds.energy_per_inference_j.mean(("model", "chip", "seed")).values
    feasible = agreement >= 0.97
    np.testing.assert_array_equal(ds.feasible.values.astype(bool), feasible)
    for i in range(6):  # brute force: on the front iff feasible and no feasible trial dominates it
        beaten = any(feasible[j] and agreement[j] >= agreement[i] and energy[j] <= energy[i]
                     and (agreement[j] > agreement[i] or energy[j] < energy[i]) for j in range(6))
        assert bool(ds.pareto.values[i]) == (feasible[i] and not beaten), i
    reference_point = json.loads(ds.attrs["hypervolume_reference"])
    values = np.stack([agreement, energy], axis=1)
    assert ds.attrs["hypervolume"] == pytest.approx(hypervolume(values, ["max", "min"], reference_point, feasible))
    # the sampler asked distinct settings, inside the space
    bits, power = np.asarray(ds["slm.bits"]), np.asarray(ds["noise.power_per_unit_w"])
    assert bits.min() >= 2 and bits.max() <= 6 and power.min() >= 1e-7 and power.max() <= 1e-5
    assert len(set(_trials(ds))) > 1 and 0 < feasible.sum() < 6  # the constraint bites


# SEARCH's trials and objectives (means over chips x seeds) as main asked them before search.fidelity (bed2c3f,
# one thread on the 2-core machine): a search without the block is that search, bit for bit. The scores are the
# corrected machine model's (docs/PHYSICS.md sections 3 and 6: the stop read on the ADC's samples, the light paid
# once); the trials asked did not move with them.
MAIN = {"slm.bits": [6, 2, 3, 6, 3, 6],
        "noise.power_per_unit_w": [4.414266879685234e-07, 1.4816285294767154e-06, 2.9051513038005256e-06,
                                   2.295357385942331e-07, 1.4816285294767154e-06, 1.4816285294767154e-06],
        "agreement": [0.975, 0.975, 0.95, 0.975, 1.0, 1.0],
        "energy_per_inference_j": [2.8488534374300106e-06, 2.880574700293579e-06, 2.923985448395246e-06,
                                   2.8423917602484287e-06, 2.880574700293579e-06, 2.880574700293579e-06],
        "pareto": [False, False, False, True, True, True]}


def test_without_fidelity_a_search_asks_and_scores_what_main_did(reference: xr.Dataset) -> None:
    assert "fidelity" not in reference and "samples" not in reference and "fidelity" not in reference.attrs["search"]
    for name, expected in MAIN.items():
        values = reference[name].values if name in SEARCH["space"] or name == "pareto" else \
            reference[name].mean(("model", "chip", "seed")).values
        assert values.tolist() == expected, name
    assert reference.attrs["hypervolume"] == 3.0546352036120445e-10


def test_what_a_trial_asks_depends_on_the_seed_and_its_number_only() -> None:
    import optuna

    from aocsim.experiments.sweep.search import distributions, sampler

    def first_ask(seed: int, number: int) -> dict:
        search = parse_spec({**SEARCH, "search": {**SEARCH["search"], "seed": seed}}).search
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler(search, number))
        return study.ask(distributions(search)).params

    assert first_ask(3, 0) == first_ask(3, 0)
    assert first_ask(3, 0) != first_ask(4, 0) and first_ask(3, 0) != first_ask(3, 1)


def test_hypervolume_and_front_agree_with_counting_cells() -> None:
    rng = np.random.default_rng(7)
    for dims in (1, 2, 3):
        for _ in range(20):
            pts = rng.integers(0, 6, size=(8, dims)).astype(float)
            ref = np.full(dims, 6.0)
            directions = ["min"] * dims
            # every unit cell [c, c+1) dominated by some point counts once
            cells = sum(any(np.all(p <= np.array(c)) for p in pts)
                        for c in itertools.product(range(6), repeat=dims))
            assert hypervolume(pts, directions, ref) == pytest.approx(cells)
            # maximising the negated values is the same front and volume
            assert hypervolume(-pts, ["max"] * dims, -ref) == pytest.approx(cells)
            mask = pareto_mask(pts, directions)
            for i, p in enumerate(pts):
                beaten = any(np.all(q <= p) and np.any(q < p) for q in pts)
                assert mask[i] == (not beaten)


BAD = [
    ({"objectives": {"accuracy_pct": "max"}}, "search.objectives: unknown metric 'accuracy_pct'"),
    ({"objectives": {"agreement": "up"}}, "search.objectives.agreement = 'up'; expected max or min"),
    ({"budget": 0}, "search.budget = 0; expected an integer >= 1"),
    ({"sampler": "cmaes"}, "search.sampler = 'cmaes'; expected one of nsga2, tpe, random"),
    ({"constraints": {"agreement": "> 0.9"}}, "search.constraints.agreement = '> 0.9'"),
    ({"objectives": {}}, "search.objectives is empty"),
    ({"reference": {"agreement": 0.9}}, "search.reference"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_search_blocks_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_spec({**SEARCH, "search": {**SEARCH["search"], **change}})
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("space, message", [
    ({}, "space is empty"),
    ({"slm.bits": {"int": [9, 2]}}, "space.slm.bits.int = [9, 2]; expected low < high"),
    ({"noise.power_per_unit_w": {"log": [0.0, 1.0e-4]}}, "expected low > 0"),
    ({"slm.bits": {"int": [2.5, 9]}}, "expected [low, high], two integers"),
    ({"slm.bits": [2, 9]}, "space.slm.bits = [2, 9]; expected one of {int: [low, high]}"),
    ({"slm.bitz": {"int": [2, 9]}}, "unknown parameter 'slm.bitz'"),
    ({"slm.bits": {"int": [2, 99]}}, "slm.bits"),  # outside the profile schema: the profile's own message
])
def test_bad_spaces_are_one_line_errors(space: dict, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_spec({**SEARCH, "space": space})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_search_beside_a_grid_or_a_space_alone_is_refused(tmp_path: Path) -> None:
    for spec, message in (({**SEARCH, "axes": {"slm.bits": [4, 9]}}, "search and axes together"),
                          ({k: v for k, v in SEARCH.items() if k != "search"}, "space is given without search"),
                          ({**SEARCH, "model": ["digits-deq48", "digits-deq64"]}, "a search runs one model"),
                          ({**SEARCH, "metrics": ["iterations"]}, "metrics lacks 'agreement'")):
        with pytest.raises(InputError, match=message):
            parse_spec(spec)
    # on the command line: one line, and no folder made
    bad = _write(tmp_path, {**SEARCH, "search": {**SEARCH["search"], "budget": 0}})
    out = CliRunner().invoke(main, ["sweep", str(bad), "--out", str(tmp_path / "never")])
    assert out.exit_code == 1 and "search.budget = 0" in out.output and len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_the_command_prints_the_front_and_plot_draws_it(reference: xr.Dataset, tmp_path: Path) -> None:
    spec = _write(tmp_path, SEARCH)
    out = CliRunner().invoke(main, ["--threads", "1", "sweep", str(spec), "--out", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    assert "on the Pareto front of agreement max, energy_per_inference_j min; hypervolume" in out.output
    assert f"{int(reference.pareto.sum())} on the Pareto front" in out.output
    figure = CliRunner().invoke(main, ["plot", str(tmp_path / "run" / "results.nc")])
    assert figure.exit_code == 0, figure.output
    assert (tmp_path / "run" / "results-front.png").stat().st_size > 10_000
    shown = CliRunner().invoke(main, ["sweep", "status", str(tmp_path / "run")])
    assert "6 of 6 points done" in shown.output


def test_a_search_against_a_grid_scores_both_up_to_one_reference(reference: xr.Dataset, tmp_path: Path) -> None:
    from aocsim.experiments.sweep.search import against

    itself = against(reference, reference)  # the same points: the same front and volume
    assert itself["hypervolume"][0] == itself["hypervolume"][1] == pytest.approx(reference.attrs["hypervolume"])
    grid_spec = {k: v for k, v in SEARCH.items() if k not in ("search", "space")}
    grid_spec["axes"] = {"slm.bits": [2, 6], "noise.power_per_unit_w": [1.0e-7, 1.0e-5]}
    sweep(parse_spec(grid_spec), tmp_path / "grid", workers=1)
    grid = xr.open_dataset(tmp_path / "grid" / "results.nc", engine="h5netcdf").load()
    both = against(reference, grid)
    feasible = np.concatenate(both["feasible"])
    values = np.concatenate(both["values"])[feasible]
    ref = np.array(list(both["reference"].values()))
    # from the constraint's bound on agreement (0.97), beyond every feasible point of either in energy
    assert ref[0] == 0.97 and ref[1] > values[:, 1].max()
    for k, ds in enumerate((reference, grid)):
        v, f = both["values"][k], both["feasible"][k]
        assert both["hypervolume"][k] == pytest.approx(hypervolume(v, ["max", "min"], ref, f))
    out = CliRunner().invoke(main, ["plot", str(tmp_path / "grid" / "results.nc"), "--against",
                                    str(tmp_path / "grid" / "results.nc")])
    assert out.exit_code == 1 and "expected RESULTS of a search" in out.output
    search_file = tmp_path / "search.nc"
    reference.to_netcdf(search_file, engine="h5netcdf")
    out = CliRunner().invoke(main, ["plot", str(search_file), "--against", str(tmp_path / "grid" / "results.nc")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "search-front.png").stat().st_size > 10_000


def test_start_trials_are_asked_as_given_and_survive_a_kill_between_enqueue_and_ask(tmp_path: Path) -> None:
    start = {"slm.bits": 6, "noise.power_per_unit_w": 1.0e-5}
    spec = {**SEARCH, "search": {**SEARCH["search"], "budget": 3, "start": [start]}}
    whole = sweep(parse_spec(spec), tmp_path / "whole", workers=1)
    assert {p: whole[p].values[0].item() for p in start} == start  # trial 0 is the known-good machine
    out = tmp_path / "cut"
    sweep(parse_spec(spec), out, workers=1)
    journal = out / STUDY_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b'"op_code":4' in line)
    journal.write_bytes(b"".join(lines[: first + 1]))  # killed after the start trial was enqueued, before its ask
    (out / "results.nc").unlink()
    xr.testing.assert_identical(whole, sweep(parse_spec(spec), out, workers=1, resume=True))
    for bad, message in (([{"slm.bits": 6}], "expected a value for each parameter"),
                         ([{**start, "slm.bits": 12}], "search.start[0].slm.bits = 12; expected a value inside"),
                         ([start] * 4, "expected a list of at most budget (3)")):
        with pytest.raises(InputError, match=re.escape(message)):
            parse_spec({**spec, "search": {**spec["search"], "start": bad}})


def test_a_huge_search_needs_yes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aocsim.experiments.sweep as sweeps

    def start(*args, **kwargs):  # instead of running 2000 trials: stop where they would start
        raise SystemExit(3)

    monkeypatch.setattr(sweeps, "sweep", start)
    spec = _write(tmp_path, {**SEARCH, "search": {**SEARCH["search"], "budget": 2000}})
    out = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "big"), "--workers", "2"])
    assert out.exit_code == 1 and out.output.count("\n") == 1, out.output
    assert re.search(r"2000 points x 1 chips x 1 seeds; about [\d.]+ (minutes|hours) on 2 workers", out.output)
    assert "pass --yes to start it" in out.output and not (tmp_path / "big").exists()


# -- trust, constraints a point can meet, repeats, xarray conventions (issue 41) -------------------------------

@pytest.mark.parametrize("bound, words", [(">= 99", "[0, 1]"), (">= 1.5", "[0, 1]"), ("<= -0.1", "[0, 1]")])
def test_a_constraint_no_point_can_meet_is_refused_at_once(tmp_path: Path, bound: str, words: str) -> None:
    """A bound outside the metric's range (accuracy is a fraction; tables print it in %) is a one-line error
    naming the range, before any trial runs and within seconds."""
    spec = {**SEARCH, "search": {**SEARCH["search"], "constraints": {"agreement": bound}}}
    start = time.monotonic()
    out = CliRunner().invoke(main, ["--threads", "1", "sweep", str(_write(tmp_path, spec)), "--out",
                                    str(tmp_path / "never")])
    assert out.exit_code == 1 and time.monotonic() - start < 5
    message = out.output.strip().splitlines()[-1]
    assert message.startswith("Error: search.constraints.agreement") and words in message and "99 %" in message
    assert not (tmp_path / "never").exists()


def test_a_fraction_bound_may_be_written_in_percent_as_tables_print_it() -> None:
    for text in (">= 97 %", ">=97%", ">= 0.97"):
        spec = parse_spec({**SEARCH, "search": {**SEARCH["search"], "constraints": {"agreement": text}}}, check=False)
        assert spec.search.constraints[0].bound == pytest.approx(0.97)
    with pytest.raises(InputError, match=r"energy_per_inference_j is a value >= 0 \(J\), not a fraction"):
        parse_spec({**SEARCH, "search": {**SEARCH["search"], "constraints": {"energy_j": "<= 5 %"}}}, check=False)


def _trials_dataset(trusted: list[int], agreement: list[float], energy: list[float], bits: list[int]) -> xr.Dataset:
    n = len(trusted)
    dims = ("model", "trial", "chip", "seed")
    ds = xr.Dataset({"agreement": (dims, np.array(agreement, dtype=float).reshape(1, n, 1, 1)),
                     "energy_per_inference_j": (dims, np.array(energy, dtype=float).reshape(1, n, 1, 1)),
                     "trusted": (("model", "trial"), np.array([trusted], dtype=np.int8))},
                    coords={"model": ["digits-deq48"], "trial": np.arange(n), "slm.bits": ("trial", bits),
                            "noise.power_per_unit_w": ("trial", [1e-6] * n), "chip": [0], "seed": [0]})
    ds.attrs["spec"] = json.dumps(SEARCH)
    return ds


def test_an_untrusted_trial_is_infeasible_and_never_on_the_front() -> None:
    """The best trial in every objective is one compare did not trust: it is infeasible, off the front, and
    told to the sampler as a violated constraint."""
    from aocsim.experiments.sweep.search import mark_front, scores

    search = parse_spec(SEARCH, check=False).search
    ds = _trials_dataset([0, 1, 1], [1.0, 0.98, 0.99], [1e-6, 5e-6, 9e-6], [6, 5, 4])
    marked = mark_front(ds, search)
    assert marked.feasible.values.tolist() == [False, True, True]
    assert not marked.pareto.values[0] and marked.pareto.values[1:].any()
    _, violations = scores(ds, search, violations=True)
    assert violations.shape == (3, 2) and violations[0, -1] > 0 and (violations[1:, -1] <= 0).all()


def test_repeated_trials_are_stated_in_the_table() -> None:
    from aocsim.experiments.sweep.search import mark_front
    from aocsim.experiments.sweep.table import front_table

    search = parse_spec(SEARCH, check=False).search
    marked = mark_front(_trials_dataset([1, 1, 1, 1], [0.98, 0.99, 0.98, 0.99], [1e-6, 5e-6, 1e-6, 5e-6],
                                        [6, 5, 6, 5]), search)
    assert marked.repeat_of.values.tolist() == [-1, -1, 0, 1]
    assert "4 trials (2 distinct: trial(s) 2, 3 repeat earlier settings" in front_table(marked)


def test_a_search_result_follows_xarray_conventions(reference: xr.Dataset) -> None:
    """Every dimension has a coordinate (trial too, so idxmin works), every variable has units, and the
    verdict is a CF flag variable."""
    assert all(d in reference.coords for d in reference.dims)
    best = reference.energy_per_inference_j.mean(("chip", "seed")).squeeze("model").idxmin("trial")
    assert int(best) in reference.trial.values
    for name in reference.data_vars:
        if reference[name].dtype.kind in "iufb":
            assert "units" in reference[name].attrs, name
    assert list(reference.trusted.attrs["flag_values"]) == [-1, 0, 1]
    assert reference.trusted.attrs["flag_meanings"] == "not_run untrusted trusted"
    assert (reference.trusted.values == 1).all() and (reference.warnings.values == "").all()


def test_objectives_named_in_a_list_take_their_direction_from_the_metric_registry() -> None:
    """Issue 40, deliver 4: a metric's direction is declared once (aocsim/experiments/metrics.py)."""
    spec = parse_spec({**SEARCH, "search": {**SEARCH["search"], "objectives": ["agreement", "energy_j"]}}, check=False)
    assert spec.search.objectives == {"agreement": "max", "energy_per_inference_j": "min"}
