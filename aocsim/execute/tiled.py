"""A DEQ larger than one machine: its feedback on a grid of optical tiles, the rest digital (`TiledDEQ`).

A DEQ z = alpha z + beta W tanh(z) + U x + b whose state has more variables than the device has
channels cannot be the loop itself (aocsim/execute/native.py). It runs as a hybrid, like an
implicit SSM (aocsim/execute/hybrid.py):

- beta W [N, N] is a `DeviceLinear`: programmed onto a grid of chip-sized tiles, its program fitted
  once per chip and each seed's load calibrated, on the values tanh(z) it sees at the exact path's
  fixed points of the calibration inputs;
- tanh, the leak alpha z, the injection U x + b and the readout V z + c are digital (float64);
- the fixed point is iterated digitally (Picard), one product on the tiles per iteration, until the
  relative residual ||f(z) - z|| / ||f(z)|| is at most the placement's `rtol` (+ `atol`) or for
  `max_iter` iterations; the iterate with the lowest residual is returned.

The map contracts slowly (Lipschitz bound up to 0.95), so the distance to the fixed point can be
many times the residual: the default `rtol` (1e-3) is tight. On a noisy machine the residual floor
(about 0.8 % on aoc48) lies above it; the run then takes `max_iter` iterations and returns its
lowest-residual iterate (status max_iter).

Noise is keyed by sample and iteration: the pass of sample s at iteration k draws at counter s
under visit k (`TokenKeys` with one position), so a sample's run does not depend on its batch.
Results: docs/DEVICE_RUNS.md.
"""

from __future__ import annotations

from typing import Any

import torch

from aocsim.errors import InputError
from aocsim.execute.device_linear import DeviceLinear
from aocsim.execute.map_fit import fit_key, fit_maps, fit_maps_population
from aocsim.execute.token_keys import TokenKeys
from aocsim.execute.placed import PlacedModel
from aocsim.execute.inputs import check_deq_inputs
from aocsim.execute.native import NativeDEQ, exact_deq
from aocsim.execute.placement import TILED, Placement
from aocsim.execute.run import Run, seed_key
from aocsim.execute.ssm_device import CALIBRATION_ROWS
from aocsim.hardware.physics.energy import load_shares
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.machine import machine_words
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.deq import DEQ
from aocsim.solve import solve


class _Iteration:
    """f(z) = alpha z + tiles(tanh z) + u, announcing each pass's visit (the iteration) to the tiles."""

    def __init__(self, model: DEQ, feedback: DeviceLinear, u: torch.Tensor, context: TokenKeys) -> None:
        self.model, self.feedback, self.u, self.context = model, feedback, u, context
        self.position, self.visit = torch.zeros(1, dtype=torch.int64), 0

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        self.context.announce(self.position, self.visit)
        self.visit += 1
        return self.model.config.alpha * z + self.feedback(torch.tanh(z)) + self.u


class TiledDEQ(PlacedModel):
    """A DEQ on one chip of a device whose channels it outgrows (module docstring)."""

    kind = TILED
    residual = "abs_residual"
    residual_units = "model state units (||f(z) - z||_2)"
    dims = ("sample",)

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        """A DEQ the device cannot hold natively; refused (one line) when tiling is off."""
        if not isinstance(model, DEQ) or NativeDEQ.fits(model, profile, placement):
            return False
        if placement.tiling is False:
            raise InputError(f"model state_size = {model.config.state_size} does not fit device {profile.name!r} "
                             f"with {profile.channels} channels and tiling is off; expected state_size = "
                             f"{profile.channels}, or tiling on (aocsim compare --tiling) to run beta W on "
                             "optical tiles")
        return True

    check_inputs = staticmethod(NativeDEQ.check_inputs)

    @staticmethod
    def prepare(model: DEQ, calibration: Any, placement: Placement) -> torch.Tensor:
        """The values tanh(z*) beta W sees at the exact fixed points of the calibration inputs (at most
        CALIBRATION_ROWS of them)."""
        if calibration is None:
            raise InputError("calibration = None; the tiles are fitted on the values tanh(z*) at the exact fixed "
                             "points of calibration inputs, so expected a tensor [B, input_size]")
        x, _ = check_deq_inputs(model, calibration, name="calibration")
        values = torch.tanh(exact_deq(model, x).z)
        pick = torch.randperm(values.shape[0], generator=torch.Generator().manual_seed(0))[:CALIBRATION_ROWS]
        return values[pick]

    @staticmethod
    def exact(model: DEQ, inputs: torch.Tensor, placement: Placement) -> Run:
        out = exact_deq(model, inputs, trace=True)
        return Run(out.logits, out.z, out.solve, None, out.solve.trace)

    @staticmethod
    def timing(profile: DeviceProfile, placement: Placement) -> str:
        """What the hardware time counts."""
        return "beta W's tile products every iteration, " + machine_words(profile, placement.modules)

    @staticmethod
    def fitted_maps(model: DEQ, placement: Placement) -> dict[str, tuple[int, int]]:
        """beta W's: the one map on tiles."""
        n = model.config.state_size
        return {"beta W": (n, n)}

    @staticmethod
    def describe(model: DEQ, placement: Placement) -> str:
        how = placement.tile.words()
        return (f"tiled hybrid (beta W on optical tiles{', ' + how if how else ''}; tanh, leak, U x + b, V z + c "
                "and the iteration digital)")

    def __init__(self, model: DEQ, profile: DeviceProfile, placement: Placement, prepared: torch.Tensor) -> None:
        super().__init__(model, profile, placement, prepared)
        self.values = prepared
        with torch.no_grad():
            self.operator = model.operator().detach()
        chip = self.run_profile
        self.program, = fit_maps(chip, [(self.operator, prepared, fit_key(chip))], placement.tile)  # per chip

    @classmethod
    def fit_population(cls, model: DEQ, profiles: list[DeviceProfile], prepared: torch.Tensor,
                       placement: Placement) -> None:
        """Every point's tile program for beta W fitted together (`fit_maps_population`), remembered for its placement."""
        with torch.no_grad():
            operator = model.operator().detach()
        fit_maps_population(profiles, [(operator, prepared, fit_key(profiles[0]))], placement.tile)

    @property
    def program_error(self) -> float:
        """The matrix error of this chip's tile program for beta W (its last closed-loop round)."""
        return self.program.error

    def load(self, seed: keys.Seed) -> DeviceLinear:
        """beta W on the tiles: programmed, loaded and calibrated with the draws of `seed`."""
        s = self.placement
        return DeviceLinear(self.run_profile, self.operator, None, self.values,
                            generator=seed_key(seed).fold(keys.Stream.LOAD),
                            program=self.program, tile=s.tile)

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None) -> Run:
        """Iterate to the device's fixed point and read out; noise keyed by `seed`, sample and iteration."""
        s = self.placement
        feedback = self.load(seed)
        with torch.no_grad():
            u = self.model.injection(inputs)
            ids = keys.check_samples(samples, u.shape[0], torch.device("cpu"))
            feedback.reset(seed_key(seed).fold(keys.Stream.RUN))
            context = TokenKeys(ids, 1)
            feedback.token_keys = context
            result = solve(_Iteration(self.model, feedback, u, context), torch.zeros_like(u), solver="picard",
                           atol=s.atol, rtol=s.rtol, max_iter=s.max_iter, trace=True)
        # one product per evaluation of the map: k iterations evaluate it k + 1 times (the last shows the residual);
        # a time-multiplexed product's weight loads shared by the samples still iterating in it
        evals = result.iterations.double().numpy() + 1
        activity = (feedback.activity(loads=False) * evals
                    + feedback.load_activity() * load_shares(evals[:, None])[:, 0])
        return Run(self.model.readout(result.z), result.z, result, activity, result.trace)
