"""A twin-native DEQ on a device: the same weights programmed, no compilation fit (`TwinPlaced`).

A `TwinDEQ` (aocsim/nn/twin_deq.py) is defined by the calibrated pipeline itself: its map is the
engine's loop step on a nominal, noise-free profile, so on a device of the same channel count it
runs as it is. Per seed its W is loaded onto the device's SLM (`TwinDEQ.loop`: quantisation and the
load's programming draws), and every input is solved on that loop (one drift step, then the
per-iteration noise of its sample), the digital U x + b entering through the DAC and V z + c read
from the state. Nothing is fitted per chip: what differs between the nominal pipeline and a chip (its
fixed pattern, the programming error, noise) is the device's error, unless the placement's `probes`
refit the digital readout per load on probe inputs (`Probes`: what a chip can measure, no labels). The exact path is the nominal
pipeline in float64 (`TwinDEQ.forward`). docs/TWIN_MODELS.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from aocsim._numerics import least_squares
from aocsim.errors import InputError
from aocsim.execute.placed import PlacedModel
from aocsim.execute.inputs import check_deq_inputs
from aocsim.execute.native import NativeDEQ
from aocsim.execute.placement import TWIN, Placement
from aocsim.execute.run import Run, seed_key
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.twin_deq import TwinDEQ


class TwinPlaced(PlacedModel):
    """A `TwinDEQ` on one chip of a device (module docstring)."""

    kind = TWIN
    residual = "abs_residual"
    residual_units = "device volts (||f(z) - z||_2)"
    residual_cf_units = "V"
    dims = ("sample",)
    state_words = "z, f(z): consecutive ADC samples of the loop's state, device volts"

    @staticmethod
    def untrusted_cause(attrs: Mapping[str, Any]) -> str:
        return ("the chip's static errors move the fixed points away from the nominal pipeline's (--probes N refits "
                "the readout per weight load); --set noise.multiplier=0 tells static errors from noise")

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        """A twin DEQ on a profile of its channel count; another count is a one-line error."""
        if not isinstance(model, TwinDEQ):
            return False
        n = model.config.state_size
        if profile.channels is None or profile.parts.nonlinearity.coeffs is None:
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
    def prepare(model: TwinDEQ, calibration: Any, placement: Placement) -> Probes | None:
        """Nothing to fit (the same weights on every chip); with `probes`, the probe inputs and their
        nominal outputs, which each load's readout is refitted to (`Probes`)."""
        return Probes.choose(model, calibration, placement.probes) if placement.probes else None

    @staticmethod
    def exact(model: TwinDEQ, inputs: torch.Tensor, placement: Placement) -> Run:
        with torch.no_grad():
            out = model(inputs, trace=placement.stop == "tolerance")
        return Run(out.logits, out.z, out.solve, None, out.solve.trace)

    @staticmethod
    def describe(model: TwinDEQ, placement: Placement) -> str:
        readout = (f"V z + c refitted per weight load on {placement.probes} probe inputs (not in the per-inference "
                   "time and energy)" if placement.probes else "V z + c as trained")
        return f"twin-native (its W on the SLM as trained, no compilation fit; U x + b digital, {readout})"

    timing = staticmethod(NativeDEQ.timing)

    def __init__(self, model: TwinDEQ, profile: DeviceProfile, placement: Placement, prepared: Probes | None
                 ) -> None:
        super().__init__(model, profile, placement, prepared)
        self.probes = prepared

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None) -> Run:
        """Load W with `seed`'s programming draws, then solve every input on the loop and read out."""
        s, key = self.placement, seed_key(seed)
        run_key = key.fold(keys.Stream.RUN)
        with torch.no_grad():
            loop = self.model.loop(self.run_profile, generator=key.fold(keys.Stream.LOAD)).drifted(run_key)
            solve = dict(stop=s.stop, max_iter=s.max_iter, atol=s.atol, rtol=s.rtol)
            result = loop.solve(self.model.injection(inputs), generator=run_key, samples=samples,
                                trace=s.stop == "tolerance", **solve)
            readout = self.model.readout if self.probes is None else self.probes.readout(
                loop.solve(self.model.injection(self.probes.inputs), generator=key.fold(keys.Stream.CALIBRATION),
                           **solve).z)
        return Run(readout(result.z), result.z, result, result.activity, result.trace)


@dataclass(frozen=True)
class Probes:
    """Per-load calibration of a twin DEQ's readout (placement option `probes`; docs/TWIN_MODELS.md section 3).

    A chip's static errors (its variation, the load's programming error, its emitters' cubics) move the
    fixed points; the digital readout can follow them. After a weight load the chip solves a few probe
    inputs (rows of the calibration inputs spread evenly over them, no labels), and V z + c is refitted by
    least squares on its readout channels so that the chip's states give the nominal pipeline's outputs
    for those probes (the exact path's, computed digitally).
    """

    inputs: torch.Tensor  # [P, input_size]
    targets: torch.Tensor  # [P, output_size]: the nominal pipeline's outputs
    channels: torch.Tensor  # the readout channels (V's non-zero columns)

    @classmethod
    def choose(cls, model: TwinDEQ, calibration: Any, probes: int) -> "Probes":
        channels = torch.nonzero(model.readout_mask.any(0)).flatten()
        if calibration is None:
            raise InputError(f"probes = {probes}; the probe inputs are drawn from the calibration inputs, so expected "
                             "calibration inputs (compare's calibration=, or a bundled model's task)")
        x, _ = check_deq_inputs(model, calibration, name="calibration")
        if not len(channels) + 1 <= probes <= x.shape[0]:
            raise InputError(f"probes = {probes}; the readout fit has {len(channels) + 1} coefficients per output and "
                             f"the calibration inputs {x.shape[0]} rows, so expected 0 or an integer in "
                             f"[{len(channels) + 1}, {x.shape[0]}]")
        x = x[torch.linspace(0, x.shape[0] - 1, probes, dtype=torch.float64).round().long()]
        with torch.no_grad():
            return cls(x, model(x).logits.double(), channels)

    def features(self, z: torch.Tensor) -> torch.Tensor:
        return torch.cat([z[:, self.channels].double(), z.new_ones(z.shape[0], 1, dtype=torch.float64)], dim=1)

    def readout(self, z_probes: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """The refitted readout z -> [z_readout, 1] coef, from the chip's states at the probes."""
        coef = least_squares(self.features(z_probes), self.targets)
        return lambda z: (self.features(z) @ coef).to(z.dtype)
