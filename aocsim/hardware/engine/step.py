"""The one definition of a loop iteration (docs/PHYSICS.md section 2 steps 1-13, folded).

    z[k+1] = z + r (y - z),   y = clamp(g (node_scale (D_P - D_Q) + node_lam) + base
                                        + (alpha + gamma) z - gamma z_prev)

with D = u M_det^T + c_det the detector signals of the LED light u = [P+(t), P-(t)],
t = f(z) the analog nonlinearity, g the loop gain at this iteration, base =
inject + k0 (the DAC'd input and the folded constant), r the first-order loop
response. Every execution path runs `iteration`: eagerly with autograd, eagerly
for inference, and compiled (`aocsim.hardware.engine.backends` traces this function).

Two algebraically equal forms, chosen by the layout: without detector noise
the detector stage and both LED cubics fold into one operator on the LED
signals without their constants, q = u - p0 (an [B, 2N] x [2N, N] product);
with detector noise both paths are computed ([2N, 2N]) so that each gets the
variance of its own signal. Per-iteration draws come from the keyed stream
(`aocsim.hardware.engine.keys`): counter (sample, channel) of this iteration's key,
its cosine half for the LED (RIN), its sine half for the detector.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from aocsim.hardware.engine.counter_rng import normal_pair
from aocsim.hardware.engine.scalars import scalars


@dataclass(frozen=True)
class Layout:
    """Which stages an iteration has (fixed in a compiled graph; every number is an input)."""

    tanh: bool
    rin: bool
    detector_noise: bool
    momentum: bool
    saturate: bool
    respond: bool
    # Without draws, two equal forms of the product: LED cubics folded into one operator on
    # [t, t^2, t^3] (fewest elementwise passes: eager), or the cubics computed and the [2N] LED
    # signals multiplied (fewest flops: compiled, where elementwise work fuses into one pass).
    led_folded: bool = True

    @property
    def draws(self) -> bool:
        return self.rin or self.detector_noise


@dataclass(frozen=True)
class Constants:
    """Per weight load (and drift state) tensors of the step; see the module docstring.

    sigmoid: (d a, d b, c, -c log2|d|, -1/c, f, g) from the calibrated [a, b, c, d, f, g]
        (unused with tanh): the nonlinearity rewritten so that it costs few passes. Scalars are
        separate 0-dim tensors, not views of one vector: eager CPU kernels broadcast views slowly.
    led: [4, 2, N]: per emitter, [p3, p2, p1, p0] of P+ and of P- (coefficient first: `led_signals`).
    op_t: [2N, N] node operator on q = u - p0 (gain excluded); op3_t: [3N, N] the same operator
        with both LED cubics folded in, acting on [t, t^2, t^3]; c1: [N] their constant.
    det_t: [2N, 2N] = M_det^T; det_offset: [2N] (dark current included).
    node_scale, node_lam: [N] each (drift gain included).
    noise: [RIN std, a, 2 b] with var(D_P - D_Q) = a (D_P + D_Q) + 2 b.
    """

    sigmoid: tuple[torch.Tensor, ...]
    led: torch.Tensor
    op_t: torch.Tensor
    op3_t: torch.Tensor
    c1: torch.Tensor
    det_t: torch.Tensor
    det_offset: torch.Tensor
    node_scale: torch.Tensor
    node_lam: torch.Tensor
    noise: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """Every tensor in a flat tuple (the compiled graph's inputs); `from_tensors` inverts it."""
        return (*self.sigmoid, self.led, self.op_t, self.op3_t, self.c1, self.det_t, self.det_offset,
                self.node_scale, self.node_lam, self.noise)

    @cached_property
    def led_coefficients(self) -> tuple[torch.Tensor, ...]:
        """(c3, c2, c1, c0), each [..., 2, N]: `led` split by coefficient once per weight load (views; an
        eager split per iteration costs as much as a pass)."""
        return tuple(self.led.unbind(-3))

    @cached_property
    def noise_levels(self) -> tuple[torch.Tensor, ...]:
        """(RIN std, a, 2 b): `noise` split once per weight load (views, as `led_coefficients`)."""
        return tuple(self.noise.unbind(0))

    @classmethod
    def from_tensors(cls, flat: tuple[torch.Tensor, ...]) -> "Constants":
        return cls(tuple(flat[:SIGMOID_PARAMS]), *flat[SIGMOID_PARAMS:])


SIGMOID_PARAMS = 7
Levels = torch.Tensor | tuple[torch.Tensor, ...]  # (RIN std, a, 2 b): `Constants.noise`, or its `noise_levels`
NODE_PARAMS = 6  # g, alpha + gamma, gamma, low rail, high rail, response


def sigmoid_constants(coeffs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(d a, d b, c, -c log2|d|, -1/c, f, g) from the profile's [a, b, c, d, f] or [a, b, c, d, f, g]."""
    a, b, c, d, f = coeffs[:5].unbind()
    g = coeffs[5] if coeffs.shape[0] > 5 else torch.zeros_like(a)
    return tuple(x.clone() for x in (d * a, d * b, c, -c * torch.log2(d.abs()), -1.0 / c, f, g))


def nonlinearity(z: torch.Tensor, sigmoid: tuple[torch.Tensor, ...], tanh: bool) -> torch.Tensor:
    """t = f(z): tanh, or d u (1 + |u|^c)^(-1/c) + f + g z with u = a z + b.

    Written with v = d u and |u|^c = 2^(c log2|v| - c log2|d|), the calibrated sigmoid costs nine
    elementwise passes (base-2 exp / log are cheaper than pow on CPUs, and exact at u = 0).
    """
    if tanh:
        return torch.tanh(z)
    da, db, c, shift, inv_c, f, g = sigmoid
    one, = scalars((1.0,), z.dtype, z.device)
    v = z * da
    v += db
    scale = v.abs()  # in place where autograd allows (an exp2's result it keeps): `led_signals` says why
    scale.log2_().mul_(c).add_(shift)  # c log2|u|
    scale = torch.exp2(scale) + one
    scale = torch.exp2(scale.log2_().mul_(inv_c))  # (1 + |u|^c)^(-1/c)
    out = z * g
    out += f
    return out.addcmul_(v, scale)


def affine(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """bias + x w: x [B, K] and w [K, M] for one weight load (addmm, the loop's fast path), or a stack of
    them, x [..., B, K] and w [..., K, M] with broadcasting leading dims (tiles, passes)."""
    if x.ndim == 2:
        return torch.addmm(bias, x, w)
    if (w.ndim == x.ndim and w.shape[-3] == 1 and x.shape[-3] > 1
            and torch.broadcast_shapes(x.shape[:-3], w.shape[:-3]) == x.shape[:-3]):  # passes of one load:
        lead = x.shape[:-2]  # their rows in one product (broadcast, matmul would copy the matrix per pass)
        y = torch.matmul(x.reshape(*lead[:-1], lead[-1] * x.shape[-2], x.shape[-1]), w.squeeze(-3))
        return y.view(*lead, x.shape[-2], y.shape[-1]) + bias
    return torch.matmul(x, w) + bias


# values of t from which `led_signals` copies it to both paths (timed on CPU: faster from ~64 rows of 48)
CONTIGUOUS_ROWS = 4096


def led_signals(t: torch.Tensor, led: tuple[torch.Tensor, ...], constant: bool) -> torch.Tensor:
    """Both microLED cubics of every emitter (Horner), with or without their constant terms p0: [..., B, 2, N],
    P+(t) then P-(t). Both paths run as one tensor (half the eager passes of two), and its last two dims
    flattened are [P+ | P-], the detectors' input.

    led: the cubics' coefficients (c3, c2, c1, c0), highest power first, each [..., 2, N] (its P+ row and
    P- row over emitters: `Constants.led_coefficients`, one contiguous block each).

    Horner's steps run in place on one new tensor: the same operations, so the same bits (a + b and a b
    are exact to swap), and the pass's temporaries stay in the core's cache instead of a new block of
    memory per step (at a stack of tiles' 4 x 682 rows, half the time). Autograd keeps what it needs."""
    c3, c2, c1, c0 = led
    t = t.unsqueeze(-2)
    if t.numel() >= CONTIGUOUS_ROWS:  # many rows: a contiguous [.., B, 2, N] runs each pass as one long loop
        t = t.expand(*t.shape[:-2], 2, t.shape[-1]).contiguous()
    light = t * c3
    light += c2
    light *= t
    light += c1
    light *= t
    if constant:
        light += c0
    return light


def led_light(t: torch.Tensor, led: tuple[torch.Tensor, ...], constant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(P+(t), P-(t)) [..., B, N] each: `led_signals` split by path."""
    p, q = led_signals(t, led, constant).unbind(-2)
    return p, q


def detector_signals(light: torch.Tensor, det_t: torch.Tensor, det_offset: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(D_P, D_Q) [..., B, N] each: the folded optics acting on the LED light [..., B, 2, N] (`led_signals`)."""
    d = affine(det_offset, light.flatten(-2), det_t)
    n = light.shape[-1]
    return d[..., :n], d[..., n:]


def difference_std(d_pos: torch.Tensor, d_neg: torch.Tensor, noise: Levels) -> torch.Tensor:
    """std of D_P - D_Q from every detector source: sqrt(a (D_P + D_Q) + 2 b), D signed around the bias light
    in b (docs/PHYSICS.md section 3); 0 where that light would be negative. noise: (RIN std, a, 2 b)."""
    zero, = scalars((0.0,), d_pos.dtype, d_pos.device)
    var = d_pos + d_neg  # in place from here (`led_signals`)
    return var.mul_(noise[1]).add_(noise[2]).clamp_min_(zero).sqrt_()


def node_noise_variance(t: torch.Tensor, c: Constants, gain: torch.Tensor | float, a: float, b2: float,
                        rin: float) -> torch.Tensor:
    """Variance one iteration's noise adds at the node, per sample and channel [B, N] (before the response).

    Detector sources: (g node_scale_j)^2 max(a (D_P + D_Q) + 2 b, 0), with b2 = 2 b; RIN: the sum over LEDs i
    of (g (K_ji p_i + K_j,N+i q_i) rin)^2, since one draw per LED reaches both of its paths. The noise
    budget and the noise-floor status both read it.
    """
    light = led_signals(t, c.led_coefficients, constant=True)
    p, q = light.unbind(-2)
    d_pos, d_neg = detector_signals(light, c.det_t, c.det_offset)
    var = (c.node_scale * gain) ** 2 * ((d_pos + d_neg) * a + b2).clamp_min(0.0)
    if rin > 0:
        n = p.shape[1]
        kp, kq = c.op_t[:n].T * gain, c.op_t[n:].T * gain  # [N_out, N_in] per path
        var = var + rin ** 2 * ((p * p) @ (kp * kp).T + 2 * (p * q) @ (kp * kq).T + (q * q) @ (kq * kq).T)
    return var


def flickered(light: torch.Tensor, noise: Levels, led_draw: torch.Tensor, layout: Layout) -> torch.Tensor:
    """The LED light [..., B, 2, N] with its RIN: one intensity fluctuation per LED, seen by both of its paths."""
    if not layout.rin:
        return light
    one, = scalars((1.0,), light.dtype, light.device)
    flicker = led_draw * noise[0]
    flicker += one
    return light * flicker.unsqueeze(-2)  # (not in place: draws per pass can be wider than the light)


def detector_node(d_pos: torch.Tensor, d_neg: torch.Tensor, det_draw: torch.Tensor, noise: Levels,
                  offset: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """offset + scale (D_P - D_Q + std det_draw): the node from noisy detector signals (offset = base +
    g node_lam, scale = g node_scale)."""
    diff = torch.addcmul(d_pos - d_neg, difference_std(d_pos, d_neg, noise), det_draw)
    return torch.addcmul(offset, diff, scale)


def node_drive(base: torch.Tensor, c: Constants, gain: torch.Tensor, layout: Layout
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(offset, scale): what the node makes of the optical signal at loop gain g. With detector noise,
    (base + g node_lam, g node_scale) act on D_P - D_Q; otherwise (base + g c1, g operator) act on the LED
    signals (the operator op3_t with the cubics folded in, or op_t). They change only with g, so a loop
    with constant schedules computes them once per inference (three eager calls per iteration)."""
    if layout.detector_noise:
        return base + gain * c.node_lam, c.node_scale * gain
    operator = c.op3_t if layout.led_folded and not layout.draws else c.op_t
    return base + gain * c.c1, operator * gain


def optical(t: torch.Tensor, c: Constants, drive: tuple[torch.Tensor, torch.Tensor], layout: Layout,
            key: torch.Tensor | None, counters: torch.Tensor | None) -> torch.Tensor:
    """base + g (node_scale (D_P - D_Q) + node_lam): the optical path's contribution at the node plus `base`,
    with `drive` = `node_drive(base, c, g, layout)`.

    One weight load: t [B, N] and the load's constants. A stack of loads (tiles, and passes of them):
    t [..., B, N] with constants stacked over the same leading dims (`stack_constants`), and the key
    [..., 1, 1] one stream per load and pass."""
    offset, scale = drive
    if not layout.draws and layout.led_folded:  # one product on [t, t^2, t^3]: LED cubics folded in
        t2 = t * t
        return affine(offset, torch.cat([t, t2, t2 * t], dim=-1), scale)
    if not layout.draws:
        return affine(offset, led_signals(t, c.led_coefficients, constant=False).flatten(-2), scale)
    led_draw, det_draw = normal_pair(key, counters, t.dtype)
    light = flickered(led_signals(t, c.led_coefficients, constant=True), c.noise_levels, led_draw, layout)
    if layout.detector_noise:
        return detector_node(*detector_signals(light, c.det_t, c.det_offset), det_draw, c.noise_levels, offset, scale)
    return affine(offset, (light - c.led_coefficients[3]).flatten(-2), scale)


def stack_constants(loads: list[Constants]) -> Constants:
    """The constants of several weight loads (tiles of one chip) stacked for one batched `optical`:
    matrices [T, 1, K, M], vectors [T, 1, 1, M] (the 1s broadcast over passes and rows) and the emitters'
    cubics [T, 1, 1, 4, 2, N] (each tile's module has its own); what every load shares (the nonlinearity,
    the noise levels) stays as it is."""
    def matrices(name: str) -> torch.Tensor:
        return torch.stack([getattr(c, name) for c in loads])[:, None]

    def vectors(name: str) -> torch.Tensor:
        return torch.stack([getattr(c, name) for c in loads])[:, None, None]

    first = loads[0]
    return Constants(first.sigmoid, torch.stack([c.led for c in loads])[:, None, None], matrices("op_t"), matrices("op3_t"), vectors("c1"), matrices("det_t"),
                     vectors("det_offset"), vectors("node_scale"), vectors("node_lam"), first.noise)


def stack_loads(stacks: list[Constants]) -> Constants:
    """Several weight loads' stacked tiles (`stack_constants` each) with a leading [S] for one batched
    `optical` of S loads of a program, each on its own rows (`tile_product.LoadStack`); the noise levels
    [3, S, 1, 1, 1, 1], so that noise[i] is load s's on its rows [S, T, K, G, N] (a population's loads
    differ in them); the sigmoid, which every load shares, stays as it is."""
    def loads(name: str) -> torch.Tensor:
        return torch.stack([getattr(c, name) for c in stacks])

    first = stacks[0]
    noise = torch.stack([c.noise for c in stacks], dim=1).view(-1, len(stacks), 1, 1, 1, 1)
    return Constants(first.sigmoid, *(loads(name) for name in ("led", "op_t", "op3_t", "c1", "det_t", "det_offset",
                                                                "node_scale", "node_lam")), noise)


def iteration(z: torch.Tensor, z_prev: torch.Tensor, drive: tuple[torch.Tensor, torch.Tensor], c: Constants,
              node: tuple[torch.Tensor, ...],
              key: torch.Tensor | None, counters: torch.Tensor | None, layout: Layout) -> torch.Tensor:
    """z[k+1] from z[k] (and z[k-1] for momentum).

    Args:
        z, z_prev: states [B, N], volts.
        drive: `node_drive(base, c, g, layout)` with base = inject + k0, [B, N], and g = node[0].
        c: the weight load's `Constants`.
        node: (g, alpha + gamma, gamma, low rail, high rail, response) at this iteration, 0-dim tensors.
        key, counters: this iteration's stream key (int64 0-dim) and the (sample, channel) counters
            [B, N] (`keys.sample_counters`); None when the layout draws nothing.
        layout: the stages present.
    """
    y = optical(nonlinearity(z, c.sigmoid, layout.tanh), c, drive, layout, key, counters)  # a new tensor
    y.addcmul_(z, node[1])
    if layout.momentum:
        y.addcmul_(z_prev, -node[2])
    if layout.saturate:  # (maximum / minimum: clamp with tensor bounds is 4x slower on CPUs)
        y = torch.minimum(torch.maximum(y, node[3]), node[4])
    if layout.respond:
        y = torch.lerp(z, y, node[5])
    return y
