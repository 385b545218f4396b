"""The optical loop: one iteration of the virtual AOC (`OpticalLoop`, `loop_step`).

    z[k+1] = alpha(k) z[k] + y_opt(f(z[k])) + gamma (z[k] - z[k-1]) + inject(x + b)

with y_opt the calibrated optical path (folded once per weight load, see
`aocsim.hardware.optics`), f the analog nonlinearity and inject the clip and
DAC of the input. What is drawn when:

- once per chip (profile `variation.chip_seed`): chip-to-chip variation;
- once per weight load (the loop's `generator`): SLM programming error;
- once per inference (`OpticalLoop.drifted`): a drift step;
- every iteration (the step's `generator`): RIN, shot and thermal noise (with `compile=True`,
  from a counter-based stream keyed by one draw of that generator per call).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from aocsim.errors import InputError
from aocsim.hardware import components as C
from aocsim.hardware import counter_rng, fused
from aocsim.hardware.noise import detector_noise_std, detector_variance_coefficients, rin_relative_std
from aocsim.hardware.optics import FoldedOptics, channel_arrays, fold
from aocsim.hardware.profile import DeviceProfile, load_device
from aocsim.hardware.schedules import Constant, Schedule, as_schedule

GAINS = ("normalized", "absolute")


def _tensor(values: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A (copied) tensor from read-only profile numbers."""
    return torch.tensor(np.array(values, dtype=np.float64), dtype=dtype, device=device)


def _check_tensor(name: str, t: Any, n: int, *, allow_1d: bool = False) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise InputError(f"{name} must be a floating-point tensor [B, {n}]; got {type(t).__name__}"
                         + (f" {t.dtype}" if isinstance(t, torch.Tensor) else ""))
    ok = (t.ndim == 2 and t.shape[1] == n) or (allow_1d and t.ndim == 1 and t.shape[0] == n)
    if not ok:
        raise InputError(f"{name} has shape {tuple(t.shape)}; expected [B, {n}]" + (f" or [{n}]" if allow_1d else ""))
    if not bool(torch.isfinite(t).all()):
        raise InputError(f"{name} contains NaN or infinite values")
    return t


class OpticalLoop:
    """A device profile with one weight matrix loaded: iterate the loop cheaply.

    Args:
        device: a `DeviceProfile` or a profile name.
        weight: W [N, N] in [out, in] convention; N must equal the profile's channels.
        bias: b [N] added to the injection before the clip (None = 0).
        alpha: leak (number, schedule or None for no term).
        beta: loop gain for gain="normalized" (number or schedule); None with "absolute".
        gamma: momentum coefficient (number, schedule or None).
        gain: "normalized" (P, Q times beta / N) or "absolute" (times max |W|).
        generator: RNG for static per-weight-load draws (SLM programming error).
        compile: run the inference iterations of `iterate` / `readout` as compiled, fused
            kernels (`aocsim.hardware.fused`; needs a C++ compiler, compiles per batch shape).
            Noisy iterations then draw from a counter-based generator keyed by `generator`
            (reproducible, statistically the same, not the eager loop's numbers). Single `step`
            calls stay eager.

    Example:
        >>> dev = load_device("aoc48-twin")
        >>> loop = OpticalLoop(dev, torch.randn(48, 48), alpha=0.5, beta=18.6)
        >>> z1 = loop.step(torch.zeros(4, 48), torch.rand(4, 48))
    """

    def __init__(self, device: DeviceProfile | str, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
                 alpha: float | Schedule | Callable[[int], float] | None = None,
                 beta: float | Schedule | Callable[[int], float] | None = None,
                 gamma: float | Schedule | Callable[[int], float] | None = None,
                 gain: str = "normalized", generator: torch.Generator | None = None, compile: bool = False,
                 _drift: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        self.device = load_device(device) if isinstance(device, str) else device
        if not isinstance(self.device, DeviceProfile):
            raise InputError(f"device must be a DeviceProfile or a profile name; got {type(device).__name__}")
        v = self.values = self.device.values
        self.weight = self._check_weight(weight)
        n = self.n = self.weight.shape[0]
        dtype, dev = self.weight.dtype, self.weight.device
        if gain not in GAINS:
            raise InputError(f"gain = {gain!r}; expected one of {list(GAINS)}")
        if gain == "normalized" and beta is None:
            raise InputError("beta is required with gain='normalized' (P, Q are scaled by beta / N)")
        if gain == "absolute" and beta is not None:
            raise InputError("beta must be None with gain='absolute' (P, Q are scaled by max |W|)")
        self.gain = gain
        if not isinstance(compile, bool):
            raise InputError(f"compile = {compile!r}; expected True or False")
        self.compile = compile
        self.alpha, self.beta, self.gamma = (as_schedule(alpha, "alpha"), as_schedule(beta, "beta"),
                                             as_schedule(gamma, "gamma"))
        self.bias = None if bias is None else _check_tensor("bias", bias, n, allow_1d=True).to(dtype)
        varied = v["variation.enabled"] and v["variation.relative_std"] > 0
        self.arrays = channel_arrays(v, n, dtype=dtype, device=dev, relative_std=v["variation.relative_std"],
                                     chip_seed=v["variation.chip_seed"] if varied else None)
        w_pos, w_neg, self.m = self._program_slm(self.weight, generator)
        self.optics: FoldedOptics = fold(v, self.arrays, w_pos, w_neg, self.m, gain)
        self.coeffs = (None if v["nonlinearity.coeffs"] is None else
                       _tensor(v["nonlinearity.coeffs"], dtype, dev))
        self.coeff_floats = None if self.coeffs is None else tuple(float(c) for c in v["nonlinearity.coeffs"])
        self._sigmoid6 = torch.zeros(6, dtype=dtype, device=dev)  # [a, b, c, d, f, g] for the fused step
        if self.coeffs is not None:
            self._sigmoid6[: len(self.coeffs)] = self.coeffs
        self.poly_pos = _tensor(v["emitter.poly_pos"], dtype, dev)
        self.poly_neg = _tensor(v["emitter.poly_neg"], dtype, dev)
        self.rin_std = (rin_relative_std(v["noise.rin.rin_db_per_hz"], v["noise.bandwidth_hz"])
                        if v["noise.rin.enabled"] else 0.0)
        self.poly_pos_f = tuple(float(c) for c in v["emitter.poly_pos"])
        self.poly_neg_f = tuple(float(c) for c in v["emitter.poly_neg"])
        # Deterministic path: fold the LED cubics too (operators act on [t, t^2, t^3]).
        f_y, off_y = C.fold_led(self.optics.k, self.poly_pos, self.poly_neg)
        self._fy_t0, self._cy0 = f_y.T.contiguous(), self.optics.k1 + off_y
        # Compiled path: the operator on the LED signals without their constants, [q+, q-] = u - p0.
        self._k_t0 = self.optics.k.T.contiguous()
        self._led3 = torch.stack([self.poly_pos[:3], self.poly_neg[:3]])
        self._det_t = self.optics.m_det.T.contiguous()
        self._var_a, self._var_b = detector_variance_coefficients(v)
        self.detector_noise = v["noise.shot.enabled"] or v["noise.thermal.enabled"]
        bw = v["loop.bandwidth_hz"]
        self.response = 1.0 if bw is None else 1.0 - math.exp(-2 * math.pi * bw * v["loop.round_trip_s"])
        zero = torch.zeros(n, dtype=dtype, device=dev)
        self.drift_state = _drift if _drift is not None else (zero, zero.clone())
        self._fold_drift()

    def _fold_drift(self) -> None:
        """Fold the drift state (y -> (1 + g) y + o per channel) into the node operators."""
        o, (gain, offset) = self.optics, self.drift_state
        s = 1.0 + gain
        self._fy_t, self._cy, self._k0 = self._fy_t0 * s, self._cy0 * s, o.k0 * s + offset
        self._k_t = self._k_t0 * s
        self._node_scale, self._node_lam = s * o.scaling * o.gain_scale, s * o.lam

    # -- construction helpers ---------------------------------------------------------------
    def _check_weight(self, weight: Any) -> torch.Tensor:
        if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
            raise InputError(f"weight must be a floating-point tensor [N, N]; got {type(weight).__name__}")
        if weight.ndim != 2 or weight.shape[0] != weight.shape[1]:
            raise InputError(f"weight has shape {tuple(weight.shape)}; expected a square [N, N] matrix")
        n = self.device.channels
        if n is not None and weight.shape[0] != n:
            raise InputError(f"weight has shape {tuple(weight.shape)}; profile {self.device.name!r} has "
                             f"{n} channels, so expected [{n}, {n}] (map larger models by tiling)")
        if not bool(torch.isfinite(weight).all()):
            raise InputError("weight contains NaN or infinite values")
        return weight

    def _program_slm(self, weight: torch.Tensor, generator: torch.Generator | None):
        """Normalise, quantise (straight-through) and add the static programming error."""
        v = self.values
        m = weight.abs().max()
        m = torch.where(m > 0, m, torch.ones_like(m))
        w = C.quantize_signed(weight / m, v["slm.bits"])
        sigma = v["slm.programming_error_levels"]
        self.programming_error: torch.Tensor | None = None
        if sigma > 0:
            if generator is None:
                raise InputError("generator is required: the profile draws a static SLM programming error "
                                 f"(slm.programming_error_levels = {sigma})")
            levels = 2 ** (v["slm.bits"] - 1) - 1 if v["slm.bits"] is not None else 255
            self.programming_error = (sigma / levels) * torch.randn(w.shape, generator=generator,
                                                                    dtype=w.dtype).to(w.device)
            w = w + self.programming_error
        return torch.relu(w), torch.relu(-w), m

    def drifted(self, generator: torch.Generator) -> "OpticalLoop":
        """The same loop one inference later: its output gain and offset take one random-walk step."""
        if not self.values["drift.enabled"]:
            return self
        gain, offset = self.drift_state
        n, dt = self.n, self.weight.dtype
        dg = self.values["drift.gain_std_per_inference"] * torch.randn(n, generator=generator, dtype=dt)
        do = self.values["drift.offset_std_v_per_inference"] * torch.randn(n, generator=generator, dtype=dt)
        new = object.__new__(OpticalLoop)
        new.__dict__.update(self.__dict__)
        new.drift_state = (gain + dg.to(gain.device), offset + do.to(gain.device))
        new._fold_drift()
        return new

    # -- the iteration ------------------------------------------------------------------------
    @property
    def needs_generator(self) -> bool:
        """True when an iteration draws noise (RIN, shot or thermal)."""
        return self.rin_std > 0 or self.detector_noise

    def injection(self, x: torch.Tensor) -> torch.Tensor:
        """clip(x + b) on the DAC grid: the input term of every iteration, [B, N]."""
        v = self.values
        u = x if self.bias is None else x + self.bias
        clip = v["injection.clip"]
        if clip is not None:
            u = u.clamp(float(clip[0]), float(clip[1]))
            u = C.quantize_range(u, float(clip[0]), float(clip[1]), v["injection.dac_bits"])
        return u

    def _nonlinear(self, z: torch.Tensor) -> torch.Tensor:
        """t = f(z): tanh or the calibrated sigmoid (in place when no gradient is needed)."""
        if self.values["nonlinearity.kind"] == "tanh":
            return torch.tanh(z)
        if torch.is_grad_enabled() and (z.requires_grad or self._fy_t.requires_grad):
            return C.algebraic_sigmoid(z, self.coeffs)
        return C.algebraic_sigmoid_fast(z, self.coeff_floats)

    def _detector_signals(self, z: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """[D_P, D_Q] before the gain, [B, 2N], with RIN on the LEDs (no detector noise yet)."""
        u = C.led_pair(self._nonlinear(z), self.poly_pos_f, self.poly_neg_f)
        if self.rin_std > 0:  # one intensity fluctuation per LED, seen by both paths
            eps = torch.randn(z.shape, generator=generator, dtype=z.dtype).to(z.device)
            u = u * (eps * self.rin_std + 1.0).repeat(1, 2)
        return torch.addmm(self.optics.c_det, u, self._det_t)

    def _gain(self, k: int) -> float:
        return self.beta(k) if self.gain == "normalized" else 1.0

    def optical(self, z: torch.Tensor, *, iteration: int = 0, generator: torch.Generator | None = None
                ) -> torch.Tensor:
        """y_opt: the optical path's contribution at the loop node, [B, N] volts."""
        g = self._gain(iteration)
        if not self.needs_generator:  # deterministic: LED cubics folded too, one product
            feats = C.power_features(self._nonlinear(z))
            return torch.addmm(self._cy * g + self._k0, feats, self._fy_t, alpha=g)
        n = self.n
        d = self._detector_signals(z, generator)
        diff = d[:, :n] - d[:, n:]
        if self.detector_noise:
            # The paths' noises are independent and subtracted: one draw with the combined
            # variance a (|D_P| + |D_Q|) + 2 b (see noise.detector_variance_coefficients).
            mag = d.abs()
            std = torch.sqrt((mag[:, :n] + mag[:, n:]) * self._var_a + 2.0 * self._var_b)
            diff = diff + std * torch.randn(std.shape, generator=generator, dtype=d.dtype).to(d.device)
        return g * (self._node_scale * diff + self._node_lam) + self._k0

    def _advance(self, z: torch.Tensor, inject: torch.Tensor, z_prev: torch.Tensor | None, k: int,
                 generator: torch.Generator | None, offsets: dict | None = None) -> torch.Tensor:
        """z[k+1] from z[k]; `offsets` (inference loops) caches inject + the optical constant per gain."""
        v = self.values
        if self.compile and offsets is not None and z_prev is not None and not torch.is_grad_enabled():
            if self.needs_generator:
                return self._fused_noisy(z, z_prev, inject, k, offsets, generator)
            return self._fused(z, z_prev, inject, k, offsets, steps=1)[0]
        if offsets is not None and not self.needs_generator and not torch.is_grad_enabled():
            # Deterministic inference: inject and the optical constant ride in the product's input.
            g = self._gain(k)
            if offsets.get("gain") != g:
                offsets.update(gain=g, offset=inject + (self._cy * g + self._k0))
            y = torch.addmm(offsets["offset"], C.power_features(self._nonlinear(z)), self._fy_t, alpha=g)
        else:
            y = self.optical(z, iteration=k, generator=generator)
            y = y.add_(inject) if not y.requires_grad else y + inject
        if not y.requires_grad:  # inference: update the fresh tensor in place
            alpha = self.alpha(k) if self.alpha is not None else 0.0
            gamma = self.gamma(k) if self.gamma is not None else 0.0
            if alpha + gamma != 0.0:
                y.add_(z, alpha=alpha + gamma)
            if gamma != 0.0 and z_prev is not None:
                y.sub_(z_prev, alpha=gamma)
            if v["saturation.enabled"]:
                y.clamp_(v["saturation.low_v"], v["saturation.high_v"])
            if self.response != 1.0:
                y.sub_(z).mul_(self.response).add_(z)
            return y
        if self.alpha is not None:
            y = y + self.alpha(k) * z
        if self.gamma is not None:
            y = y + self.gamma(k) * (z - z_prev if z_prev is not None else z)
        if v["saturation.enabled"]:
            y = y.clamp(v["saturation.low_v"], v["saturation.high_v"])
        if self.response != 1.0:
            y = z + self.response * (y - z)
        return y

    # -- compiled iterations (aocsim.hardware.fused) -------------------------------------------
    FUSED_BLOCK = 5  # steps per compiled call when the schedules are constant

    def _fused(self, z: torch.Tensor, z_prev: torch.Tensor, inject: torch.Tensor, k: int, cache: dict,
               steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`steps` compiled iterations from k (schedules read at k, so steps > 1 needs constant ones)."""
        v, g = self.values, self._gain(k)
        if cache.get("fused_gain") != g:
            cache.update(fused_gain=g, fused_offset=inject + (self._cy * g + self._k0), fused_operator=self._k_t * g)
        return fused.run("steps", z, z_prev, cache["fused_offset"], cache["fused_operator"], self._sigmoid6,
                         self._led3, self._node_vector(k, z, cache), steps=steps,
                         tanh=v["nonlinearity.kind"] == "tanh", saturate=bool(v["saturation.enabled"]),
                         respond=self.response != 1.0)

    def _fused_noisy(self, z: torch.Tensor, z_prev: torch.Tensor, inject: torch.Tensor, k: int, cache: dict,
                     generator: torch.Generator) -> torch.Tensor:
        """One compiled noisy iteration, its normals from the counter generator keyed by `generator`."""
        v, g = self.values, self._gain(k)
        if "led4" not in cache:  # first noisy step of this iterate / readout call
            cache.update(led4=torch.stack([self.poly_pos, self.poly_neg]), rng_key=counter_rng.key_from(generator),
                         rng_offsets=counter_rng.counters(tuple(z.shape), z.device))
        if cache.get("noisy_gain") != g:
            cache.update(noisy_gain=g, node_offset=g * self._node_lam + self._k0, noise=torch.tensor(
                [self.rin_std, self._var_a, 2.0 * self._var_b, g], dtype=z.dtype, device=z.device))
        base = counter_rng.stream_base(cache["rng_key"], k * z.numel()).to(z.device)
        return fused.run("noisy_step", z, z_prev, inject, self._det_t, self.optics.c_det, self._sigmoid6,
                         cache["led4"], base, cache["rng_offsets"], cache["noise"], self._node_scale, cache["node_offset"],
                         self._node_vector(k, z, cache), tanh=v["nonlinearity.kind"] == "tanh",
                         rin=self.rin_std > 0, detector=bool(self.detector_noise),
                         saturate=bool(v["saturation.enabled"]), respond=self.response != 1.0)[0]

    def _node_vector(self, k: int, z: torch.Tensor, cache: dict) -> torch.Tensor:
        """[alpha + gamma, gamma, low rail, high rail, response] at iteration k, cached while unchanged."""
        v = self.values
        alpha = self.alpha(k) if self.alpha is not None else 0.0
        gamma = self.gamma(k) if self.gamma is not None else 0.0
        if cache.get("node_key") != (alpha, gamma):
            low, high = (v["saturation.low_v"], v["saturation.high_v"]) if v["saturation.enabled"] else (0.0, 0.0)
            cache.update(node_key=(alpha, gamma), node=torch.tensor(
                [alpha + gamma, gamma, low, high, self.response], dtype=z.dtype, device=z.device))
        return cache["node"]

    def _fused_blocks_apply(self) -> bool:
        """Whole blocks of compiled steps: deterministic inference with constant schedules."""
        return (self.compile and not self.needs_generator and not torch.is_grad_enabled()
                and all(s is None or isinstance(s, Constant) for s in (self.alpha, self.beta, self.gamma)))

    def _prepare(self, z: torch.Tensor, x: torch.Tensor, z_prev: torch.Tensor | None,
                 generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        dt, dev = self.weight.dtype, self.weight.device
        z = _check_tensor("z", z, self.n).to(dtype=dt, device=dev)
        x = _check_tensor("x", x, self.n, allow_1d=True).to(dtype=dt, device=dev)
        if z_prev is not None:
            z_prev = _check_tensor("z_prev", z_prev, self.n).to(dtype=dt, device=dev)
        if self.needs_generator and not isinstance(generator, torch.Generator):
            raise InputError("generator is required: the profile draws noise every iteration "
                             "(noise.shot / noise.thermal / noise.rin enabled)")
        return z, x, z_prev

    def step(self, z: torch.Tensor, x: torch.Tensor, *, z_prev: torch.Tensor | None = None,
             generator: torch.Generator | None = None, iteration: int = 0) -> torch.Tensor:
        """One loop iteration.

        Args:
            z: state [B, N], volts.
            x: input injection [B, N] or [N], volts (bias and clip applied here).
            z_prev: previous state for the momentum term (zeros if None).
            generator: RNG for the per-iteration noise (required when any is on).
            iteration: k, the index fed to the alpha / beta / gamma schedules.
        Returns:
            z[k+1] [B, N].
        """
        z, x, z_prev = self._prepare(z, x, z_prev, generator)
        return self._advance(z, self.injection(x), z_prev, iteration, generator)

    def detectors(self, z: torch.Tensor, *, iteration: int = 0, generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, Q): the two detector signals after the gain (docs/PHYSICS.md section 2 step 8), [B, N] each.

        With shot / thermal noise on, each path gets its own draw.
        """
        z = _check_tensor("z", z, self.n).to(self.weight.dtype)
        if self.needs_generator and not isinstance(generator, torch.Generator):
            raise InputError("generator is required: the profile draws noise every iteration")
        d = self._detector_signals(z, generator)
        if self.detector_noise:
            std = detector_noise_std(d, self.values)
            d = d + std * torch.randn(d.shape, generator=generator, dtype=d.dtype).to(d.device)
        d = d * (self._gain(iteration) * self.optics.gain_scale)
        return d[:, : self.n], d[:, self.n:]

    def iterate(self, z0: torch.Tensor, x: torch.Tensor, iterations: int, *,
                generator: torch.Generator | None = None, trajectory: bool = False) -> torch.Tensor:
        """Run `iterations` steps from z0 (momentum starts with z_prev = 0).

        Returns the final state [B, N], or the trajectory [iterations, B, N].
        """
        z, x, _ = self._prepare(z0, x, None, generator)
        inject = self.injection(x)
        z_prev, states = torch.zeros_like(z), []
        offsets: dict = {}
        start = 0
        if not trajectory and self._fused_blocks_apply():
            while start + self.FUSED_BLOCK <= iterations:
                z, z_prev = self._fused(z, z_prev, inject, start, offsets, self.FUSED_BLOCK)
                start += self.FUSED_BLOCK
        for k in range(start, iterations):  # the hot loop: one folded product + elementwise work per step
            z, z_prev = self._advance(z, inject, z_prev, k, generator, offsets), z
            if trajectory:
                states.append(z)
        return torch.stack(states) if trajectory else z

    def readout(self, x: torch.Tensor, z0: torch.Tensor | None = None, *,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """What the machine reports: settle, then average K ADC samples of the state.

        Runs `readout.settle_iterations` iterations, then samples the state every
        `readout.sample_interval_iterations` iterations `readout.samples` times,
        quantising each sample with the readout ADC (`readout.adc_bits` over
        `readout.range_v`) and averaging them digitally (AOC paper: 2.5 us settle,
        40 samples at 6.25 MHz).

        Returns:
            the averaged reading [B, N], volts.
        """
        v = self.values
        x = _check_tensor("x", x, self.n, allow_1d=True)
        batch = x.shape[0] if x.ndim == 2 else 1
        z = torch.zeros(batch, self.n, dtype=self.weight.dtype, device=self.weight.device) if z0 is None else z0
        z, x, _ = self._prepare(z, x, None, generator)
        inject = self.injection(x)
        low, high = (float(r) for r in v["readout.range_v"])
        interval, samples = v["readout.sample_interval_iterations"], v["readout.samples"]
        settle = v["readout.settle_iterations"]
        total = settle + (samples - 1) * interval + 1
        z_prev, acc, taken, offsets = torch.zeros_like(z), torch.zeros_like(z), 0, {}
        for k in range(total):
            z, z_prev = self._advance(z, inject, z_prev, k, generator, offsets), z
            if k >= settle and (k - settle) % interval == 0:
                acc = acc + C.quantize_range(z, low, high, v["readout.adc_bits"])
                taken += 1
        return acc / taken


def loop_step(device: DeviceProfile | str, weight: torch.Tensor, z: torch.Tensor, x: torch.Tensor, *,
              bias: torch.Tensor | None = None, alpha: float | None = None, beta: float | None = None,
              gamma: float | None = None, z_prev: torch.Tensor | None = None, gain: str = "normalized",
              generator: torch.Generator | None = None, iteration: int = 0) -> torch.Tensor:
    """One loop iteration of `device` with `weight` (see `OpticalLoop`; same semantics).

    Static draws (programming error) and then per-iteration noise come from `generator`.
    """
    loop = OpticalLoop(device, weight, bias=bias, alpha=alpha, beta=beta, gamma=gamma, gain=gain,
                       generator=generator)
    return loop.step(z, x, z_prev=z_prev, generator=generator, iteration=iteration)
