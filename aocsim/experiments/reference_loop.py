"""A per-stage implementation of the loop, computed the way the published twin does it.

Every iteration rebuilds the normalised, quantised and distorted weight
matrices and runs each stage of docs/PHYSICS.md section 2 as its own tensor
operation (two matrix products, explicit crosstalk shifts). It shares the
static draws of an `OpticalLoop` (chip arrays, programming error, drift) and
adds the same per-iteration noise at the same places, so it is the yardstick
of `aocsim bench loop` and an independent check of the folded operators.
"""

from __future__ import annotations

import torch

from aocsim.hardware.physics import components as C
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.physics.noise import dark_shot_noise_std, rin_relative_std, shot_noise_std, thermal_noise_std
from aocsim.hardware.engine.programming import dark_offsets


class PerStageLoop:
    """Twin-style per-stage twin of `loop` (same semantics, no folding)."""

    def __init__(self, loop: OpticalLoop) -> None:
        self.loop = loop
        self.v = loop.parts
        self.a = loop.arrays
        w = loop.weight
        self.dark = dark_offsets(self.v, loop.n, dtype=w.dtype, device=w.device)  # the chip's static draw
        m = self.v.noise.multiplier
        self.rin = m * rin_relative_std(self.v.noise.rin.rin_db_per_hz, self.v.noise.bandwidth_hz) if (
            self.v.noise.rin.enabled) else 0.0
        self.noise_scale = m

    def _normal(self, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return torch.randn(like.shape, generator=generator, dtype=like.dtype).to(like.device)

    def _pd(self, p: torch.Tensor, path: str) -> torch.Tensor:
        # Leaks to the neighbours as whole shifted copies (roll, then zero the wrapped entry).
        pd, slm = self.a.crosstalk.pd, self.a.slm
        later, earlier, distortion = ((pd.later_pos, pd.earlier_pos, slm.distortion_pos) if path == "pos" else
                                      (pd.later_neg, pd.earlier_neg, slm.distortion_neg))
        s = p - distortion[:, 2]
        from_higher = torch.roll(earlier * s, -1, dims=-1)
        from_higher[:, -1] = 0
        from_lower = torch.roll(later * s, 1, dims=-1)
        from_lower[:, 0] = 0
        return p + from_higher + from_lower

    def _pbs(self, P, Q, p3, q3, w_pos, w_neg):
        v, a = self.v, self.a
        if not v.crosstalk.pbs.enabled:
            return P, Q
        if v.crosstalk.pbs.model == "per_channel":
            P = P + a.detector.output_pos * p3 * a.crosstalk.pbs.negative_to_positive
            Q = Q + a.detector.output_neg * q3 * a.crosstalk.pbs.positive_to_negative
            return P, Q
        k_p = torch.tensor(v.crosstalk.pbs.poly_pos, dtype=P.dtype, device=P.device)
        k_n = torch.tensor(v.crosstalk.pbs.poly_neg, dtype=P.dtype, device=P.device)
        P = P - q3 @ C.mirrored_pbs_pattern(w_neg, k_p) / v.crosstalk.pbs.scale_pos
        Q = Q + p3 @ C.mirrored_pbs_pattern(w_pos, k_n) / v.crosstalk.pbs.scale_neg
        return P, Q

    def step(self, z: torch.Tensor, x: torch.Tensor, *, z_prev: torch.Tensor | None = None,
             generator: torch.Generator | None = None, iteration: int = 0) -> torch.Tensor:
        """One iteration, every stage recomputed (see `OpticalLoop.step`)."""
        loop, v, a = self.loop, self.v, self.a
        n = loop.n
        t = C.nonlinearity(z, v.nonlinearity.kind, loop.coeffs)
        cp, cq = loop.poly_pos, loop.poly_neg
        p = cp[0] * torch.pow(t, 3) + cp[1] * torch.pow(t, 2) + cp[2] * t + cp[3]
        q = cq[0] * torch.pow(t, 3) + cq[1] * torch.pow(t, 2) + cq[2] * t + cq[3]
        if self.rin > 0:
            eps = self.rin * self._normal(t, generator)
            p, q = p * (1 + eps), q * (1 + eps)
        p3, q3 = p * a.emitter.fan_in_pos, q * a.emitter.fan_in_neg
        p3_kept, q3_kept = p3.clone(), q3.clone()  # the twin keeps copies for the PBS stage
        # The twin's way: normalise, quantise and distort the weights on every iteration.
        m = loop.weight.abs().max()
        w = C.quantize_signed(loop.weight / m, v.slm.bits)
        if loop.programming_error is not None:
            w = w + loop.programming_error
        w_pos, w_neg = torch.relu(w), torch.relu(-w)
        P = p3 @ C.distort(w_pos, a.slm.distortion_pos).T * a.detector.output_pos
        Q = q3 @ C.distort(w_neg, a.slm.distortion_neg).T * a.detector.output_neg
        if v.crosstalk.order == "tia_pbs_pd":
            P, Q = self._pbs(P, Q, p3_kept, q3_kept, w_pos, w_neg)
            P, Q = self._pd(P, "pos"), self._pd(Q, "neg")
        else:
            P, Q = self._pd(P, "pos"), self._pd(Q, "neg")
            P, Q = self._pbs(P, Q, p3_kept, q3_kept, w_pos, w_neg)
        # Shot noise of the light at each photodetector, then its dark current and that current's
        # shot noise, then thermal noise at each TIA: every source and path its own draw (the
        # folded loop merges them into one draw of the summed variance).
        ns = self.noise_scale
        if v.noise.shot.enabled and ns > 0:
            P = P + ns * shot_noise_std(P, v.noise) * self._normal(P, generator)
            Q = Q + ns * shot_noise_std(Q, v.noise) * self._normal(Q, generator)
        if self.dark is not None:
            P, Q = P + self.dark[:n], Q + self.dark[n:]
            if ns > 0:
                P = P + ns * dark_shot_noise_std(v.noise) * self._normal(P, generator)
                Q = Q + ns * dark_shot_noise_std(v.noise) * self._normal(Q, generator)
        if v.noise.thermal.enabled and ns > 0:
            P = P + ns * thermal_noise_std(v.noise) * self._normal(P, generator)
            Q = Q + ns * thermal_noise_std(v.noise) * self._normal(Q, generator)
        g = loop.beta(iteration) if loop.gain == "normalized" else m
        P, Q = (P * g / n, Q * g / n) if loop.gain == "normalized" else (P * m, Q * m)
        y = P - Q
        if v.closed_loop.enabled:
            r = v.closed_loop.solution_to_adc_ratio
            y = (y + r * (a.closed_loop.dc_offset + g * a.closed_loop.linear_offset)) * a.closed_loop.scaling
        if v.drift.enabled:
            y = y * (1 + loop.drift_state[0]) + loop.drift_state[1]
        if loop.alpha is not None:
            y = y + loop.alpha(iteration) * z
        offset = torch.zeros_like(y) + x
        if loop.bias is not None:
            offset = offset + loop.bias
        clip = v.injection.clip
        if clip is not None:
            offset = C.quantize_range(offset.clamp(float(clip[0]), float(clip[1])), float(clip[0]),
                                      float(clip[1]), v.injection.dac_bits)
        y = y + offset
        if loop.gamma is not None:
            y = y + loop.gamma(iteration) * (z - z_prev if z_prev is not None else z)
        if v.saturation.enabled:
            y = y.clamp(v.saturation.low_v, v.saturation.high_v)
        if loop.response != 1.0:
            y = z + loop.response * (y - z)
        return y
