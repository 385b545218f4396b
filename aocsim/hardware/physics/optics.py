"""Fold the calibrated optical pipeline into effective operators, once per weight load.

For fixed weights, everything between the LEDs and the loop node (fan-in,
distorted SLM weights, output efficiency, photodetector and PBS crosstalk,
gain, subtraction, closed-loop correction; docs/PHYSICS.md section 2, steps 3-10)
is affine in the LED signals u = [p, q] (the two cubic LED outputs, [B, 2N]):

    D_P = u M_P^T + c_P,  D_Q = u M_Q^T + c_Q               (detector signals before the gain)
    y_opt = g_k (u K^T + k_1) + k_0                          (at the loop node)

with g_k = beta(k) in the normalized convention and 1 in the absolute one.
An iteration then costs one [B, 2N] x [2N, N] product plus elementwise work,
instead of rebuilding and distorting the matrix as the published twin does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from aocsim.hardware.physics import components as C

if TYPE_CHECKING:
    from aocsim.hardware.profiles.parts import Parts

@dataclass(frozen=True)
class FoldedOptics:
    """Effective operators of one weight load (see the module docstring).

    m_det: [2N, 2N] rows = [M_P; M_Q]; c_det: [2N] = [c_P; c_Q].
    gain_scale: 1/N (normalized) or m = max|W| (absolute).
    scaling: closed-loop s [N]; lam: s r lambda (times m if absolute) [N]; k0: s r delta [N].
    k: [N, 2N] = s gain_scale (M_P - M_Q); k1: [N] = s gain_scale (c_P - c_Q) + lam.
    """

    m_det: torch.Tensor
    c_det: torch.Tensor
    gain_scale: torch.Tensor
    scaling: torch.Tensor
    lam: torch.Tensor
    k0: torch.Tensor
    k: torch.Tensor
    k1: torch.Tensor


def fold(chip: Parts, w_pos: torch.Tensor, w_neg: torch.Tensor, m: torch.Tensor, gain: str,
         dark: torch.Tensor | None = None) -> FoldedOptics:
    """Build the effective operators from normalised sign matrices W+/m, W-/m (after quantisation).

    `chip`: the device's components with its per-channel arrays as this chip's tensors
    (`programming.channel_arrays`).
    `dark` [2N]: each detector's dark current in detector units (`programming.dark_offsets`),
    added to the detector signals after the optical crosstalk.
    """
    n = w_pos.shape[0]
    eye = torch.eye(n, dtype=w_pos.dtype, device=w_pos.device)
    zeros = torch.zeros_like(eye)
    eta_p, eta_n = chip.emitter.fan_in_pos, chip.emitter.fan_in_neg
    dist_p, dist_n = chip.slm.distortion_pos, chip.slm.distortion_neg
    o_p, o_n = chip.detector.output_pos, chip.detector.output_neg
    # Steps 3-6: fan-in, distorted weights, output efficiency.  [N_out, 2N_in] per path.
    mp = torch.cat([o_p[:, None] * C.distort(w_pos, dist_p) * eta_p[None, :], zeros], dim=1)
    mq = torch.cat([zeros, o_n[:, None] * C.distort(w_neg, dist_n) * eta_n[None, :]], dim=1)
    cp = torch.zeros(n, dtype=w_pos.dtype, device=w_pos.device)
    cq = torch.zeros_like(cp)
    pbs_on = chip.crosstalk.pbs.enabled
    per_channel_pbs = pbs_on and chip.crosstalk.pbs.model == "per_channel"
    mirrored_pbs = pbs_on and chip.crosstalk.pbs.model == "mirrored_poly"
    x_p = C.pd_crosstalk_operator(chip.crosstalk.pd.later_pos, chip.crosstalk.pd.earlier_pos)
    x_n = C.pd_crosstalk_operator(chip.crosstalk.pd.later_neg, chip.crosstalk.pd.earlier_neg)
    dark_p, dark_n = dist_p[:, 2], dist_n[:, 2]

    def pd_stage(mp, mq, cp, cq):
        # P' = X P - (X - I) C: the darkness is removed only inside the leaked terms.
        return x_p @ mp, x_n @ mq, x_p @ cp - (x_p - eye) @ dark_p, x_n @ cq - (x_n - eye) @ dark_n

    def pbs_stage(mp, mq):
        if per_channel_pbs:  # P += o+ p3 n2p, Q += o- q3 p2n  (p3, q3 after fan-in)
            mp = mp + torch.cat([torch.diag(o_p * chip.crosstalk.pbs.negative_to_positive * eta_p), zeros], 1)
            mq = mq + torch.cat([zeros, torch.diag(o_n * chip.crosstalk.pbs.positive_to_negative * eta_n)], 1)
        if mirrored_pbs:  # P -= q3 Pat(w-, K+) / s+,  Q += p3 Pat(w+, K-) / s-
            k_p = torch.tensor(np.array(chip.crosstalk.pbs.poly_pos), dtype=w_pos.dtype, device=w_pos.device)
            k_n = torch.tensor(np.array(chip.crosstalk.pbs.poly_neg), dtype=w_pos.dtype, device=w_pos.device)
            leak_p = C.mirrored_pbs_pattern(w_neg, k_p).T * eta_n[None, :] / chip.crosstalk.pbs.scale_pos
            leak_q = C.mirrored_pbs_pattern(w_pos, k_n).T * eta_p[None, :] / chip.crosstalk.pbs.scale_neg
            mp = mp - torch.cat([zeros, leak_p], 1)
            mq = mq + torch.cat([leak_q, zeros], 1)
        return mp, mq

    if chip.crosstalk.order == "tia_pbs_pd":
        mp, mq = pbs_stage(mp, mq)
        mp, mq, cp, cq = pd_stage(mp, mq, cp, cq)
    else:
        mp, mq, cp, cq = pd_stage(mp, mq, cp, cq)
        mp, mq = pbs_stage(mp, mq)
    if dark is not None:  # an electrical offset of each photodiode: after the optical leakage
        cp, cq = cp + dark[:n], cq + dark[n:]
    # Steps 8-10: gain, subtraction, closed-loop correction.
    gain_scale = (torch.ones_like(m) / n) if gain == "normalized" else m
    if chip.closed_loop.enabled:
        s = chip.closed_loop.scaling
        r = chip.closed_loop.solution_to_adc_ratio
        lam = s * r * chip.closed_loop.linear_offset * (1.0 if gain == "normalized" else m)
        k0 = s * r * chip.closed_loop.dc_offset
    else:
        s, lam, k0 = torch.ones_like(cp), torch.zeros_like(cp), torch.zeros_like(cp)
    k = (s * gain_scale)[:, None] * (mp - mq)
    k1 = s * gain_scale * (cp - cq) + lam
    return FoldedOptics(torch.cat([mp, mq], 0), torch.cat([cp, cq], 0), gain_scale, s, lam, k0, k, k1)
