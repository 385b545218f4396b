"""A DEQ placed natively on one machine (its state fits the device's channels).

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
  fixed points of the fit inputs (the task's training images by default; no labels).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aocsim.errors import InputError
from aocsim.execute.fit import Program, assign_channels, fit_program, weak_channel
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.profiles.profile import DeviceProfile, load_device
from aocsim.nn.deq import DEQ
from aocsim.solve.result import SolveResult
from aocsim.hardware.physics.sources import without_noise

EXACT_TOLERANCE = 1e-12  # the exact fixed points the fit matches: far below any device effect
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


@dataclass(frozen=True)
class DeviceRun:
    """One batch on the device: logits [B, C], the model-unit state z [B, N] (model order), the solve,
    and the time on the machine [B] s (until the stop; the whole settle + ADC window with a readout)."""

    logits: torch.Tensor
    z: torch.Tensor
    solve: SolveResult
    hardware_time_s: torch.Tensor


def state_map(profile: DeviceProfile) -> tuple[float, float]:
    """(a, b) of z = a z_d + b: the calibrated sigmoid's input gain and offset; (1, 0) for tanh."""
    if profile["nonlinearity.kind"] == "tanh":
        return 1.0, 0.0
    coeffs = profile["nonlinearity.coeffs"]
    return float(coeffs[0]), float(coeffs[1])


def check_fits(model: object, profile: DeviceProfile) -> DEQ:
    """The model as a DEQ whose state fits the device natively, or a one-line InputError."""
    if not isinstance(model, DEQ):
        raise InputError(f"model is a {type(model).__name__}; placing on a device supports DEQ models today")
    n, channels = model.config.state_size, profile.channels
    if channels is not None and n != channels:
        raise InputError(f"model state_size = {n} does not fit device {profile.name!r} with {channels} channels; "
                         "expected equal sizes (tiled DEQs are not supported yet)")
    return model


def fit_profile(profile: DeviceProfile) -> DeviceProfile:
    """What a compiler knows of a chip: its calibration, without per-iteration noise or programming error."""
    quiet = without_noise(profile)
    if quiet["slm.programming_error_levels"]:  # a random draw per weight load: unknown when compiling
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


def default_fit_inputs(model: DEQ) -> torch.Tensor:
    """The training images of the model's task (from its card); an InputError if there are none."""
    task = getattr(model, "card", {}).get("task")
    if task != "digits":
        raise InputError(f"fit_inputs is required: model task = {task!r} has no bundled training inputs")
    from aocsim.tasks.digits import load_split

    return load_split(model.weight.dtype).x_train


def fit_inputs_or_default(model: DEQ, fit_inputs: object) -> torch.Tensor:
    """`fit_inputs` checked as [B >= 1, input_size], or the task's training images when None."""
    x = default_fit_inputs(model) if fit_inputs is None else fit_inputs
    k = model.config.input_size
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != k:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise InputError(f"fit_inputs has shape {shape}; expected a tensor [B >= 1, {k}] (the model's input_size)")
    return x


def compile_deq(model: DEQ, profile: DeviceProfile, *, fit: bool = True,
                fit_inputs: torch.Tensor | None = None) -> Compiled:
    """Compile `model` for the chip `profile` describes (see the module docstring)."""
    model = check_fits(model, profile)
    known = fit_profile(profile)
    a, b = state_map(profile)
    alpha = float(model.config.alpha)
    with torch.no_grad():
        operator = model.operator().detach()
    n = operator.shape[0]
    if not fit:
        return Compiled(analytic_program(known, operator, alpha, a, b), torch.arange(n), a, b, False)
    x = fit_inputs_or_default(model, fit_inputs)
    with torch.no_grad():
        z_star = model(x, solver="anderson", atol=EXACT_TOLERANCE, rtol=0.0, max_iter=500).z
    order = assign_channels(operator, z_star, weak_channel(known, n))
    operator_c, z_c = operator[order][:, order], z_star[:, order]
    start = analytic_program(known, operator_c, alpha, a, b)
    program = fit_program(known, start, alpha=alpha, operator=operator_c, z_star=z_c, sigmoid_gain=a,
                          sigmoid_offset=b)
    return Compiled(program, order, a, b, True)


class PlacedDEQ:
    """A compiled DEQ loaded onto a chip (one SLM weight load, keyed by `generator`).

    Example:
        >>> placed = place_deq(load_model("digits-deq48"), "aoc48", generator=0)
        >>> run = placed.run(load_split().x_test, generator=1)
    """

    def __init__(self, model: DEQ, profile: DeviceProfile, compiled: Compiled, *,
                 generator: keys.Seed = None) -> None:
        self.model, self.profile, self.compiled = check_fits(model, profile), profile, compiled
        p = compiled.program
        self.loop = OpticalLoop(profile, p.weight, alpha=float(model.config.alpha), beta=p.beta,
                                generator=generator)
        self.inverse = torch.argsort(compiled.order)

    def injection(self, x: torch.Tensor) -> torch.Tensor:
        """What the DAC receives, [B, N] volts in channel order: (U x + b - (1 - alpha) b_sig) / a + c."""
        c = self.compiled
        u = self.model.injection(x)[:, c.order]
        return (u - (1.0 - self.model.config.alpha) * c.offset) / c.gain + c.program.correction

    def run(self, x: torch.Tensor, *, generator: keys.Seed = None, samples: object = None,
            stop: str = "tolerance", max_iter: int = 2000, atol: float = 1e-6, rtol: float = 1e-5,
            trace: bool = False) -> DeviceRun:
        """Solve on the device (one inference: one drift step) and read out.

        x: inputs [B, input_size]; generator keys the drift step and every iteration's noise;
        samples: sample indices [B] (noise independent of the batch); stop: "tolerance" or "readout";
        atol, rtol: the device-unit tolerance of stop="tolerance"; trace: keep the residual per iteration.
        """
        key = keys.as_key(generator)
        with torch.no_grad():
            loop = self.loop.drifted(key.fold(0)) if key is not None else self.loop
            result = loop.solve(self.injection(x), generator=None if key is None else key.fold(1),
                                samples=samples, stop=stop, max_iter=max_iter, atol=atol, rtol=rtol, trace=trace)
            z = (self.compiled.gain * result.z + self.compiled.offset)[:, self.inverse]
            time = result.hardware_time_s
            if stop == "readout":  # the status says where the residual settled; the machine runs the window
                v = self.profile.values
                window = (v["readout.settle_iterations"] + (v["readout.samples"] - 1)
                          * v["readout.sample_interval_iterations"] + 1)
                time = torch.full_like(time, window * float(v["loop.round_trip_s"]))
            return DeviceRun(self.model.readout(z), z, result, time)


def resolve_profile(device: DeviceProfile | str, chip: int | None = None) -> DeviceProfile:
    """A profile from a name or a profile, with `variation.chip_seed` = chip when given."""
    profile = load_device(device) if isinstance(device, str) else device
    if not isinstance(profile, DeviceProfile):
        raise InputError(f"device = {device!r}; expected a profile name or a DeviceProfile")
    if chip is None:
        return profile
    if isinstance(chip, bool) or not isinstance(chip, int) or chip < 0:
        raise InputError(f"chip = {chip!r}; expected an integer >= 0 (the profile's variation.chip_seed)")
    return profile.with_overrides({"variation.chip_seed": chip})


def place_deq(model: DEQ, device: DeviceProfile | str, *, fit: bool = True, generator: keys.Seed = None,
              chip: int | None = None, fit_inputs: torch.Tensor | None = None) -> PlacedDEQ:
    """Compile `model` for `device` (chip `chip`) and load it (programming draws keyed by `generator`).

    Args:
        model: a DEQ whose state_size equals the device's channels.
        device: a profile name or `DeviceProfile`.
        fit: run the compilation fit (aocsim/execute/fit.py); False = the analytic mapping only.
        generator: seed / Generator / Key of the SLM programming error.
        chip: the chip (`variation.chip_seed`); None keeps the profile's.
        fit_inputs: inputs [B, input_size] whose exact fixed points the fit matches (default: the
            task's training images).
    """
    profile = resolve_profile(device, chip)
    return PlacedDEQ(model, profile, compile_deq(model, profile, fit=fit, fit_inputs=fit_inputs),
                     generator=generator)
