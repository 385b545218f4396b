"""Counter-based Gaussian draws that compile into the loop's kernels.

torch's CPU generator (a Mersenne twister) is sequential and costs about as
much as the rest of a noisy loop step. A counter-based generator computes the
i-th number directly from (key, i), so the draws fuse into the compiled step
and run on every core. The stream is SplitMix64 (Steele, Lea & Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014): number i of key k is
mix(k + (i + 1) * 0x9E3779B97F4A7C15), the generator's own output sequence,
which passes BigCrush. Each 64-bit output gives two 32-bit uniforms in (0, 1]
and, by the Box-Muller transform, two independent standard normals.

All arithmetic is on int64 tensors (wrapping multiplication; logical shifts
by masking), so the same code runs eagerly and inside a traced graph.
"""

from __future__ import annotations

import torch

from aocsim.hardware.engine.scalars import scalars

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_LOW32 = 0xFFFFFFFF


def _signed(value: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def splitmix64(state: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """SplitMix64's output function on int64 states (two's complement bits).

    z = (s ^ (s >>> 30)) * MIX1; z = (z ^ (z >>> 27)) * MIX2; z ^ (z >>> 31), each logical shift an
    arithmetic one masked (torch's >> is arithmetic), in place on one new tensor and one temporary:
    `scratch` (an int64 tensor of the result's shape, overwritten: `state` itself where the caller is done
    with it) or a new one. `state` is not changed unless it is the scratch."""
    s30, s27, s31, m34, m37, m33, mix1, mix2 = scalars(_MIXING, torch.int64, state.device)
    z = state >> s30
    z &= m34
    z ^= state
    z *= mix1
    t = torch.bitwise_right_shift(z, s27, out=scratch) if scratch is not None else z >> s27
    t &= m37
    z ^= t
    z *= mix2
    torch.bitwise_right_shift(z, s31, out=t)
    t &= m33
    return z.bitwise_xor_(t)


def _polar(base: torch.Tensor, offsets: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Box-Muller's radius sqrt(-2 log u1) and angle 2 pi u2 of numbers base + offsets of the stream.

    In place on the int64 tensors where it can be (eager kernels allocate per result: fewer passes over
    memory). Each uniform is one product of the integer k + 1 and a 0-dim float scale, which converts k + 1
    as it multiplies (the same rounding as converting first); the angle's 2 pi is in that scale, exactly,
    since 2^-32 only moves the exponent."""
    state = torch.add(base, offsets, alpha=_signed(GOLDEN_GAMMA))  # (wrapping, as the product and sum)
    bits = splitmix64(state, scratch=state)
    s32, low32, one = scalars(_HALVES, torch.int64, base.device)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    unit = 2.0 ** -32  # 32-bit uniforms in (0, 1]: u = (k + 1) / 2^32
    to_unit, to_angle, minus_two = scalars((unit, unit * _TWO_PI[work], -2.0), work, base.device)
    u1 = torch.mul(torch.bitwise_and(bits, low32, out=state).add_(one), to_unit)
    bits >>= s32  # the high half: an arithmetic shift, masked
    angle = torch.mul(bits.bitwise_and_(low32).add_(one), to_angle)
    return u1.log_().mul_(minus_two).sqrt_(), angle


# the integer operands, as kept 0-dim int64 tensors (`scalars`): SplitMix64's shifts, masks and multipliers;
# the uniforms' shift, mask and 1
_MIXING = (30, 27, 31, (1 << 34) - 1, (1 << 37) - 1, (1 << 33) - 1, _signed(_MIX1), _signed(_MIX2))
_HALVES = (32, _LOW32, 1)
_TWO_PI = {work: float(torch.tensor(2.0 * torch.pi, dtype=work)) for work in (torch.float32, torch.float64)}  # as each rounds it


def normal_pair(base: torch.Tensor, offsets: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent standard-normal tensors shaped like `offsets`: numbers base + offsets of the stream.

    `offsets` is data (`keys.sample_counters`), not an index expression, so that compilers
    do not try to reason about the wrapping 64-bit products symbolically. `base` broadcasts with it
    (a key per tile and pass). The arithmetic after the first sum runs in place on its temporaries.
    """
    radius, angle = _polar(base, offsets, dtype)
    first = torch.cos(angle).mul_(radius)
    return first.to(dtype), angle.sin_().mul_(radius).to(dtype)


def normal(base: torch.Tensor, offsets: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The first of `normal_pair` alone (its cosine half), for a stream that uses no second."""
    radius, angle = _polar(base, offsets, dtype)
    return torch.cos(angle).mul_(radius).to(dtype)
