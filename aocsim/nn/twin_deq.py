"""A DEQ whose map is the AOC's calibrated pipeline (`TwinDEQ`, model kind "twin_deq").

    u = U x + b                                                   digital, volts [B, N]
    z[k+1] = alpha z[k] + y_opt(f(z[k]); Q(W), beta) + inject(u)   the loop, volts [B, N]
    logits = V z* + c                                             digital

y_opt is the optical path of a noise-free calibrated profile (default
`aoc48-twin`) holding W on its SLM: W / max|W| quantised to `slm_bits` with a
straight-through gradient, distorted, crosstalk, gain beta / N, closed-loop
correction (docs/PHYSICS.md section 2, steps 1-10); inject is the clip (and DAC,
if the profile has one) of step 12. The iteration is the engine's own
(`OpticalLoop.step`, `aocsim.hardware.engine.step.iteration`), never a copy, so
the model is exactly what the machine's nominal pipeline computes. With
`split` = k the input enters channels [0, k) only and the readout reads [k, N)
only: every answer crosses the optical loop. The exact path is that pipeline in
float64, solved by plain fixed-point iteration (the loop's own dynamics).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from aocsim._checks import short
from aocsim.errors import InputError
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.engine.step import led_light, nonlinearity
from aocsim.hardware.physics.sources import without_noise
from aocsim.hardware.profiles.profile import DeviceProfile, load_device
from aocsim.nn.deq import DEQOutput, DigitalMaps, check_loop_config, check_split
from aocsim.solve.backward import Backward, Implicit, equilibrium
from aocsim.solve.result import SolveResult

# The exact path (evaluation) and the twin's training practice (github microsoft/aoc,
# deq_config/default.yaml: plain iteration, at most 100 iterations, relative tolerance 1e-3).
EXACT_SOLVE: dict[str, Any] = {"solver": "picard", "atol": 1e-12, "rtol": 1e-10, "max_iter": 2000}
TRAIN_SOLVE: dict[str, Any] = {"solver": "picard", "atol": 0.0, "rtol": 1e-3, "max_iter": 100}


@dataclass(frozen=True)
class TwinDEQConfig:
    """Architecture of a twin DEQ.

    Attributes:
        state_size: N, the profile's channel count (48 on aoc48-twin, 16 on aoc16-twin).
        input_size: features of x.
        output_size: readout size (classes, or regression outputs).
        split: 0 (input into and readout from every channel) or k in [1, N): input into channels
            [0, k), readout from [k, N).
        profile: a calibrated device profile (name or path); its noise and random static effects
            are switched off (`without_noise(static=True)`): the nominal pipeline.
        slm_bits: bits of the SLM's signed weights on the exact path (9 as on aoc48; None: unquantised).
        alpha: the leak (initial value when trained), in [0, 1).
        train_alpha: train the leak too (else it stays at `alpha`).
    """

    state_size: int
    input_size: int
    output_size: int
    split: int = 0
    profile: str = "aoc48-twin"
    slm_bits: int | None = 9
    alpha: float = 0.5
    train_alpha: bool = False

    def __post_init__(self) -> None:
        check_loop_config(self)
        check_split(self, "channels")
        bits = self.slm_bits
        if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 24):
            raise InputError(f"TwinDEQConfig.slm_bits = {short(bits)}; expected an integer in [2, 24] or None")
        if not isinstance(self.train_alpha, bool):
            raise InputError(f"TwinDEQConfig.train_alpha = {short(self.train_alpha)}; expected True or False")
        nominal_profile(self)  # a bad profile fails here, with the model's config, not at the first forward

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nominal_profile(config: TwinDEQConfig) -> DeviceProfile:
    """The config's profile without noise or random static effects, SLM on `slm_bits`.

    A profile that is not calibrated (no channel count: `ideal`) or has another channel count than
    `state_size` is refused with one line naming both.
    """
    if not isinstance(config.profile, str) or not config.profile.strip():
        raise InputError(f"TwinDEQConfig.profile = {short(config.profile)}; expected a calibrated device "
                         f"profile name with {config.state_size} channels (e.g. aoc48-twin)")
    device = load_device(config.profile)
    n = config.state_size
    if device.channels is None or device.parts.nonlinearity.coeffs is None:
        raise InputError(f"TwinDEQConfig.profile = {config.profile!r} has no calibration (any channel count, "
                         f"no calibrated nonlinearity); expected a calibrated profile with {n} channels "
                         "(aoc48-twin: 48, aoc16-twin: 16)")
    if device.channels != n:
        raise InputError(f"TwinDEQConfig.profile = {config.profile!r} has {device.channels} channels; expected "
                         f"a calibrated profile with state_size = {n} channels (aoc48-twin: 48, aoc16-twin: 16)")
    return without_noise(device, static=True).with_overrides({"slm.bits": config.slm_bits})


class TwinDEQ(DigitalMaps):
    """A DEQ that is the calibrated AOC pipeline (module docstring), trainable end to end.

    Parameters (state_dict names): `weight` W [N, N] ([out, in]; what the SLM is asked to hold,
    before normalisation by max|W| and quantisation: its scale does not matter), `alpha` and `beta`
    (0-dim: the leak and the loop gain of the normalized convention, P, Q times beta / N),
    `inject_weight` U [N, input_size] and `inject_bias` b [N] (volts; U's rows outside [0, k) are
    zero when split), `readout_weight` V [output_size, N] and `readout_bias` c (V's columns outside
    [k, N) are zero when split).

    What a placement on a device needs: `weight`, `alpha`, `beta`; `injection(x)` -> u [B, N], the
    volts the DAC is asked for (the pipeline clips them to the profile's range); `readout(z)` from
    the state [B, N] read by the ADC; `loop(device, generator=...)` loads the same weights into an
    `OpticalLoop` of any profile with N channels (e.g. the noisy "aoc48"), whose `solve(u, ...)`
    runs the machine.

    Args:
        config: the architecture.
        beta: initial loop gain (18.6: the twin's starting value).
        dtype: parameter dtype; float64 is the exact reference.
        generator: RNG of the initial weights.

    Example:
        >>> model = TwinDEQ(TwinDEQConfig(48, 64, 10, split=24), generator=torch.Generator().manual_seed(0))
        >>> model(torch.rand(8, 64)).logits.shape
        torch.Size([8, 10])
    """

    def __init__(self, config: TwinDEQConfig, *, beta: float = 18.6, dtype: torch.dtype = torch.float64,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.config = config
        self.nominal = nominal_profile(config)
        n = config.state_size

        def uniform(*shape: int, bound: float) -> torch.Tensor:
            return (torch.rand(*shape, generator=generator, dtype=dtype) * 2 - 1) * bound

        self.weight = nn.Parameter(uniform(n, n, bound=1.0))
        self.alpha = nn.Parameter(torch.tensor(float(config.alpha), dtype=dtype), requires_grad=config.train_alpha)
        self.beta = nn.Parameter(torch.tensor(float(beta), dtype=dtype))
        self.add_digital_maps(dtype, uniform)

    def loop(self, device: DeviceProfile | str | None = None, *, generator: Any = None,
             weight: torch.Tensor | None = None, beta: float | torch.Tensor | None = None,
             compile: bool = False) -> OpticalLoop:
        """The weights loaded into an `OpticalLoop` (default: the nominal profile; differentiable).

        Args:
            device: a profile or profile name with N channels (None: the model's nominal pipeline).
            generator: seed of the device's static draws (SLM programming error), as `OpticalLoop`.
            weight, beta: replace W or beta (e.g. beta=0.0: the optical path switched off).
            compile: `OpticalLoop`'s compiled backend (inference only).
        """
        device = self.nominal if device is None else device
        return OpticalLoop(device, self.weight if weight is None else weight, alpha=self.alpha,
                           beta=self.beta if beta is None else beta, generator=generator, compile=compile)

    def step(self, z: torch.Tensor, u: torch.Tensor, loop: OpticalLoop | None = None) -> torch.Tensor:
        """One iteration z[k] -> z[k+1] of the nominal pipeline (or `loop`), volts [B, N]."""
        return (self.loop() if loop is None else loop).step(z, u)

    def forward(self, x: torch.Tensor, *, backward: Backward = Implicit(), z0: torch.Tensor | None = None,
                loop: OpticalLoop | None = None, **solve_options: Any) -> DEQOutput:
        """Solve z* = step(z*, U x + b) and read out.

        Args:
            x: inputs [B, input_size] (converted to the model's dtype).
            backward: gradient mode (`Implicit`, `Phantom`, `Unrolled`).
            z0: initial state [B, N] (zeros: the loop starts discharged).
            loop: another loading of the weights (e.g. `self.loop(beta=0.0)`); it must draw no noise.
            **solve_options: `aocsim.solve` settings; default `EXACT_SOLVE` (plain iteration to a
                relative residual of 1e-10); training uses `TRAIN_SOLVE`.
        """
        z, result = self.fixed_point(self.injection(x), backward=backward, z0=z0, loop=loop, **solve_options)
        return DEQOutput(self.readout(z), z, result)

    def fixed_point(self, u: torch.Tensor, *, backward: Backward = Implicit(), z0: torch.Tensor | None = None,
                    loop: OpticalLoop | None = None, **solve_options: Any) -> tuple[torch.Tensor, SolveResult]:
        """z* [B, N] of the loop driven by injection volts u [B, N] (arguments as `forward`), and the solve."""
        loop = self.loop() if loop is None else loop
        if torch.is_grad_enabled():
            loop.constants()  # fold the operators with their graph before the no-grad solve caches them
        z0 = torch.zeros_like(u) if z0 is None else z0
        return equilibrium(lambda z: loop.step(z, u), z0, backward=backward, **{**EXACT_SOLVE, **solve_options})

    def contraction_bound(self) -> float:
        """A Lipschitz bound of the map (< 1: contractive, plain iteration converges from anywhere).

        |alpha| + beta ||K||_2 s, with K = [K_P, K_Q] the folded node operator [N, 2N] on the two LED
        paths (gain excluded) and s = max_z sqrt(P+'(t)^2 + P-'(t)^2) |t'(z)| the steepest slope of
        the nonlinearity and LED cubics (finite differences over z in [-10, 10] V, 1 mV steps). The
        rails and the loop response are 1-Lipschitz and do not enter.
        """
        with torch.no_grad():
            loop = self.loop()
            c = loop.constants()
            z = torch.linspace(-10.0, 10.0, 20001, dtype=c.op_t.dtype, device=c.op_t.device)[:, None]
            p, q = led_light(nonlinearity(z, c.sigmoid, loop.layout().tanh), c.led_coefficients, constant=False)  # every emitter
            dz = z[1, 0] - z[0, 0]
            slope = float((torch.diff(p, dim=0) ** 2 + torch.diff(q, dim=0) ** 2).sqrt().max() / dz)
            norm = float(torch.linalg.matrix_norm(c.op_t, ord=2))
            return abs(float(self.alpha.detach())) + abs(float(self.beta.detach())) * norm * slope
