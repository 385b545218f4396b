"""The seeds of one chip run as one batch (aocsim/execute/seed_stack.py): every seed gets the results it
gets run alone (predictions, iterations and statuses identical; values to float32 rounding)."""

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


@pytest.fixture(scope="module")
def parity():
    model = load_model("parity-implicit")
    return model, default_workload(model, sequences=6, length_factor=1)


@pytest.mark.parametrize("overhead", [10 ** 9, 0])  # every call stacked; every padded call one load at a time
@pytest.mark.parametrize("sequences", [6, 3])  # 3: fewer rows than a pass alone pads to (ssm_token.MIN_ROWS)
def test_stacked_seeds_run_as_each_seed_alone(parity, sequences: int, overhead: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim.execute import seed_stack

    monkeypatch.setattr(seed_stack, "OVERHEAD", overhead)
    model, w = parity
    placed = place(model, "aoc48", Placement(), calibration=w.calibration)
    tokens, seeds = w.inputs[:sequences, :12], [0, 5, 2]
    stacked = placed.run_seeds(tokens, seeds)
    for seed, run in zip(seeds, stacked):
        alone = placed.run(tokens, seed)
        assert torch.equal(run.outputs.argmax(-1), alone.outputs.argmax(-1))
        assert torch.equal(run.solve.iterations, alone.solve.iterations)
        assert torch.equal(run.solve.status, alone.solve.status)
        assert (run.outputs - alone.outputs).abs().max() < 1e-4
        assert run.trace.shape == alone.trace.shape
        assert torch.equal(run.trace.isnan(), alone.trace.isnan())
        assert np.array_equal(run.activity.round_trips, alone.activity.round_trips)
        assert np.array_equal(run.activity.time_s, alone.activity.time_s)
    assert not torch.equal(stacked[0].solve.iterations, stacked[1].solve.iterations)  # the seeds differ


def test_a_compare_gives_the_dataset_of_seed_by_seed_runs(parity, monkeypatch: pytest.MonkeyPatch) -> None:
    model, w = parity
    run = {}
    for stack in (True, False):
        if not stack:
            monkeypatch.setattr(hybrid, "stackable", lambda placement: False)
        run[stack] = compare(model, "aoc48", w.inputs[:, :10], w.targets[:, :10], seeds=(0, 1, 2), chips=(3,),
                             calibration=w.calibration).sel(path="device")
    a, b = run[True], run[False]
    for name in ("prediction", "iterations", "status", "correct", "round_trips", "energy_j"):
        assert np.array_equal(a[name].values, b[name].values), name
    assert float(abs(a.residual - b.residual).max()) < 1e-6
    np.testing.assert_allclose(a.residual_trace.values, b.residual_trace.values, rtol=0, atol=1e-6)


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


def test_a_kind_that_stacks_seeds_keeps_each_chip_in_one_part() -> None:
    from aocsim.experiments.compare import _parts

    # 3 chips on 2 workers: seed by seed the last chip's seeds are split to keep both cores busy; stacked,
    # a split would change the batches (and so the rounding) with the number of workers
    assert _parts(3, 3, 2) == [(0, slice(0, 3)), (1, slice(0, 3)), (2, slice(0, 2)), (2, slice(2, 3))]
    assert _parts(3, 3, 2, split=False) == [(c, slice(0, 3)) for c in range(3)]
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


@pytest.mark.parametrize("overhead", [10 ** 9, 0])
def test_a_load_with_one_row_in_a_pass_gets_the_bits_of_its_seeds_padded_pass(parity, overhead: int,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1's pass alone has 4 rows (ssm_token pads it with stopped rows; CPU BLAS rounds products of fewer
    rows differently); stacked with loads that have no rows in the pass, its one row gets the same bits.
    (The ADC's codes off: they hide a product's rounding, except where it flips a code.)"""
    from aocsim.execute import seed_stack
    from aocsim.execute.token_keys import TokenKeys
    from aocsim.hardware.engine import keys
    from aocsim.hardware.profiles.profile import load_device

    monkeypatch.setattr(seed_stack, "OVERHEAD", overhead)
    model, w = parity
    placed = place(model, load_device("aoc48", {"readout.adc_bits": None}), Placement(), calibration=w.calibration)
    seeds = [placed._load(s) for s in (0, 1, 2)]
    stack = seed_stack.stack_seeds(model, seeds)
    name, batch = "blocks.0.in_proj", 6
    run_keys = [keys.as_key(s) for s in (7, 8, 9)]
    layer, alone = stack.maps[name], seeds[1].maps[name]
    x = torch.randn(4, layer.in_features, generator=torch.Generator().manual_seed(0)).to(torch.float32)
    layer.reset(run_keys)
    layer.token_keys = stack.token_keys(torch.arange(batch).repeat(3), 8)
    layer.token_keys.announce(torch.tensor([2]), 3, torch.tensor([batch + 4]))  # seed 1's sequence 4 alone
    stacked = layer(x[2:3])
    alone.reset(run_keys[1])
    alone.token_keys = TokenKeys(torch.arange(batch), 8)
    alone.token_keys.announce(torch.tensor([2]), 3, torch.tensor([0, 1, 4, 5]))  # padded with stopped rows
    assert torch.equal(stacked[0], alone(x)[2])


@pytest.mark.parametrize("job, message", [
    ({"model": "parity-implicit", "device": "aoc48", "inputs": None, "seed": 1}, r"jobs\[0\] .* has \['seed'\]"),
    ({"model": "parity-implicit", "device": "aoc48"}, r"with model, device and inputs"),
    ("parity-implicit", r"expected a mapping of compare's arguments"),
])
def test_a_bad_job_is_a_one_line_error(job, message: str) -> None:
    from aocsim.experiments.compare import compare_all

    with pytest.raises(InputError, match=message):
        compare_all([job])
