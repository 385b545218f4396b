"""The seeds of one chip run as one batch (aocsim/execute/seed_stack.py): every seed gets the results it
gets run alone in statistics (tests/_parity.py: predictions, iterations and statuses on 99.5 % of the
tokens, values to float32 rounding where they agree, means within their standard errors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aocsim.errors import InputError
from aocsim.execute import hybrid
from aocsim.execute.placement import Placement
from aocsim.execute.registry import Placed, place
from aocsim.experiments.compare import compare
from aocsim.experiments.workloads import default_workload
from aocsim.io.model_files import load_model
from _parity import assert_agree, assert_means_agree


@pytest.fixture(scope="module")
def parity():
    model = load_model("parity-implicit")
    return model, default_workload(model, sequences=6, length_factor=1)


@pytest.mark.parametrize("sequences", [6, 3])  # 3: passes of one or two rows
def test_stacked_seeds_run_as_each_seed_alone(parity, sequences: int) -> None:
    model, w = parity
    placed = place(model, "aoc48", Placement(), calibration=w.calibration)
    tokens, seeds = w.inputs[:sequences, :12], [0, 5, 2]
    stacked = placed.run_seeds(tokens, seeds)
    for seed, run in zip(seeds, stacked):
        alone = placed.run(tokens, seed)
        assert_agree(run.outputs.argmax(-1), alone.outputs.argmax(-1), "predictions")
        same = assert_agree(run.solve.iterations, alone.solve.iterations, "iterations")
        assert_agree(run.solve.status, alone.solve.status, "statuses")
        assert (run.outputs - alone.outputs)[same].abs().max() < 1e-4
        assert_means_agree(torch.as_tensor(run.activity.round_trips), torch.as_tensor(alone.activity.round_trips),
                           "round trips")
        assert_means_agree(torch.as_tensor(run.activity.time_s), torch.as_tensor(alone.activity.time_s), "time")
    assert not torch.equal(stacked[0].solve.iterations, stacked[1].solve.iterations)  # the seeds differ


def test_a_seed_whose_rows_are_done_leaves_the_stacks_products(parity, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeds finish their tokens apart; once a seed's rows are all done its load is left out of the pass's
    products (not computed on empty rows), and a map keeps at most the whole stack and the current part."""
    from aocsim.execute.seed_stack import StackedLinear
    from aocsim.hardware.engine.tile_product import LoadStack

    model, w = parity
    placed = place(model, "aoc48", Placement(), calibration=w.calibration)
    loads, parts, inside = [], [], []  # the loads of each product a stacked map runs
    call = LoadStack.__call__
    monkeypatch.setattr(LoadStack, "__call__", lambda self, t, *a, **k: (inside and loads.append(len(self.loads)))
                        or call(self, t, *a, **k))
    forward = StackedLinear.forward

    def recorded(self, x):
        inside.append(1)
        try:
            return forward(self, x)
        finally:
            inside.pop()
            parts.append(len(self.parts))

    monkeypatch.setattr(StackedLinear, "forward", recorded)
    placed.run_seeds(w.inputs[:6, :12], [0, 5, 2])
    assert max(loads) == 3 and min(loads) < 3 and max(parts) <= 2


def test_a_compare_gives_the_dataset_of_seed_by_seed_runs(parity, monkeypatch: pytest.MonkeyPatch) -> None:
    model, w = parity
    run = {}
    for stack in (True, False):
        if not stack:
            monkeypatch.setattr(hybrid, "stackable", lambda placement: False)
        run[stack] = compare(model, "aoc48", w.inputs[:, :10], w.targets[:, :10], seeds=(0, 1, 2), chips=(3,),
                             calibration=w.calibration).sel(path="device")
    a, b = run[True], run[False]
    for name in ("prediction", "iterations", "status", "correct"):
        assert_agree(torch.as_tensor(a[name].values), torch.as_tensor(b[name].values), name)
    for name in ("iterations", "round_trips", "energy_j", "residual"):
        assert_means_agree(torch.as_tensor(a[name].values), torch.as_tensor(b[name].values), name)
    same = torch.as_tensor(a.iterations.values == b.iterations.values)
    assert float(abs(a.residual.values - b.residual.values)[same.numpy()].max()) < 1e-6


def test_a_compare_runs_its_chips_and_seeds_as_one_batch(parity, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 chips x 3 seeds in one call, one batch of nine weight loads (each row through its own chip's load and
    seed's keys): each chip's results are what its compare alone gives, in statistics (tests/_parity.py)."""
    model, w = parity
    batches = []
    stacked = hybrid.HybridSSM._stacked
    monkeypatch.setattr(hybrid.HybridSSM, "_stacked", lambda self, runs, inputs:
                        batches.append(len(runs)) or stacked(self, runs, inputs))
    x, y, chips = w.inputs[:, :10], w.targets[:, :10], (0, 1, 2)
    together = compare(model, "aoc48", x, y, seeds=(0, 1, 2), chips=chips, calibration=w.calibration).sel(path="device")
    assert batches == [9]
    for chip in chips:
        a = together.sel(chip=chip)
        b = compare(model, "aoc48", x, y, seeds=(0, 1, 2), chips=(chip,), calibration=w.calibration
                    ).sel(path="device", chip=chip)
        for name in ("prediction", "iterations", "status"):
            assert_agree(torch.as_tensor(a[name].values), torch.as_tensor(b[name].values), f"chip {chip}: {name}")
        for name in ("iterations", "energy_j", "residual"):
            assert_means_agree(torch.as_tensor(a[name].values), torch.as_tensor(b[name].values), f"chip {chip}: {name}")
    residual = together.residual.values
    assert not np.array_equal(residual[0], residual[1]) and not np.array_equal(residual[1], residual[2])


def test_what_a_stack_cannot_run_runs_seed_by_seed(parity) -> None:
    model, w = parity
    placed = place(model, "aoc48", Placement(ema_alpha=0.5), calibration=w.calibration)  # its readout is a run's
    tokens = w.inputs[:4, :6]
    for seed, run in zip([0, 1], placed.run_seeds(tokens, [0, 1])):
        assert torch.equal(run.outputs, placed.run(tokens, seed).outputs)


def test_a_stacked_map_outside_a_stacked_run_is_a_one_line_error(parity) -> None:
    from aocsim.execute.seed_stack import stack_seeds

    model, w = parity
    placed = place(model, "aoc48", Placement(on_tiles=("out_proj",)), calibration=w.calibration)
    stack = stack_seeds(model, [placed._load(0), placed._load(1)])
    layer = next(iter(stack.maps.values()))
    with pytest.raises(InputError, match="runs inside a stacked run only"):
        layer(torch.zeros(2, layer.in_features, dtype=torch.float32))
    with pytest.raises(InputError, match="expected one per stacked seed"):
        stack(w.inputs[:2, :4], generator=[0])


def test_the_compare_bench_counts_each_seeds_tokens() -> None:
    from aocsim.experiments.bench import CompareBenchRow, format_compare_bench

    row = CompareBenchRow("parity-implicit", 1000, exact_s=0.5, device_s=6.0, seeds=3)
    assert row.ratio == pytest.approx(4.0)  # 3 x 1000 tokens in 6 s against 1000 in 0.5 s
    line = format_compare_bench([row]).splitlines()[1].split()
    assert line[-4:] == ["1000", "2000", "500", "4.0x"]
    chips = CompareBenchRow("parity-implicit", 1000, exact_s=0.5, device_s=12.0, seeds=3, chips=2)
    assert chips.ratio == pytest.approx(4.0)  # 2 chips x 3 seeds x 1000 tokens in 12 s against 1000 in 0.5 s
    assert format_compare_bench([chips]).splitlines()[1].split()[-4:] == ["1000", "2000", "500", "4.0x"]


def test_a_kind_that_stacks_its_loads_runs_a_parts_chips_and_seeds_as_one_batch() -> None:
    from aocsim.experiments.compare import _parts

    # 3 chips on 2 workers, seed by seed: a part per chip, the last chip's seeds split to keep both cores busy
    assert _parts(3, 3, 2) == [((0,), slice(0, 3)), ((1,), slice(0, 3)), ((2,), slice(0, 2)), ((2,), slice(2, 3))]
    assert _parts(3, 3, 2, split=False) == [((c,), slice(0, 3)) for c in range(3)]
    # stacked: every chip and seed of a part in one batch, a part per worker (their fits side by side)
    assert _parts(3, 3, 2, stacked=True) == [((0, 1), slice(0, 3)), ((2,), slice(0, 3))]
    assert _parts(3, 3, 2, split=False, stacked=True) == [((0, 1), slice(0, 3)), ((2,), slice(0, 3))]
    assert _parts(3, 3, 1, stacked=True) == [((0, 1, 2), slice(0, 3))]
    # within STACK_ROWS rows a part: 3 seeds x 512 sequences, 2 chips a part (a chip's seeds together)
    assert _parts(5, 3, 1, stacked=True, rows=512) == [((0, 1), slice(0, 3)), ((2, 3), slice(0, 3)), ((4,), slice(0, 3))]
    assert _parts(2, 3, 1, stacked=True, rows=4096) == [((0,), slice(0, 3)), ((1,), slice(0, 3))]
    kind = hybrid.HybridSSM.kind
    assert hybrid.HybridSSM.stacks(Placement().resolved(kind))
    assert not hybrid.HybridSSM.stacks(Placement(mode="simultaneous").resolved(kind))
    # noise drawn per run: the seeds run one by one (the wrapper's say, through the registry's `Placed`)
    assert not Placed(hybrid.HybridSSM, Placement(snr_db=20.0).resolved(kind)).stacks()


@pytest.mark.slow
def test_several_models_compared_on_shared_workers_give_their_own_datasets(parity) -> None:
    import xarray as xr

    from aocsim.experiments.compare import compare_all

    model, w = parity
    digits = load_model("digits-deq48")
    d = default_workload(digits, samples=12)
    jobs = [dict(model=digits, device="aoc48", inputs=d.inputs, targets=d.targets, seeds=(0, 1),
                 calibration=d.calibration),
            dict(model=model, device="aoc48", inputs=w.inputs[:4, :8], targets=w.targets[:4, :8], seeds=(0, 1),
                 calibration=w.calibration)]
    together = compare_all(jobs, workers=2)
    for job, ds in zip(jobs, together):
        xr.testing.assert_identical(ds, compare(**job))


@pytest.mark.parametrize("job, message", [
    ({"model": "parity-implicit", "device": "aoc48", "inputs": None, "seed": 1}, r"jobs\[0\] .* has \['seed'\]"),
    ({"model": "parity-implicit", "device": "aoc48"}, r"with model, device and inputs"),
    ("parity-implicit", r"expected a mapping of compare's arguments"),
])
def test_a_bad_job_is_a_one_line_error(job, message: str) -> None:
    from aocsim.experiments.compare import compare_all

    with pytest.raises(InputError, match=message):
        compare_all([job])
