"""Compiling a DEQ whose state fits one machine onto its calibrated loop (`compile_deq`).

The model (aocsim/nn/deq.py) is z = alpha z + beta W tanh(z) + U x + b, logits = V z + c.
On the device (docs/ARCHITECTURE.md, the loop) one iteration is
z_d <- alpha z_d + y_opt(z_d) + clip(inject), and the mapping is:

- **state**: the device's calibrated sigmoid d u (1 + |u|^c)^(-1/c) + f + g z_d with u = a z_d + b
  plays tanh, so the model's state is z = a z_d + b (a = 1, b = 0 on a tanh device). Substituting
  gives z_d = alpha z_d + beta W tanh(z) / a + (U x + b - (1 - alpha) b_sig) / a, with b_sig = b.
- **W and the gain**: W goes onto the SLM (normalised by max |W|); the loop gain g (normalized
  convention) is the least-squares match of the device's Jacobian d y_opt / d z_d at the state of
  z = 0 to beta W (data-free).
- **DC offsets**: y_opt at the state of z = 0 (LED constants, sigmoid offset f, dark currents,
  the closed loop's offsets) is the device's DC offset; it is subtracted from the injection.
- **injection**: U x + b is computed digitally and enters through the DAC (clip, bits).
- **readout**: the state at the fixed point (stop="tolerance") or the ADC average (stop="readout"),
  mapped back by z = a z_d + b; V z + c is digital.
- **compilation** (`fit=True`, aocsim/execute/fit.py): the least informative state moves onto a dead
  or weak input channel, then (W_p, g, c) are fitted to the calibrated pipeline at the exact path's
  fixed points of the fit inputs (the placement's calibration inputs; no labels).
The placed model that runs it is `aocsim.execute.native.NativeDEQ`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aocsim.errors import InputError
from aocsim.execute.fit import Program, assign_channels, fit_program, weak_channel
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.deq import DEQ
from aocsim.hardware.physics.sources import without_noise

JACOBIAN_STEP = 1e-5  # volts; ~ eps^(1/3): truncation and rounding errors both ~1e-11


@dataclass(frozen=True)
class Compiled:
    """A DEQ compiled for one chip: the program (channel order), the channel order and the state map.

    order [N]: channel k holds model state order[k]; gain, offset: a, b of z = a z_d + b.
    """

    program: Program
    order: torch.Tensor
    gain: float
    offset: float
    fitted: bool


def state_map(profile: DeviceProfile) -> tuple[float, float]:
    """(a, b) of z = a z_d + b: the calibrated sigmoid's input gain and offset; (1, 0) for tanh."""
    if profile.parts.nonlinearity.kind == "tanh":
        return 1.0, 0.0
    coeffs = profile.parts.nonlinearity.coeffs
    return float(coeffs[0]), float(coeffs[1])


def check_fits(model: object, profile: DeviceProfile) -> DEQ:
    """The model as a DEQ whose state fits the device natively, or a one-line InputError."""
    if not isinstance(model, DEQ):
        raise InputError(f"model is a {type(model).__name__}; placing on a device supports DEQ models today")
    n, channels = model.config.state_size, profile.channels
    if channels is not None and n != channels:
        raise InputError(f"model state_size = {n} does not fit device {profile.name!r} with {channels} channels; "
                         "expected equal sizes (a larger DEQ runs tiled: aocsim.execute.tiled)")
    return model


def fit_profile(profile: DeviceProfile) -> DeviceProfile:
    """What a compiler knows of a chip: its calibration, without per-iteration noise or programming error, at
    the temperature it was calibrated at (`environment.temperature_delta_k` 0: docs/PHYSICS.md section 3)."""
    quiet = without_noise(profile)
    if quiet.parts.environment.temperature_delta_k != 0:
        quiet = quiet.with_overrides({"environment.temperature_delta_k": 0.0})
    if quiet.parts.slm.programming_error_levels:  # a random draw per weight load: unknown when compiling
        return quiet.with_overrides({"slm.programming_error_levels": 0.0})
    return quiet


def analytic_program(profile: DeviceProfile, operator: torch.Tensor, alpha: float, a: float, b: float) -> Program:
    """W on the SLM, the Jacobian-matched gain and minus the DC offset (module docstring); channel order."""
    weight = operator.detach()
    z0 = torch.full((operator.shape[0],), -b / a, dtype=weight.dtype)
    unit = OpticalLoop(profile, weight, alpha=alpha, beta=1.0)  # y_opt is linear in the gain g
    # Central differences: the calibrated sigmoid's |u|^c form has no autograd derivative at u = 0.
    steps = JACOBIAN_STEP * torch.eye(operator.shape[0], dtype=weight.dtype)
    jac = ((unit.optical(z0 + steps) - unit.optical(z0 - steps)) / (2 * JACOBIAN_STEP)).T
    beta = float((jac * weight).sum() / (jac * jac).sum())
    offset = OpticalLoop(profile, weight, alpha=alpha, beta=beta).optical(z0[None])[0]
    return Program(weight, beta, -offset)


def compile_deq(model: DEQ, profile: DeviceProfile, *, fit: bool = True, z_star: torch.Tensor | None = None
                ) -> Compiled:
    """Compile `model` for the chip `profile` describes (see the module docstring).

    z_star: the exact path's fixed points [B, N] of the fit inputs (required with fit=True; no labels).
    """
    model = check_fits(model, profile)
    known = fit_profile(profile)
    a, b = state_map(profile)
    alpha = float(model.config.alpha)
    with torch.no_grad():
        operator = model.operator().detach()
    n = operator.shape[0]
    if not fit:
        return Compiled(analytic_program(known, operator, alpha, a, b), torch.arange(n), a, b, False)
    if z_star is None:
        raise InputError("fit = True needs the exact fixed points of fit inputs (z_star); expected the "
                         "placement's calibration inputs")
    order = assign_channels(operator, z_star, weak_channel(known, n))
    operator_c, z_c = operator[order][:, order], z_star[:, order]
    start = analytic_program(known, operator_c, alpha, a, b)
    program = fit_program(known, start, alpha=alpha, operator=operator_c, z_star=z_c, sigmoid_gain=a,
                          sigmoid_offset=b)
    return Compiled(program, order, a, b, True)
