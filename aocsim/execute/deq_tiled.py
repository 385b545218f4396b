"""A DEQ larger than one machine: its feedback on a grid of optical tiles, the rest digital.

A DEQ z = alpha z + beta W tanh(z) + U x + b whose state has more variables than the device has
channels cannot be the loop itself (aocsim/execute/deq.py). It runs as a hybrid, like an implicit
SSM (aocsim/execute/ssm.py):

- beta W [N, N] is a `DeviceLinear`: programmed onto a grid of chip-sized tiles, fitted and
  calibrated on the values tanh(z) it sees at the exact path's fixed points of the fit inputs
  (the task's training images by default);
- tanh, the leak alpha z, the injection U x + b and the readout V z + c are digital (float64);
- the fixed point is iterated digitally (Picard), one pass of every tile per iteration, until the
  relative residual ||f(z) - z|| / ||f(z)|| is below `rtol` (default `DEVICE_TOL`) or for `max_iter`
  iterations; the iterate with the lowest residual is returned.

Noise is keyed by sample and iteration: the pass of sample s at iteration k draws at counter s
under visit k (`TokenKeys` with one position), so a sample's run does not depend on its batch.
Hardware time: the tiles of the grid one after another on one chip, one round trip each, per
iteration. Results: docs/DEVICE_RUNS.md.
"""

from __future__ import annotations

import torch

from aocsim.errors import InputError
from aocsim.execute.deq import EXACT_TOLERANCE, DeviceRun, fit_inputs_or_default
from aocsim.execute.ssm import CALIBRATION_ROWS, DeviceLinear, TokenKeys
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.hardware.engine.tiles import tile_options
from aocsim.nn.deq import DEQ
from aocsim.solve import solve

# Relative residual at which a tiled run stops. The map contracts slowly (Lipschitz bound up to 0.95),
# so the distance to the fixed point can be many times the residual: stop tight. On a noisy machine
# the residual floor (about 0.8 % on aoc48) lies above it; the run then takes MAX_ITER iterations and
# returns its lowest-residual iterate (status max_iter).
DEVICE_TOL = 1e-3
MAX_ITER = 100


def fits_natively(model: DEQ, profile: DeviceProfile) -> bool:
    """Whether the model's state is the device's loop (state_size == channels, or any size)."""
    return profile.channels is None or model.config.state_size == profile.channels


def check_placement(model: object, profile: DeviceProfile, *, tiling: bool = True) -> bool:
    """True when `model` (a DEQ) runs tiled on `profile`, False when natively; a one-line InputError
    when it is not a DEQ, or outgrows the device with tiling disallowed."""
    if not isinstance(model, DEQ):
        raise InputError(f"model is a {type(model).__name__}; expected a DEQ")
    if fits_natively(model, profile):
        return False
    if not tiling:
        raise InputError(f"model state_size = {model.config.state_size} does not fit device {profile.name!r} "
                         f"with {profile.channels} channels and tiling is disallowed; expected state_size = "
                         f"{profile.channels}, or tiling=True (aocsim compare --tiling) to run beta W on "
                         "optical tiles")
    return True


def placement(model: DEQ, profile: DeviceProfile, averaging: int = 1, predistort: bool = False) -> str:
    """How `model` goes onto `profile`, in words (a Dataset attribute)."""
    if fits_natively(model, profile):
        return "native (W on the SLM, U x + b and V z + c digital)"
    how = tile_options(averaging, predistort)
    return f"tiled hybrid (beta W on optical tiles{', ' + how if how else ''}; tanh, leak, U x + b, V z + c and the iteration digital)"


class _Iteration:
    """f(z) = alpha z + tiles(tanh z) + u, announcing each pass's visit (the iteration) to the tiles."""

    def __init__(self, model: DEQ, feedback: DeviceLinear, u: torch.Tensor, context: TokenKeys,
                 round_trip_s: float) -> None:
        self.model, self.feedback, self.u, self.context = model, feedback, u, context
        self.position, self.visit = torch.zeros(1, dtype=torch.int64), 0
        self.round_trip_s = round_trip_s  # per iteration: every tile once (aocsim.solve's hardware time)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        self.context.announce(self.position, self.visit)
        self.visit += 1
        return self.model.config.alpha * z + self.feedback(torch.tanh(z)) + self.u


class TiledDEQ:
    """A DEQ on a device whose channels it outgrows (module docstring); one weight load.

    Args:
        model: the DEQ. profile: the chip. generator: key of the weight load and its calibration.
        fit_inputs: inputs whose exact fixed points give the calibration values (default: the task's
            training images). tile_size, partial_sums: as in `TiledMatrix`. averaging: tile passes
            averaged per product (`DeviceLinear`). predistort: the emitter drive linearised (`TiledMatrix`).
    """

    def __init__(self, model: DEQ, profile: DeviceProfile, *, generator: keys.Seed,
                 fit_inputs: torch.Tensor | None = None, tile_size: int | None = None,
                 partial_sums: str = "analog", averaging: int = 1, predistort: bool = False) -> None:
        key = keys.as_key(generator)
        if key is None:
            raise InputError("generator = None; placing the model draws its weight load, so expected a seed, "
                             "torch.Generator or Key")
        x = fit_inputs_or_default(model, fit_inputs)
        with torch.no_grad():
            z_star = model(x, solver="anderson", atol=EXACT_TOLERANCE, rtol=0.0, max_iter=500).z
            values = torch.tanh(z_star)
            pick = torch.randperm(values.shape[0], generator=torch.Generator().manual_seed(0))[:CALIBRATION_ROWS]
            operator = model.operator().detach()
        self.model, self.profile = model, profile
        self.feedback = DeviceLinear(profile, operator, None, values[pick], generator=key,
                                     tile_size=tile_size, partial_sums=partial_sums, averaging=averaging,
                                     predistort=predistort)

    @property
    def passes_per_iteration(self) -> int:
        return self.feedback.passes_per_call

    def run(self, x: torch.Tensor, *, generator: keys.Seed, samples: torch.Tensor | None = None,
            max_iter: int = MAX_ITER, atol: float = 0.0, rtol: float = DEVICE_TOL, trace: bool = False) -> DeviceRun:
        """Iterate to the device's fixed point and read out; noise keyed by `generator`, samples and iteration."""
        if keys.as_key(generator) is None:
            raise InputError("generator = None; a device run draws noise on every tile pass, so expected a seed, "
                             "torch.Generator or Key")
        with torch.no_grad():
            u = self.model.injection(x)  # checks x: [B, input_size], finite
            samples = keys.check_samples(samples, u.shape[0], torch.device("cpu"))
            self.feedback.reset(generator)
            context = TokenKeys(samples, 1)
            self.feedback.token_keys = context
            round_trip = float(self.profile.values["loop.round_trip_s"]) * self.passes_per_iteration
            try:
                fn = _Iteration(self.model, self.feedback, u, context, round_trip)
                result = solve(fn, torch.zeros_like(u), solver="picard", atol=atol, rtol=rtol, max_iter=max_iter,
                               trace=trace)
            finally:
                self.feedback.token_keys = None
            return DeviceRun(self.model.readout(result.z), result.z, result, result.hardware_time_s)
