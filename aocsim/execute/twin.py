"""A twin-native DEQ on a device: the same weights programmed, no compilation fit (`TwinPlaced`).

A `TwinDEQ` (aocsim/nn/twin_deq.py) is defined by the calibrated pipeline itself: its map is the
engine's loop step on a nominal, noise-free profile, so on a device of the same channel count it
runs as it is. Per seed its W is loaded onto the device's SLM (`TwinDEQ.loop`: quantisation and the
load's programming draws), and every input is solved on that loop (one drift step, then the
per-iteration noise of its sample), the digital U x + b entering through the DAC and V z + c read
from the state. Nothing is fitted per chip: what differs between the nominal pipeline and a chip (its
fixed pattern, the programming error, noise) is the device's error. The exact path is the nominal
pipeline in float64 (`TwinDEQ.forward`). docs/TWIN_MODELS.md.
"""

from __future__ import annotations

from typing import Any

import torch

from aocsim.errors import InputError
from aocsim.execute.inputs import check_deq_inputs
from aocsim.execute.placement import TWIN, Placement
from aocsim.execute.run import Run, seed_key
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.dynamics import stop_rule
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.twin_deq import TwinDEQ


class TwinPlaced:
    """A `TwinDEQ` on one chip of a device (module docstring)."""

    kind = TWIN
    residual = "abs_residual"
    residual_units = "device volts (||f(z) - z||_2)"
    dims = ("sample",)

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        """A twin DEQ on a profile of its channel count; another count is a one-line error."""
        if not isinstance(model, TwinDEQ):
            return False
        n = model.config.state_size
        if profile.channels is None or profile.values["nonlinearity.coeffs"] is None:
            raise InputError(f"device {profile.name!r} has no calibration (any channel count, no calibrated "
                             f"nonlinearity); the twin DEQ is defined by {model.config.profile!r}'s calibrated "
                             f"pipeline, so expected a calibrated profile with {n} channels")
        if profile.channels != n:
            raise InputError(f"device {profile.name!r} has {profile.channels} channels; the twin DEQ is defined on "
                             f"{model.config.profile!r} with {n}, so expected a profile with {n} channels")
        return True

    @staticmethod
    def check_inputs(model: TwinDEQ, inputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return check_deq_inputs(model, inputs, targets)

    @staticmethod
    def prepare(model: TwinDEQ, calibration: Any, placement: Placement) -> None:
        return None  # the same weights on every chip: nothing to fit

    @staticmethod
    def exact(model: TwinDEQ, inputs: torch.Tensor, placement: Placement) -> Run:
        with torch.no_grad():
            out = model(inputs, trace=placement.stop == "tolerance")
        return Run(out.logits, out.z, out.solve, None, out.solve.trace)

    @staticmethod
    def describe(model: TwinDEQ, placement: Placement) -> str:
        return "twin-native (its W on the SLM as trained, no compilation fit; U x + b and V z + c digital)"

    @staticmethod
    def timing(profile: DeviceProfile, placement: Placement) -> str:
        return stop_rule(profile.values, readout=placement.stop == "readout")

    def __init__(self, model: TwinDEQ, profile: DeviceProfile, placement: Placement, prepared: None) -> None:
        self.model, self.profile, self.placement = model, profile, placement

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None) -> Run:
        """Load W with `seed`'s programming draws, then solve every input on the loop and read out."""
        s, key = self.placement, seed_key(seed)
        run_key = key.fold(keys.Stream.RUN)
        with torch.no_grad():
            loop = self.model.loop(self.profile, generator=key.fold(keys.Stream.LOAD)).drifted(run_key)
            result = loop.solve(self.model.injection(inputs), generator=run_key, samples=samples, stop=s.stop,
                                max_iter=s.max_iter, atol=s.atol, rtol=s.rtol, trace=s.stop == "tolerance")
        return Run(self.model.readout(result.z), result.z, result, result.activity, result.trace)
