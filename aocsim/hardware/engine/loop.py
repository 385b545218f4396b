"""The optical loop users hold: a profile with one weight matrix loaded (`OpticalLoop`, `loop_step`).

    z[k+1] = alpha(k) z[k] + y_opt(f(z[k])) + gamma (z[k] - z[k-1]) + inject(x + b)

The pieces live by responsibility: `programming` (the SLM and the chip's static draws), `optics` (folding
the calibrated pipeline once per weight load), `step` (the one definition of an iteration), `backends`
(eager or compiled execution), `dynamics` (the iteration as a map for `aocsim.solve`), `sources` (every
noise and precision effect), `keys` (keyed random streams). What is drawn when: per chip
(`variation.chip_seed`): variation, dark currents, the emitters' LED cubics; per weight load (`generator`
here): SLM programming error; per inference (`drifted`): a drift step; per iteration (the call's
`generator`): RIN and detector noise, counter (sample, channel) of the iteration's key.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Callable

import numpy as np
import torch

from aocsim.errors import ConvergenceError, InputError
from aocsim.hardware.physics import components as C, sources, temperature
from aocsim.hardware.engine.dynamics import PATIENCE, LoopMap, LoopSolve, loop_activity
from aocsim.hardware.engine import keys, load_light, probes
from aocsim.hardware.engine.sampling import sampled_solve
from aocsim.hardware.physics.optics import FoldedOptics, fold
from aocsim.hardware.profiles.profile import DeviceProfile, load_device
from aocsim.hardware.engine.programming import channel_arrays, dark_offsets, drift_cubics, emitter_cubics, program_slm
from aocsim.hardware.engine.schedules import Constant, Schedule, as_schedule
from aocsim.hardware.engine.step import SIGMOID_PARAMS, Constants, Layout, sigmoid_constants
from aocsim.hardware.engine.validate import check_iterations, check_state
from aocsim.solve.result import SolveResult
from aocsim.threads import one_thread_below

GAINS = ("normalized", "absolute")
Scalar = float | torch.Tensor | Schedule | Callable[[int], float] | None


class OpticalLoop:
    """A device profile with one weight matrix loaded.

    Args:
        device: a `DeviceProfile` or a profile name.
        weight: W [N, N] in [out, in] convention; N must equal the profile's channels.
        bias: b [N] added to the injection before the clip (None = 0).
        alpha: leak (number, 0-dim tensor (trainable), schedule or None for no term).
        beta: loop gain for gain="normalized" (number, tensor or schedule); None with "absolute".
        gamma: momentum coefficient (number, tensor, schedule or None).
        gain: "normalized" (P, Q times beta / N) or "absolute" (times max |W|).
        generator: seed (int), `torch.Generator` (one key drawn from it) or `keys.Key` of the
            static per-weight-load draws (SLM programming error).
        compile: run inference iterations through the compiled backend (`aocsim.hardware.engine.backends`;
            needs a C++ compiler, compiles per layout). Same function, same draws: the results equal
            the eager ones to float rounding.
        tile: which tile of the placement this matrix is (selects its SLM programming error).
        module: which module of the machine holds it (selects the chip's fixed pattern: variation and
            dark currents); None = `tile` (one module per tile, docs/PHYSICS.md section 6).

    Example:
        >>> loop = OpticalLoop("aoc48-twin", torch.randn(48, 48), alpha=0.5, beta=18.6)
        >>> z1 = loop.step(torch.zeros(4, 48), torch.rand(4, 48))
    """

    def __init__(self, device: DeviceProfile | str, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
                 alpha: Scalar = None, beta: Scalar = None, gamma: Scalar = None, gain: str = "normalized",
                 generator: keys.Seed = None, compile: bool = False, tile: int = 0,
                 module: int | None = None) -> None:
        self.device = load_device(device) if isinstance(device, str) else device
        if not isinstance(self.device, DeviceProfile):
            raise InputError(f"device must be a DeviceProfile or a profile name; got {type(device).__name__}")
        v = self.parts = self.device.parts
        self.weight = self._check_weight(weight)
        n = self.n = self.weight.shape[0]
        dtype, dev = self.weight.dtype, self.weight.device
        if gain not in GAINS:
            raise InputError(f"gain = {gain!r}; expected one of {list(GAINS)}")
        if gain == "normalized" and beta is None:
            raise InputError("beta is required with gain='normalized' (P, Q are scaled by beta / N)")
        if gain == "absolute" and beta is not None:
            raise InputError("beta must be None with gain='absolute' (P, Q are scaled by max |W|)")
        if not isinstance(compile, bool):
            raise InputError(f"compile = {compile!r}; expected True or False")
        self.gain, self.compile = gain, compile
        self.alpha, self.beta, self.gamma = (as_schedule(alpha, "alpha"), as_schedule(beta, "beta"),
                                             as_schedule(gamma, "gamma"))
        self.bias = None if bias is None else check_state("bias", bias, n, allow_1d=True).to(dtype)
        module = tile if module is None else module
        self.arrays = channel_arrays(v, n, dtype=dtype, device=dev, tile=module)
        slm = program_slm(v.slm, self.weight, keys.as_key(generator), tile=tile)
        self.programming_error = slm.error
        dark = dark_offsets(v, n, dtype=dtype, device=dev, tile=module)
        self.optics: FoldedOptics = fold(self.arrays, slm.w_pos, slm.w_neg, slm.scale, gain, dark)
        self.coeffs = None if v.nonlinearity.coeffs is None else self._tensor(temperature.loop_sigmoid(v))  # at dT
        # each emitter's cubics [4, N] per path (the chip's spread about the profile's; `emitter_cubics`)
        self.poly_pos, self.poly_neg = emitter_cubics(v, n, dtype=dtype, device=dev, tile=module).unbind(0)
        self.rin_std = sources.rin_std(v.noise)
        self.load_parts = load_light.load_parts(v, self.optics, torch.stack([self.poly_pos, self.poly_neg]),
                                                f"profile {self.device.name!r}, tile {tile}")
        self._var_a, self._var_b = sources.detector_coefficients(self.load_parts)
        bw = v.loop.bandwidth_hz
        self.response = 1.0 if bw is None else 1.0 - math.exp(-2 * math.pi * bw * v.loop.round_trip_s)
        zero = torch.zeros(n, dtype=dtype, device=dev)
        self.drift_state = (zero, zero.clone())
        self._consts: Constants | None = None
        self._node_cache: dict[tuple, tuple[torch.Tensor, ...]] = {}

    def _tensor(self, values: Any) -> torch.Tensor:
        return torch.tensor(np.array(values, dtype=np.float64), dtype=self.weight.dtype, device=self.weight.device)

    def _check_weight(self, weight: Any) -> torch.Tensor:
        if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
            raise InputError(f"weight must be a floating-point tensor [N, N]; got {type(weight).__name__}")
        if weight.ndim != 2 or weight.shape[0] != weight.shape[1]:
            raise InputError(f"weight has shape {tuple(weight.shape)}; expected a square [N, N] matrix "
                             "(any [M, K] matrix runs as a tiled product: aocsim.hardware.engine.tiles)")
        n = self.device.channels
        if n is not None and weight.shape[0] != n:
            raise InputError(f"weight has shape {tuple(weight.shape)}; profile {self.device.name!r} has "
                             f"{n} channels, so expected [{n}, {n}] (map larger models by tiling)")
        if not bool(torch.isfinite(weight).all()):
            raise InputError("weight contains NaN or infinite values")
        return weight

    # -- what an iteration needs -----------------------------------------------------------------
    def constants(self) -> Constants:
        """The step's tensors for this weight load and drift state (built once)."""
        if self._consts is None:
            o, (drift_gain, _) = self.optics, self.drift_state
            s = 1.0 + drift_gain
            op_t = (o.k * s[:, None]).T.contiguous()
            p0 = torch.cat([self.poly_pos[3].expand(self.n), self.poly_neg[3].expand(self.n)])
            op3, _ = C.fold_led(op_t.T, self.poly_pos, self.poly_neg)
            sig = (sigmoid_constants(self.coeffs) if self.coeffs is not None else
                   tuple(self._tensor(0.0) for _ in range(SIGMOID_PARAMS)))
            noise = self._tensor([self.rin_std, self._var_a, 2.0 * self._var_b])
            self._consts = Constants(sig, torch.stack([self.poly_pos, self.poly_neg], dim=1), op_t, op3.T.contiguous(),
                                     o.k1 * s + p0 @ op_t, o.m_det.T.contiguous(), o.c_det, s * o.scaling * o.gain_scale,
                                     s * o.lam, noise)
        return self._consts

    def k0(self) -> torch.Tensor:
        """The folded constant at the node, with the drift's gain and offset, [N]."""
        gain, offset = self.drift_state
        return (1.0 + gain) * self.optics.k0 + offset

    def layout(self) -> Layout:
        v = self.parts
        return Layout(tanh=v.nonlinearity.kind == "tanh", rin=self.rin_std > 0,
                      detector_noise=self._var_a > 0 or self._var_b > 0, momentum=self.gamma is not None,
                      saturate=bool(v.saturation.enabled), respond=self.response != 1.0)

    @property
    def needs_generator(self) -> bool:
        """True when an iteration draws noise (RIN or any detector source)."""
        return self.layout().draws

    @property
    def constant_schedules(self) -> bool:
        return all(s is None or isinstance(s, Constant) for s in (self.alpha, self.beta, self.gamma))

    def node(self, k: int, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(g, alpha + gamma, gamma, low rail, high rail, response) at iteration k, 0-dim tensors."""
        v = self.parts
        g = self.beta(k) if self.gain == "normalized" else 1.0
        a = self.alpha(k) if self.alpha is not None else 0.0
        m = self.gamma(k) if self.gamma is not None else 0.0
        low, high = (v.saturation.low_v, v.saturation.high_v) if v.saturation.enabled else (0.0, 0.0)
        parts = (g, a + m, m, low, high, self.response)
        if any(isinstance(p, torch.Tensor) for p in parts):  # trainable gains keep their graph
            return tuple(torch.as_tensor(p, dtype=like.dtype, device=like.device) for p in parts)
        cache_key = (parts, like.dtype, like.device)
        if cache_key not in self._node_cache:
            self._node_cache = {cache_key: tuple(torch.tensor(p, dtype=like.dtype, device=like.device)
                                                 for p in parts)}
        return self._node_cache[cache_key]

    def injection(self, x: torch.Tensor) -> torch.Tensor:
        """clip(x + b) on the DAC grid: the input term of every iteration."""
        v = self.parts
        u = x if self.bias is None else x + self.bias
        clip = v.injection.clip
        if clip is None:
            return u
        low, high, bits = float(clip[0]), float(clip[1]), v.injection.dac_bits
        return C.dac(u, low, high, None if bits is None else C.code_step(low, high, bits))

    def drifted(self, generator: keys.Seed) -> "OpticalLoop":
        """The same loop one inference later: its output gain and offset, and its emitters' cubics
        (`cubics_drifted`), take one random-walk step."""
        v = self.parts
        if not v.drift.enabled:
            return self
        key = keys.as_key(generator)
        d = keys.normals(key.fold(keys.Stream.DRIFT), (2, self.n), dtype=self.weight.dtype, device=self.weight.device)
        gain, offset = self.drift_state
        return self.cubics_drifted(key)._with(drift_state=(gain + v.drift.gain_std_per_inference * d[0],
                                                           offset + v.drift.offset_std_v_per_inference * d[1]))

    def cubics_drifted(self, generator: keys.Seed) -> "OpticalLoop":
        """The loop with its emitters' cubics one inference's drift later (`programming.drift_cubics`)."""
        cubics = drift_cubics(self.parts.drift, torch.stack([self.poly_pos, self.poly_neg]), keys.as_key(generator))
        return self if cubics is None else self._with(poly_pos=cubics[0], poly_neg=cubics[1])

    def _with(self, **changes: Any) -> "OpticalLoop":
        new = object.__new__(OpticalLoop)
        new.__dict__.update(self.__dict__, _consts=None, **changes)
        return new

    # -- running it --------------------------------------------------------------------------------
    def _map(self, z: torch.Tensor, x: torch.Tensor, generator: keys.Seed, samples: Any, **options: bool
             ) -> tuple[LoopMap, torch.Tensor]:
        dt, dev = self.weight.dtype, self.weight.device
        z = check_state("z", z, self.n, dtype=dt).to(dtype=dt, device=dev)
        x = check_state("x", x, self.n, allow_1d=True, dtype=dt, batch=z.shape[0]).to(dtype=dt, device=dev)
        key = keys.as_key(generator)
        if self.needs_generator and key is None:
            raise InputError("generator is required: the profile draws noise every iteration "
                             "(noise.shot / thermal / dark / rin enabled)")
        ids = keys.check_samples(samples, z.shape[0], dev)
        return LoopMap(self, x, z.shape[0], key, ids, **options), z

    def optical(self, z: torch.Tensor, *, iteration: int = 0, generator: keys.Seed = None,
                samples: Any = None) -> torch.Tensor:
        """y_opt: the optical path's contribution at the loop node, [B, N] volts (`probes.optical_term`)."""
        m, z = self._map(z, torch.zeros(self.n, dtype=self.weight.dtype), generator, samples)
        return probes.optical_term(m, z, iteration)

    def detectors(self, z: torch.Tensor, *, iteration: int = 0, generator: keys.Seed = None,
                  samples: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, Q): the detector signals after the gain, [B, N] each, each path its own noise (`probes`)."""
        m, z = self._map(z, torch.zeros(self.n, dtype=self.weight.dtype), generator, samples)
        return probes.detector_readings(m, z, iteration)

    def step(self, z: torch.Tensor, x: torch.Tensor, *, z_prev: torch.Tensor | None = None,
             generator: keys.Seed = None, iteration: int = 0, samples: Any = None) -> torch.Tensor:
        """One loop iteration z[k] -> z[k+1] (x: [B, N] or [N] volts; z_prev for momentum, zeros if None)."""
        m, z = self._map(z, x, generator, samples)
        if z_prev is not None:
            m.z_prev = check_state("z_prev", z_prev, self.n).to(z)
        m.k = check_iterations("iteration", iteration, allow_zero=True)
        return m(z)

    def iterate(self, z0: torch.Tensor, x: torch.Tensor, iterations: int, *, generator: keys.Seed = None,
                trajectory: bool = False, samples: Any = None) -> torch.Tensor:
        """Run `iterations` steps from z0 (momentum starts with z_prev = 0): the final state [B, N], or the
        trajectory [iterations, B, N]. An eager run of a small state is on one thread
        (`aocsim.threads.one_thread_below`)."""
        from aocsim.solve.core import solve

        iterations = check_iterations("iterations", iterations, allow_zero=not trajectory)
        m, z = self._map(z0, x, generator, samples, record=trajectory)
        with one_thread_below(z.numel(), fused=m.fast):
            out = self._finite(solve(m, z, solver="picard", max_iter=iterations, atol=None, rtol=None).z, iterations)
        return torch.stack(m.states) if trajectory else out

    def _finite(self, z: torch.Tensor, iterations: int) -> torch.Tensor:
        """The state, or a ConvergenceError: a call that returns only a state never returns a diverged one."""
        if not bool(torch.isfinite(z).all()):
            bad = int((~torch.isfinite(z).all(dim=1)).sum())
            raise ConvergenceError(f"the loop diverged: {bad} of {z.shape[0]} samples are not finite after "
                                   f"{iterations} iterations (alpha {_shown(self.alpha)}, beta {_shown(self.beta)}); "
                                   "OpticalLoop.solve reports this per sample as status 'diverged'")
        return z

    def solve(self, x: torch.Tensor, z0: torch.Tensor | None = None, *, generator: keys.Seed = None,
              samples: Any = None, stop: str = "tolerance", atol: float = 1e-6, rtol: float = 1e-5,
              max_iter: int = 2000, trace: bool = False, floor_spreads: float | None = None, patience: int | None = None
              ) -> LoopSolve:
        """Run the loop to its fixed point through `aocsim.solve`; per-sample status and hardware time.

        stop="tolerance": the early stop on the ADC's converted samples s, one every m round trips (`sampling`):
        until ||s[j+1] - s[j]|| <= atol + rtol ||s[j+1]||, or their mean square over `patience` samples (`PATIENCE`)
        puts the state within `floor_spreads` (`FLOOR_SPREADS`) spreads of its fixed point (noise_floor), or it
        diverges, or `max_iter` round trips pass; z the last sample, iterations round trips (samples x m).
        stop="readout": settle, then K ADC samples averaged (z that reading; status per round trip).
        """
        from aocsim.solve.core import FLOOR_SPREADS, solve
        if stop not in ("tolerance", "readout"):
            raise InputError(f"stop = {stop!r}; expected 'tolerance' or 'readout'")
        x = check_state("x", x, self.n, allow_1d=True)
        z = z0 if z0 is not None else torch.zeros(x.shape[0] if x.ndim == 2 else 1, self.n, dtype=self.weight.dtype,
                                                  device=self.weight.device)
        m, z = self._map(z, x, generator, samples, readout=stop == "readout")
        spreads = FLOOR_SPREADS if floor_spreads is None else floor_spreads
        options = dict(atol=atol, rtol=rtol, trace=trace, floor_spreads=spreads)  # readout: the solver's patience
        if patience is not None or stop == "tolerance":  # the early stop: PATIENCE samples
            options["patience"] = PATIENCE if patience is None else patience
        with one_thread_below(z.numel(), fused=m.fast):
            if stop == "readout":
                result = solve(m, z, solver="picard", max_iter=m.total, return_best=False, early_stop=False, **options)
                its, z_out = result.iterations, m.reading()
            else:
                (result, its), z_out = sampled_solve(m, z, max_iter, **options), None  # the ADC's samples
        activity = loop_activity(self.parts, self.n, its.cpu().numpy(), readout=stop == "readout")
        solved = {f.name: getattr(result, f.name) for f in fields(SolveResult)}
        return LoopSolve(**{**solved, "z": result.z if z_out is None else z_out, "iterations": its}, activity=activity)

    def readout(self, x: torch.Tensor, z0: torch.Tensor | None = None, *, generator: keys.Seed = None,
                samples: Any = None) -> torch.Tensor:
        """What the machine reports: settle, then the mean of K ADC samples, one every m round trips (AOC paper)."""
        result = self.solve(x, z0, generator=generator, samples=samples, stop="readout")
        return self._finite(result.z, int(result.iterations.max()))


def _shown(schedule: Schedule | None) -> object:
    return schedule.value if isinstance(schedule, Constant) else schedule


def loop_step(device: DeviceProfile | str, weight: torch.Tensor, z: torch.Tensor, x: torch.Tensor, *,
              bias: torch.Tensor | None = None, alpha: Scalar = None, beta: Scalar = None, gamma: Scalar = None,
              z_prev: torch.Tensor | None = None, gain: str = "normalized", generator: keys.Seed = None,
              iteration: int = 0) -> torch.Tensor:
    """One loop iteration of `device` with `weight` (see `OpticalLoop`; same semantics).

    The static draws (programming error) and then the iteration's noise take keys from `generator`.
    """
    loop = OpticalLoop(device, weight, bias=bias, alpha=alpha, beta=beta, gamma=gamma, gain=gain, generator=generator)
    return loop.step(z, x, z_prev=z_prev, generator=generator, iteration=iteration)
