"""One placement interface (aocsim/execute/placement.py, registry.py): every option declared once with
the kinds it applies to; every kind placed and run through the registry with the same protocol."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
import torch

from aocsim import DEQ, DEQConfig, compare, load_model
from aocsim.errors import InputError
from aocsim.execute import PLACEMENTS, Placement, Run, place, placement_class
from aocsim.execute.option_groups import MAMBA2
from aocsim.execute.placement import (DECLARATIONS, GROUPS, HYBRID, KINDS, NATIVE, TILED, TWIN, SolveOptions,
                                     TileOptions)
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.physics.energy import Activity
from aocsim.hardware.profiles.profile import load_device
from aocsim.solve.result import SolveResult

CASES = {  # a model of each kind on aoc48, and what it runs on
    NATIVE: lambda: ("digits-deq48", default_workload(load_model("digits-deq48"), samples=3)),
    TILED: lambda: (_big(), None),
    HYBRID: lambda: ("parity-implicit", default_workload(load_model("parity-implicit"), sequences=2, length_factor=1)),
    TWIN: lambda: ("digits-twin48", default_workload(load_model("digits-twin48"), samples=3)),
    MAMBA2: lambda: ("charlm-mamba2", default_workload(load_model("charlm-mamba2"), sequences=2, length_factor=1)),
}


def _big() -> DEQ:
    model = DEQ(DEQConfig(96, 64, 10, split=48), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        model.weight.mul_(0.45 / torch.linalg.matrix_norm(model.operator(), ord=2))
    return model


def test_every_option_is_declared_with_an_example_its_reader_accepts() -> None:
    assert set(KINDS) == {cls.kind for cls in PLACEMENTS if cls.__module__.startswith("aocsim.")}  # the bundled kinds
    for name, d in DECLARATIONS.items():
        assert d.kinds and set(d.kinds) <= set(KINDS) and d.help and d.example is not None, name
        assert Placement(**{name: d.example}).given() == {name: d.read(name, d.example)}
        assert Placement(**{name: d.example}).resolved(d.kinds[0]).given()[name] != d.defaults[d.kinds[0]], name


def test_the_flat_placement_is_its_groups_and_each_group_comes_out_whole() -> None:
    """Every option belongs to one group; `Placement` is their union (the CLI's and the sweep's flat names),
    and `placement.tile` (and the others) is the group with the values given, for the code that honours it."""
    names = [f.name for g in GROUPS.values() for f in dataclasses.fields(g)]
    assert sorted(names) == sorted(DECLARATIONS) and len(names) == len(set(names))
    p = Placement(averaging=3, predistort=True, rtol=0.2, mode="simultaneous", snr_db=10.0)
    assert p.tile == TileOptions(averaging=3, predistort=True) and p.solve == SolveOptions(rtol=0.2)
    assert p.sequence.mode == "simultaneous" and p.noise.given() == {"snr_db": 10.0} and p.deq.given() == {}
    r = p.resolved(HYBRID).tile
    assert (r.averaging, r.partial_sums, r.compile) == (3, "analog", False)
    assert r.words() == "each product the mean of 3 passes; emitter drive predistorted" and TileOptions().words() == ""
    assert r.fitted().averaging is None and r.fitted().predistort is True  # a fit does not read the averaging


@pytest.mark.parametrize("name", list(DECLARATIONS))
def test_an_option_given_to_a_kind_it_does_not_apply_to_is_a_one_line_error(name: str) -> None:
    d = DECLARATIONS[name]
    for kind in KINDS:
        placement = Placement(**{name: d.example})
        if kind in d.kinds:
            assert getattr(placement.resolved(kind), name) == placement.given()[name]
            continue
        with pytest.raises(InputError, match=rf"^{name} = .* applies to .*; the model runs as a {kind}$") as err:
            placement.resolved(kind)
        assert "\n" not in str(err.value)


def test_defaults_are_the_kinds_own_and_bad_values_name_the_option() -> None:
    assert Placement().resolved(NATIVE).rtol == 1e-5 and Placement().resolved(TILED).rtol == 1e-3
    assert Placement().resolved(HYBRID).rtol == 0.1 and Placement().resolved(HYBRID).atol is None
    assert Placement(rtol=0.2).resolved(HYBRID).rtol == 0.2
    for name, bad in (("averaging", 0), ("stop", "never"), ("on_tiles", "inject,scan"), ("rtol", 1.5),
                      ("predistort", "maybe"), ("tile_size", -1), ("damping", 0.0)):
        with pytest.raises(InputError, match=rf"^{name} = ") as err:
            Placement(**{name: bad})
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="placement.colour is not a placement option"):
        compare("digits-deq48", "aoc48", torch.zeros(1, 64, dtype=torch.float64), placement={"colour": "red"})


@pytest.mark.parametrize("kind", list(CASES))
def test_each_kind_is_placed_and_run_through_the_registry(kind: str) -> None:
    model, w = CASES[kind]()
    model = load_model(model) if isinstance(model, str) else model
    x = w.inputs if w is not None else torch.rand(3, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    calibration = w.calibration if w is not None else torch.rand(64, 64, dtype=torch.float64)
    assert placement_class(model, load_device("aoc48")).kind == kind
    placed = place(model, "aoc48", chip=1, calibration=calibration)
    assert placed.kind == kind and placed.profile["variation.chip_seed"] == 1
    run = placed.run(x, 7)
    assert isinstance(run, Run) and isinstance(run.solve, SolveResult) and isinstance(run.activity, Activity)
    shape = tuple(x.shape[:len(placed.dims)])
    assert tuple(run.outputs.shape[:-1]) == shape and tuple(run.solve.iterations.shape) == shape
    assert np.shape(run.activity.time_s) == shape and (np.asarray(run.activity.time_s) > 0).all()
    again = place(model, "aoc48", chip=1, calibration=calibration).run(x, 7)
    assert torch.equal(again.z, run.z)  # the same chip and seed: the same numbers
    assert not torch.equal(placed.run(x, 8).z, run.z)  # another seed: another load and other noise


def test_compare_takes_at_most_ten_parameters() -> None:
    assert len(inspect.signature(compare).parameters) <= 10


def test_the_rules_between_options_are_checked_when_a_placement_is_resolved() -> None:
    """Issue 40, deliver 2 (in part): rules between options sit beside their declarations
    (placement.RULES) and are checked in one place, before any model is placed."""
    from aocsim.execute.placement import HYBRID, RULES

    assert len(RULES) >= 2
    with pytest.raises(InputError, match="snr_site = 'states' with mode = 'simultaneous'"):
        Placement(snr_db=10.0, snr_site="states", mode="simultaneous").resolved(HYBRID)
    with pytest.raises(InputError, match="snr_kind = 'device' with on_tiles = 'none'"):
        Placement(snr_db=10.0, snr_kind="device", on_tiles="none").resolved(HYBRID)
    assert Placement(snr_db=10.0, snr_site="states").resolved(HYBRID).mode == "sequential"  # the default holds
