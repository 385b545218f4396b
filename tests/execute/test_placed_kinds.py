"""The placed-model contract (issue 40): every kind is a subclass of `PlacedModel`, checked when it is defined
and registered by being defined, so that a new kind is its own module and nothing else; `compare` asks
the class, never probes it."""

from __future__ import annotations

import pytest
import torch

from aocsim import compare, solve
from aocsim.execute.placed import KINDS, PlacedModel
from aocsim.execute.run import Run
from aocsim.hardware.physics.energy import Activity


class Contraction(torch.nn.Module):
    """A toy implicit classifier: z = 0.5 z W + x, logits z (its fixed point z = x (I - 0.5 W)^-1)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.eye(3, dtype=torch.float64).roll(1, 0))

    def solve(self, x: torch.Tensor, noise: float = 0.0, seed: int = 0) -> Run:
        gen = torch.Generator().manual_seed(seed)
        kick = noise * torch.randn(x.shape, generator=gen, dtype=torch.float64)
        res = solve(lambda z: 0.5 * z @ self.weight.detach() + x + kick, torch.zeros_like(x), solver="picard",
                    atol=1e-10, max_iter=200)
        return Run(res.z, res.z, res, None, None)


class ContractionOnDevice(PlacedModel):
    """A test-only kind: the toy's loop with a seeded input error, one round trip per iteration."""

    kind = "toy contraction"
    residual = "abs_residual"
    residual_units = "model state units (||f(z) - z||_2)"
    dims = ("sample",)

    @staticmethod
    def fits(model, profile, placement) -> bool:
        return isinstance(model, Contraction)

    @staticmethod
    def check_inputs(model, inputs, targets):
        return torch.as_tensor(inputs, dtype=torch.float64), targets

    @staticmethod
    def prepare(model, calibration, placement):
        return None

    @staticmethod
    def exact(model, inputs, placement) -> Run:
        return model.solve(inputs)

    @staticmethod
    def describe(model, placement) -> str:
        return "toy: the whole loop on the device"

    @staticmethod
    def timing(profile, placement) -> str:
        return "one round trip per iteration"

    def run(self, inputs, seed) -> Run:
        out = self.model.solve(inputs, noise=1e-3, seed=seed)
        rounds = out.solve.iterations.double().numpy()
        return Run(out.outputs, out.z, out.solve, Activity(time_s=2e-8 * rounds, round_trips=rounds), None)


def test_a_kind_defined_in_one_module_runs_through_compare() -> None:
    """Defining the class registered it: compare places the toy, runs every chip and seed through it, prices
    its activity, and uses the base class's defaults (one seed at a time, no tile programs)."""
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [1.0, 1.0, 0.5]], dtype=torch.float64)
    ds = compare(Contraction(), "aoc48", x, torch.tensor([0, 1, 2, 0]), seeds=(0, 1), chips=(0, 1))
    assert ds.attrs["kind"] == "toy contraction" and ds.attrs["placement"] == "toy: the whole loop on the device"
    assert float(ds.agreement.mean()) == 1.0 and ds.attrs["trusted"] == 1 and ds.attrs["max_program_error"] == 0.0
    assert (ds.round_trips.values == ds.iterations.sel(path="device").values).all() and float(ds.energy_j.min()) > 0
    assert ds.hardware_time_s.attrs["description"] == "one round trip per iteration"
    assert float(ds.fixed_point_error.min()) > 0  # every run's seeded input error moved its fixed point
    assert not ds.fixed_point_error.isel(seed=0).equals(ds.fixed_point_error.isel(seed=1))  # keyed by seed


def test_a_kind_missing_a_member_is_refused_when_it_is_defined() -> None:
    before = list(KINDS)
    with pytest.raises(TypeError, match=r"placed kind Incomplete lacks dims, check_inputs"):
        class Incomplete(PlacedModel):
            kind, residual, residual_units = "incomplete", "abs_residual", "units"

            @staticmethod
            def fits(model, profile, placement) -> bool:
                return False
    with pytest.raises(TypeError, match="kind 'toy contraction' is taken"):
        type("Twice", (ContractionOnDevice,), {})
    assert KINDS == before  # neither joined the registry


def test_the_bundled_kinds_are_subclasses_with_the_words_of_their_summaries() -> None:
    from aocsim.execute.registry import placement_class  # noqa: F401 - defines the bundled kinds
    from aocsim.execute.hybrid import HybridSSM

    names = {k.kind for k in KINDS}
    assert {"native DEQ", "tiled DEQ", "hybrid SSM", "twin DEQ", "hybrid Mamba2"} <= names
    assert all(issubclass(k, PlacedModel) for k in KINDS)
    assert HybridSSM.iteration_cap("sequential") == "30 per token" and "per token" in HybridSSM.convergence_rule("0.1", "?")
