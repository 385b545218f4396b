"""Optical-loop components: small pure functions, one per stage of docs/PHYSICS.md section 2.

Shapes: batches of channel signals are [B, N]; weights are [N_out, N_in]
(torch convention, y_j = sum_i W[j, i] v_i). Signals are in the twin's units
(volts at the loop node, normalised optical power at the detectors).
"""

from __future__ import annotations

from typing import Any

import torch


def algebraic_sigmoid(z: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """The calibrated analog nonlinearity.

    u = a z + b;  t = d u / (1 + |u|^c)^(1/c) + f + g z   (g = 0 with five coefficients).

    Args:
        z: loop state [B, N], volts.
        coeffs: [a, b, c, d, f] or [a, b, c, d, f, g].
    Returns:
        t [B, N], volts (swing about +-0.215 V on the 48-variable machine).
    """
    a, b, c, d, f = (coeffs[i] for i in range(5))
    u = a * z + b
    t = d * u / (1.0 + u.abs() ** c) ** (1.0 / c) + f
    if coeffs.shape[0] > 5:
        t = t + coeffs[5] * z
    return t


def algebraic_sigmoid_fast(z: torch.Tensor, coeffs: tuple[float, ...]) -> torch.Tensor:
    """`algebraic_sigmoid` computed in place on two temporaries (no autograd; same equation).

    The hot loop of inference: two allocations instead of ten, and the two
    fractional powers as base-2 exp / log (|u|^c = 2^(c log2|u|) and
    (1 + |u|^c)^(-1/c) = 2^(-log2(1 + |u|^c) / c)), which on CPUs cost about
    half of pow or of natural exp / log, and are exact at u = 0.
    """
    a, b, c, d, f = coeffs[:5]
    u = torch.mul(z, a).add_(b)
    scale = u.abs().log2_().mul_(c).exp2_()
    scale.add_(1.0).log2_().mul_(-1.0 / c).exp2_()
    u.mul_(scale).mul_(d).add_(f)
    if len(coeffs) > 5 and coeffs[5] != 0.0:
        u.add_(z, alpha=coeffs[5])
    return u


def nonlinearity(z: torch.Tensor, kind: str, coeffs: torch.Tensor | None) -> torch.Tensor:
    """tanh (exact path) or the calibrated algebraic sigmoid."""
    return torch.tanh(z) if kind == "tanh" else algebraic_sigmoid(z, coeffs)


def power_features(t: torch.Tensor) -> torch.Tensor:
    """[t, t^2, t^3] side by side, [B, 3N].

    Both LED cubics act on the same t, so the LED stage folds into the optical
    operator: P(t) = sum_k c_k t^k is linear in these features.
    """
    if t.requires_grad:
        return torch.cat([t, t * t, t * t * t], dim=1)
    b, n = t.shape
    out = torch.empty(b, 3 * n, dtype=t.dtype, device=t.device)
    out[:, :n] = t
    torch.mul(t, t, out=out[:, n:2 * n])
    torch.mul(out[:, n:2 * n], t, out=out[:, 2 * n:])
    return out


def led_pair(t: torch.Tensor, poly_pos: tuple[float, ...], poly_neg: tuple[float, ...]) -> torch.Tensor:
    """u = [P+(t), P-(t)], [B, 2N]: both microLED cubics (Horner, highest power first)."""
    halves = []
    for poly in (poly_pos, poly_neg):
        out = t * poly[0] + poly[1]
        for c in poly[2:]:
            out = out * t + c
        halves.append(out)
    return torch.cat(halves, dim=1)


def fold_led(op: torch.Tensor, poly_pos: torch.Tensor, poly_neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold the LED cubics into an operator acting on u = [P+(t), P-(t)].

    Args:
        op: [R, 2N], rows act on u.
        poly_pos, poly_neg: cubic coefficients, highest power first: [4] shared by every emitter, or
            [4, N] one cubic per emitter (column of op).
    Returns:
        (F [R, 3N] acting on `power_features(t)`, offset [R]).
    """
    n = op.shape[1] // 2
    a_p, a_q = op[:, :n], op[:, n:]
    blocks = [poly_pos[3 - k] * a_p + poly_neg[3 - k] * a_q for k in (1, 2, 3)]
    const = poly_pos[3] * a_p + poly_neg[3] * a_q
    return torch.cat(blocks, dim=1), const.sum(dim=1)


def predistort_drive(d: torch.Tensor, poly_pos: tuple[float, ...], poly_neg: tuple[float, ...],
                     iterations: int = 8) -> torch.Tensor:
    """The emitter drive q whose mean LED response is linear in d: P(q) - P(0) = P'(0) d, P the mean of
    the two cubics (highest power first), solved by Newton's method from q = d. A coefficient may be a
    number (one cubic for every emitter) or a tensor [N] (one per emitter, broadcast over d [B, N]: what
    a chip measured of each, `aocsim.hardware.engine.emitter_calibration`).

    A tile's input reaches the emitters through the DAC, so the driver can apply this inverse digitally
    (docs/PHYSICS.md section 2 step 2: the LED cubics; docs/DEVICE_RUNS.md section 3). The two paths'
    cubics differ, so what remains is their half difference: on the twins at full drive (0.215 V) its
    t^2 and t^3 terms are 0.2 % and 0.4 % of the linear term, against 7.6 % and 4.8 % for the mean
    cubic itself. Within the drive range the cubic is monotone and Newton
    converges in a few steps (a test checks the residual).

    Each step q - (((c3 q + c2) q + c1) q - c1 d) / ((3 c3 q + 2 c2) q + c1) runs in place on two
    temporaries (an A5 search spends a fifth of its time here). With a gradient on d, the value is the same
    (bit for bit) and the gradient the inverse's own, dq/dd = c1 / P'(q) (implicit differentiation, not
    the unrolled steps).
    """
    c3, c2, c1 = ((a + b) / 2 for a, b in zip(poly_pos[:3], poly_neg[:3]))
    slope3, slope2 = 3 * c3, 2 * c2

    def slope(q: torch.Tensor) -> torch.Tensor:  # P'(q), the step's denominator (a new tensor)
        return (slope3 * q).add_(slope2).mul_(q).add_(c1)

    if torch.is_grad_enabled() and d.requires_grad:
        with torch.no_grad():
            q = predistort_drive(d, poly_pos, poly_neg, iterations)
            gain = c1 / slope(q)
        return q + (d - d.detach()) * gain  # (d - d.detach() is exactly 0: the value is q's)
    target = c1 * d
    q = d
    for _ in range(iterations):
        value = (c3 * q).add_(c2).mul_(q).add_(c1).mul_(q).sub_(target)
        q = q - value.div_(slope(q))
    return q


def quantize_signed(w: torch.Tensor, bits: int | None) -> torch.Tensor:
    """Signed uniform quantisation of w in [-1, 1] with a straight-through gradient.

    q = clamp(round(L w), -L - 1, L) / L, L = 2^(bits - 1) - 1 (255 for the AOC's 9 bits).
    The gradient passes through unchanged (straight-through estimator).
    """
    if bits is None:
        return w
    levels = 2 ** (bits - 1) - 1
    q = torch.clamp(torch.round(w * levels), -levels - 1, levels) / levels
    return w + (q - w).detach()


def quantize_range(v: torch.Tensor, low: float, high: float, bits: int | None) -> torch.Tensor:
    """Uniform converter over [low, high] with 2^bits codes (values clamped into range), straight-through."""
    return v if bits is None else quantize_step(v, low, high, code_step(low, high, bits))


def code_step(low: float, high: float, bits: int) -> float:
    """The step between adjacent codes of a converter over [low, high] with 2^bits codes."""
    return (high - low) / (2 ** bits - 1)


def dac(u: torch.Tensor, low: Any, high: Any, step: Any | None) -> torch.Tensor:
    """A DAC's output: u clipped to [low, high], on its code grid (`quantize_step`; step None: unquantised)."""
    u = u.clamp(low, high)
    return u if step is None else quantize_step(u, low, high, step)


def quantize_step(v: torch.Tensor, low: Any, high: Any, step: Any) -> torch.Tensor:
    """`quantize_range` with its code step given: low, high and step numbers or 0-dim tensors (a compiled
    graph's inputs, `aocsim.hardware.engine.tile_pass`), the same bits either way."""
    fixed = v.detach()  # the codes carry no gradient: computed in place on one new tensor
    q = fixed.clamp(low, high).sub_(low).div_(step).round_().mul_(step).add_(low)
    return v + q.sub_(fixed)  # straight through: the value q, the gradient v's


def distort(w_sign: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """SLM transfer per output column j: What[j, i] = A_j w[j, i]^2 + B_j w[j, i] + C_j.

    Args:
        w_sign: normalised one-sign weights [N_out, N_in] in [0, 1].
        coeffs: [N_out, 3] rows [A, B, C]; C is the darkness of an "off" pixel.
    """
    a, b, c = coeffs[:, 0:1], coeffs[:, 1:2], coeffs[:, 2:3]
    return a * w_sign ** 2 + b * w_sign + c


def pd_crosstalk_operator(later: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """X [N, N] of nearest-neighbour photodetector crosstalk: P' = X P - (X - I) C.

    P'_j = P_j + e_{j+1} (P_{j+1} - C_{j+1}) + l_{j-1} (P_{j-1} - C_{j-1}).
    """
    n = later.shape[0]
    x = torch.eye(n, dtype=later.dtype, device=later.device)
    if n > 1:
        x = x + torch.diag(earlier[1:], 1) + torch.diag(later[:-1], -1)
    return x


def mirrored_pbs_pattern(w_sign: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """PBS leakage pattern of the 16-variable machine, [N_in, N_out].

    Pat[i, 0] = 0; Pat[i, j] = sqrt(2) (K[15-j, 0] w[16-j, i]^2 + K[15-j, 1] w[16-j, i] + K[15-j, 2])
    for j = 1..15 (w indexed [out, in]; columns mirrored).
    """
    n = w_sign.shape[0]
    rows = w_sign.flip(0)[: n - 1]  # w[16 - j] for j = 1..15
    kk = k.flip(0)  # K[15 - j] for j = 1..15
    cols = (2.0 ** 0.5) * (kk[:, 0:1] * rows ** 2 + kk[:, 1:2] * rows + kk[:, 2:3])  # [15, N_in]
    zero = torch.zeros(1, w_sign.shape[1], dtype=w_sign.dtype, device=w_sign.device)
    return torch.cat([zero, cols], dim=0).T
