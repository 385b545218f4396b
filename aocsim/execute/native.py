"""A DEQ whose state fits one machine, run natively: the loop iterates it (`NativeDEQ`).

Per chip the model is compiled once (aocsim/execute/deq_compile.py: the state map, the channel
order, the program fitted to the calibrated pipeline); per seed the program is loaded onto the SLM
(programming draws keyed by the seed) and every input is solved on the loop (one drift step, then
per-iteration noise keyed by the seed, sample and channel). U x + b and V z + c are digital. What
the machine did is the loop's own record (`aocsim.hardware.engine.dynamics.loop_activity`).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from aocsim.execute.deq_compile import Compiled, compile_deq
from aocsim.execute.placed import PlacedModel
from aocsim.execute.inputs import check_deq_inputs
from aocsim.execute.placement import NATIVE, Placement
from aocsim.execute.run import Run, seed_key
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.dynamics import stop_rule
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.deq import DEQ
from aocsim.solve.result import SolveResult

EXACT_TOLERANCE = 1e-12  # the exact path's absolute tolerance: far below any device effect


def exact_deq(model: DEQ, x: torch.Tensor, trace: bool = False) -> Any:
    """The DEQ's exact path (float64 Anderson to EXACT_TOLERANCE), without gradients."""
    with torch.no_grad():
        return model(x, solver="anderson", atol=EXACT_TOLERANCE, rtol=0.0, max_iter=500, trace=trace)


class NativeDEQ(PlacedModel):
    """`model` compiled for the chip `profile` describes (module docstring)."""

    kind = NATIVE
    residual = "abs_residual"
    residual_units = "model state units (||f(z) - z||_2)"
    dims = ("sample",)
    state_words = "z, f(z): consecutive ADC samples of the loop's state, device volts"

    @staticmethod
    def untrusted_cause(attrs: Mapping[str, Any]) -> str:
        return ("the compiled loop computes another map than the model's on this device (the compilation fit or "
                "too few bits; docs/DEVICE_RUNS.md section 1); --set noise.multiplier=0 tells static errors from noise")

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        return isinstance(model, DEQ) and (profile.channels is None or model.config.state_size == profile.channels)

    @staticmethod
    def check_inputs(model: DEQ, inputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return check_deq_inputs(model, inputs, targets)

    @staticmethod
    def prepare(model: DEQ, calibration: Any, placement: Placement) -> torch.Tensor | None:
        """The exact fixed points of the calibration inputs, which the compilation fit matches (fit only)."""
        if not placement.fit:
            return None
        if calibration is None:
            from aocsim.errors import InputError

            raise InputError("calibration = None; the compilation fit (fit=True) matches the exact fixed points of "
                             "calibration inputs, so expected a tensor [B, input_size] (or fit=False)")
        x, _ = check_deq_inputs(model, calibration, name="calibration")
        return exact_deq(model, x).z

    @staticmethod
    def exact(model: DEQ, inputs: torch.Tensor, placement: Placement) -> Run:
        out = exact_deq(model, inputs, trace=placement.stop == "tolerance")
        return Run(out.logits, out.z, out.solve, None, out.solve.trace)

    @staticmethod
    def describe(model: DEQ, placement: Placement) -> str:
        return "native (W on the SLM, U x + b and V z + c digital)"

    @staticmethod
    def timing(profile: DeviceProfile, placement: Placement) -> str:
        """What the hardware time counts (`loop_activity`)."""
        return stop_rule(profile.parts.readout, readout=placement.stop == "readout")

    def __init__(self, model: DEQ, profile: DeviceProfile, placement: Placement, prepared: Any) -> None:
        super().__init__(model, profile, placement, prepared)
        self.compiled: Compiled = compile_deq(model, self.run_profile, fit=placement.fit, z_star=prepared)
        self.inverse = torch.argsort(self.compiled.order)

    def injection(self, x: torch.Tensor) -> torch.Tensor:
        """What the DAC receives, [B, N] volts in channel order: (U x + b - (1 - alpha) b_sig) / a + c."""
        c = self.compiled
        u = self.model.injection(x)[:, c.order]
        return (u - (1.0 - self.model.config.alpha) * c.offset) / c.gain + c.program.correction

    def load(self, seed: keys.Seed) -> OpticalLoop:
        """The program on the SLM: one weight load, its programming error keyed by `seed`."""
        p = self.compiled.program
        return OpticalLoop(self.run_profile, p.weight, alpha=float(self.model.config.alpha), beta=p.beta,
                           generator=seed_key(seed).fold(keys.Stream.LOAD))

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None) -> Run:
        """Load with `seed`, then solve every input on the loop (one inference each: a drift step, then
        the per-iteration noise of its sample index, `samples`, default 0 ... B - 1) and read out."""
        s, key = self.placement, seed_key(seed).fold(keys.Stream.RUN)
        traced = s.stop == "tolerance"
        with torch.no_grad():
            loop = self.load(seed).drifted(key)  # the drift step and every iteration's noise: purposes of the run
            result = loop.solve(self.injection(inputs), generator=key, samples=samples, stop=s.stop,
                                max_iter=s.max_iter, atol=s.atol, rtol=s.rtol, trace=traced)
        a, c = self.compiled.gain, self.compiled
        z = (a * result.z + c.offset)[:, self.inverse]  # z = a z_d + b, in model order
        trace = a * result.trace if traced else None
        solve = SolveResult(z, result.status, result.iterations, a * result.abs_residual, result.rel_residual, trace,
                            result.solver)
        return Run(self.model.readout(z), z, solve, result.activity, trace)
