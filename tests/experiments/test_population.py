"""A population of design points as one run (aocsim/experiments/population.py): each point's fits are the
ones it gets alone, and its Dataset is what `compare` gives it alone."""

from __future__ import annotations

import pytest
import torch
import xarray as xr

from aocsim import compare, load_model
from aocsim.errors import InputError
from aocsim.execute import map_fit
from aocsim.execute.registry import resolve, resolve_profile
from aocsim.execute.ssm_device import calibration_inputs, fit_programs, fit_programs_population
from aocsim.experiments.population import compare_population
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems

TOKENS, TARGETS = word_problems(group("parity"), 6, 12, identity_prob=0.5, generator=3)
POINTS = [{}, {"slm.bits": 5, "noise.power_per_unit_w": 2e-5}, {"readout.adc_bits": 6},
          {"slm.bits": 3}]  # 3 SLM bits: more input positions measured dead, another program shape
FAST = {"fit_probes": 256}  # the calibration fit's probes: few, for speed


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """One thread, as compare's parts; an empty memo and calibration store (the tests' fits take few probes,
    `FAST`, for speed)."""
    from aocsim import disk_memo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(map_fit, "FITS", map_fit.FITS.fresh())
    with disk_memo.use(str(tmp_path)):
        yield
    torch.set_num_threads(threads)


def _profiles() -> list:
    base = load_device("aoc48")
    return [base.with_overrides(p) for p in POINTS]


@pytest.mark.slow
def test_a_populations_fits_are_each_points_own(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from aocsim import disk_memo

    model = load_model("parity-implicit")
    chips = [resolve_profile(p, 0) for p in _profiles()]
    calibration = calibration_inputs(model, TOKENS)
    placement = resolve(model, chips[0], FAST).placement
    together = fit_programs_population(model, chips, calibration, placement)
    monkeypatch.setattr(map_fit, "FITS", map_fit.FITS.fresh())  # alone: fitted again
    for chip, programs in zip(chips, together):
        with disk_memo.use(str(tmp_path / "alone")):  # (not read back from the population's store)
            alone = fit_programs(model, chip, calibration, placement)
        for name, program in alone.items():
            assert torch.equal(program.weight, programs[name].weight), name
            assert program.dead == programs[name].dead and program.error == programs[name].error
    assert together[3]["blocks.0.out_proj"].dead != together[0]["blocks.0.out_proj"].dead  # two program shapes
    assert len({p["inject"].weight.sum().item() for p in together}) == len(POINTS)  # each its own


@pytest.mark.slow
def test_a_populations_datasets_are_what_compare_gives_each_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim.experiments import population

    from aocsim.execute.hybrid import HybridSSM

    monkeypatch.setattr(population, "FIT_CHUNK", 3)  # fitted and placed 3 points and then 1, run as one batch
    model = load_model("parity-implicit")
    seeds = [[10 + i, 20 + i] for i in range(len(POINTS))]
    batches = []
    stacked = HybridSSM._stacked
    monkeypatch.setattr(HybridSSM, "_stacked", lambda self, runs, *a, **k: batches.append(len(runs)) or
                        stacked(self, runs, *a, **k))
    together = compare_population(model, _profiles(), TOKENS, TARGETS, seeds=seeds, chips=[1, 2],
                                  calibration=TOKENS, placement=FAST)
    # one batch per grid of tiles: the 3-bit point's out_proj skips 11 dead positions on chip 2 (85 inputs, the
    # 2 tile columns of the others' 66) and joins them; on chip 1 it skips 17 (102 inputs: a third column)
    assert batches == [2 * (2 * len(POINTS) - 1), 2]
    monkeypatch.setattr(HybridSSM, "_stacked", stacked)
    for profile, s, ds in zip(_profiles(), seeds, together):
        alone = compare(model, profile, TOKENS, TARGETS, seeds=s, chips=[1, 2], calibration=TOKENS, placement=FAST)
        # the same draws, programs and calibration: the same statuses, iterations and predictions; continuous
        # values to the rounding of a larger batch's digital products, which can move a reading across an
        # ADC code (seen: 2 of 288 residuals, by 1.6e-7 relative)
        for name in ("prediction", "status", "iterations", "correct", "energy_j", "hardware_time_s"):
            xr.testing.assert_equal(ds[name], alone[name])
        xr.testing.assert_allclose(ds.drop_attrs(), alone.drop_attrs(), rtol=1e-5, atol=1e-12)
        for name in ("residual", "fixed_point_error"):
            assert float((ds[name] == alone[name]).mean()) >= 0.99, name
        assert ds.attrs["device"] == alone.attrs["device"]
    residuals = [float(ds.residual.sel(path="device").mean()) for ds in together]
    assert len(set(residuals)) == len(POINTS)  # each point ran on its own machine


def test_a_population_refuses_points_of_other_placements_and_seed_counts() -> None:
    model = load_model("parity-implicit")
    base = load_device("aoc48")
    with pytest.raises(InputError, match="expected one per design point"):
        compare_population(model, [base, base], TOKENS, seeds=[[1], [2], [3]], calibration=TOKENS)
    with pytest.raises(InputError, match="expected a non-empty sequence of profiles"):
        compare_population(model, [], TOKENS, calibration=TOKENS)
    with pytest.raises(InputError, match="loads\\[1\\] is not a load"):
        compare_population(model, [base, base.with_overrides({"injection.dac_bits": 6})], TOKENS, seeds=[[1], [2]],
                           calibration=TOKENS)
    # a population's fits are keyed by its chip: points of two chips are fitted chip by chip, not together
    chips = [resolve_profile(base, 0), resolve_profile(base, 1)]
    placement = resolve(model, chips[0], FAST).placement
    with pytest.raises(InputError, match=r"variation.chip_seed = \[0, 1\]; expected the design points of one chip"):
        fit_programs_population(model, chips, calibration_inputs(model, TOKENS), placement)


def test_a_sweep_groups_points_into_populations_of_one_shape() -> None:
    from aocsim.experiments.sweep.run import populations
    from aocsim.experiments.sweep.spec import Point

    def point(i: int, **settings) -> Point:
        return Point("parity-implicit", settings, (i,), f"k{i}")

    points = [point(0, **{"slm.bits": 4}), point(1, **{"slm.bits": 5, "readout.adc_bits": 8}),
              point(2, **{"slm.bits": 4, "placement.averaging": 2}),  # a placement: another shape
              point(3, **{"slm.bits": 6, "injection.dac_bits": 6}),  # not a per-load value
              point(4, **{"noise.power_per_unit_w": 1e-5}), point(5, **{"slm.bits": 7})]
    assert [[p.key for p in g] for g in populations(points, 1)] == [["k0", "k1", "k4", "k5"], ["k2"], ["k3"]]
    # a part per worker
    assert [[p.key for p in g] for g in populations(points, 2)] == [["k0", "k1"], ["k4", "k5"], ["k2"], ["k3"]]
    assert [[p.key for p in g] for g in populations(points, 1, batched=False)] == [[p.key] for p in points]
    many = [point(10 + i, **{"slm.bits": 4 + i % 5}) for i in range(40)]
    assert [len(g) for g in populations(many, 1)] == [14, 14, 12]  # at most POPULATION_MOST (16) a call
    screened = Point("parity-implicit", {"slm.bits": 4}, (6,), "k6", fraction=0.25)
    assert len(populations([points[0], screened], 1)) == 2  # another share of the workload


def test_the_search_bench_asks_a_search_a_sweep_accepts(tmp_path) -> None:
    """`aocsim bench search` builds its searches as specs; each case's is a valid search on its placement."""
    import yaml

    from aocsim.experiments.bench_search import SEARCH_CASES, SearchBenchRow, format_search_bench, search_spec
    from aocsim.experiments.sweep.spec import load_spec

    for model, case in SEARCH_CASES.items():
        path = tmp_path / f"{model}.yaml"
        path.write_text(yaml.safe_dump(search_spec(model, trials=8, batch=4, case=case)))
        spec = load_spec(path)
        assert spec.search is not None and spec.search.batch == 4 and spec.search.budget == 8
        assert {"slm.bits", "readout.adc_bits", "noise.power_per_unit_w"} <= {p.path for p in spec.search.space}
    row = SearchBenchRow("parity-implicit", 16, 8, 32, 1, batched_s=30.0, point_by_point_s=60.0, exact_s=0.5,
                         accuracy_agrees=True)
    assert row.speedup == 2.0 and row.per_minute(row.batched_s) == 32.0 and row.exact_times(row.batched_s) == 3.75
    assert "2.00x" in format_search_bench([row])


def test_the_search_bench_gives_every_search_of_every_case_its_own_folder(monkeypatch) -> None:
    """Both cases in one run: each warm-up and timed search starts in a folder no other search wrote (a shared
    warm-up folder made the second case's warm-up refuse to start: a sweep's folder is never reused silently).
    The searches are stood in for by a sweep that refuses an existing folder, as `sweep` does."""
    import numpy as np

    from aocsim.experiments import bench_search
    from aocsim.experiments.sweep import run

    folders: list[str] = []

    def stand_in(spec, out, batched):
        assert not out.exists(), f"{out} reused"
        out.mkdir()
        folders.append(out.name)
        return xr.Dataset({"accuracy": ("trial", np.ones(2))})

    monkeypatch.setattr(run, "sweep", stand_in)
    monkeypatch.setattr(bench_search, "_exact_seconds", lambda model, case: 1.0)
    rows = bench_search.bench_search(("parity-implicit", "a5-implicit"), trials=2, batch=2)
    assert [r.model for r in rows] == ["parity-implicit", "a5-implicit"] and all(r.accuracy_agrees for r in rows)
    assert len(folders) == 6 == len(set(folders))


@pytest.mark.slow
def test_a_tiled_deqs_population_fits_together_and_runs_as_each_point_alone(tmp_path) -> None:
    """A DEQ larger than the device (digits-deq48 on aoc16: beta W on tiles): its points' programs fitted
    together, each Dataset identical to the point's own compare (its runs are its own)."""
    from aocsim import disk_memo
    from aocsim.experiments.workloads import default_workload

    model = load_model("digits-deq48")
    w = default_workload(model, samples=30)
    base = load_device("aoc16")
    points = [base.with_overrides({"slm.bits": b, "readout.adc_bits": a}) for b, a in ((6, 8), (8, 10), (4, 6))]
    together = compare_population(model, points, w.inputs, w.targets, seeds=[[1], [2], [3]], chips=[0],
                                  calibration=w.calibration, placement=FAST)
    assert together[0].attrs["kind"] == "tiled DEQ"
    with disk_memo.use(str(tmp_path / "alone")):
        map_fit.FITS.clear()
        for point, seed, ds in zip(points, (1, 2, 3), together):
            alone = compare(model, point, w.inputs, w.targets, seeds=[seed], chips=[0], calibration=w.calibration,
                            placement=FAST)
            xr.testing.assert_identical(alone.drop_attrs(), ds.drop_attrs())


def test_the_search_bench_takes_placement_options_for_every_case(monkeypatch) -> None:
    """`aocsim bench search --placement OPTION=VALUE`: each option over every case's own placement, in the
    searches' space and in the exact path's placement, and named in the header; a wrong option is a one-line
    error before any search."""
    import numpy as np
    import yaml
    from click.testing import CliRunner

    from aocsim.cli import main
    from aocsim.experiments import bench_search
    from aocsim.experiments.sweep import run

    spaces, exact = [], []

    def stand_in(spec, out, batched):
        spaces.append(yaml.safe_load(spec.read_text())["space"])
        out.mkdir()
        return xr.Dataset({"accuracy": ("trial", np.ones(2))})

    monkeypatch.setattr(run, "sweep", stand_in)
    monkeypatch.setattr(bench_search, "_exact_seconds", lambda model, case: exact.append(case["placement"]) or 1.0)
    out = CliRunner().invoke(main, ["--threads", "1", "bench", "search", "--model", "a5-implicit", "--trials", "2",
                                    "--batch", "2", "--placement", "fit_probes=512", "--placement", "averaging=4"])
    assert out.exit_code == 0, out.output
    assert all(s["placement.fit_probes"] == {"choice": [512]} and s["placement.averaging"] == {"choice": [4]}
               and s["placement.predistort"] == {"choice": [True]} for s in spaces) and len(spaces) == 3
    assert exact == [{"on_tiles": "in_proj,out_proj", "averaging": 4, "predistort": True, "fit_probes": 512}]
    assert "'fit_probes': 512" in out.output
    for bad, words in ((["--placement", "fit_probes"], "expected KEY=VALUE"),
                       (["--placement", "nonsense=1"], "placement.nonsense is not a placement option"),
                       (["--placement", "fit_probes=0"], "fit_probes = 0; expected an integer >= 1")):
        out = CliRunner().invoke(main, ["bench", "search", "--trials", "2", "--batch", "2", *bad])
        assert out.exit_code != 0 and words in out.output and "Traceback" not in out.output, out.output
    assert len(spaces) == 3  # (no search started)
